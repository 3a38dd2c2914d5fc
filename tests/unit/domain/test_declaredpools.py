"""Declared pools (docs/autoscaling.md): queues for autoscaled pools with no node yet.

The dumps are built from published facts (examples/autoscaling/pools-at-zero.yaml and
examples/autoscaling/declared-pools.yaml cite them): Karpenter NodePools on EKS, a Cluster
API node group with the cluster autoscaler's scale-from-zero hints, a GKE pool a person
declared.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.commands.plan import read_cluster_input
from gpustack_operator.commands.policy_flags import read_declared_pools
from gpustack_operator.domain.chain.declaredpools import (
    CLASS_ATOMIC_SCALE_UP,
    CLASS_GKE_QUEUED,
    PoolRejection,
    karpenter_pool,
    parse_declarations,
    validate_declared_pools,
)
from gpustack_operator.domain.chain.poolchain import ProvisioningSettings
from gpustack_operator.domain.declarationtext import DeclarationError
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.plan.desired import DesiredState
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "autoscaling"
MFRS = default_manufacturers()


def _policy(provisioning: bool | None = None) -> ChainPolicy:
    base = ChainPolicy(manufacturers=MFRS)
    pools = read_declared_pools(EXAMPLES / "declared-pools.yaml", base.manufacturers_by_resource)
    return replace(
        base, declared_pools=pools, provisioning=ProvisioningSettings(served=provisioning)
    )


def _state(
    nodes: list[dict[str, Any]] | None = None, provisioning: bool | None = None
) -> DesiredState:
    dump = read_cluster_input(EXAMPLES / "pools-at-zero.yaml")
    return plan_state(
        [*dump.nodes, *(nodes or [])],
        dump.namespaces,
        _policy(provisioning),
        pool_objects=dump.pools,
    )


def _device_quota(queue: dict[str, Any], resource: str = "nvidia.com/gpu") -> str:
    (group,) = queue["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    return str(next(r["nominalQuota"] for r in flavor["resources"] if r["name"] == resource))


def _queues(state: DesiredState) -> dict[str, dict[str, Any]]:
    return {q["metadata"]["name"]: q for q in state.cluster_queues}


def _h100_node(name: str, pool: str = "h100") -> dict[str, Any]:
    """A p5.48xlarge node as Karpenter launches it (examples/managed-clouds.yaml's labels)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "karpenter.k8s.aws/instance-gpu-count": "8",
                "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
                "karpenter.k8s.aws/instance-gpu-memory": "81920",
                "karpenter.k8s.aws/instance-gpu-name": "h100",
                "karpenter.sh/capacity-type": "on-demand",
                "karpenter.sh/nodepool": pool,
                "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
                "feature.node.kubernetes.io/cpu-model.family": "25",
                "feature.node.kubernetes.io/cpu-model.id": "1",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
            },
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {
                "cpu": "192",
                "memory": "2147483648Ki",
                "ephemeral-storage": "3984588800Ki",
                "nvidia.com/gpu": "8",
                "pods": "110",
            },
            "capacity": {"cpu": "192", "memory": "2147483648Ki", "nvidia.com/gpu": "8"},
        },
    }


def test_each_sound_pool_gets_a_queue_with_its_declared_maximum() -> None:
    state = _state()
    queues = _queues(state)
    assert {n: _device_quota(q) for n, q in queues.items()} == {
        "pool-karpenter-h100": "16",  # limits nvidia.com/gpu
        "pool-karpenter-l40s": "12",  # limits nodes 3 x 4 GPUs
        "pool-capi-md-a100": "10",  # max-size 5 x gpu-count 2
        "pool-declared-l4-flex": "8",  # maxNodes 4 x perNode 2
    }
    capi = queues["pool-capi-md-a100"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert capi[0] == {"name": "cpu", "nominalQuota": "80"}  # 5 x capacity cpu 16
    flavors = {f["metadata"]["name"]: f for f in state.resource_flavors}
    assert flavors["pool-karpenter-h100"]["spec"]["nodeLabels"] == {"karpenter.sh/nodepool": "h100"}
    assert flavors["pool-karpenter-h100"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert flavors["pool-capi-md-a100"]["spec"]["nodeLabels"] == {
        "node.cluster.x-k8s.io/pool": "md-a100"
    }
    assert flavors["pool-declared-l4-flex"]["spec"]["nodeLabels"] == {
        "cloud.google.com/gke-nodepool": "l4-flex"
    }
    # Every queue reaches the namespace in the dump.
    assert {lq["spec"]["clusterQueue"] for lq in state.local_queues} == set(queues)


def test_a_pool_allowing_two_models_gets_no_queue_and_a_reason_naming_the_fix() -> None:
    state = _state()
    (rejection,) = state.pool_rejections
    assert rejection.key == "karpenter.inference-mixed"
    assert "several GPU models (a10g, l4)" in rejection.reason
    assert "karpenter.k8s.aws/instance-gpu-name In [<one model>]" in rejection.reason
    assert not any("inference-mixed" in q["metadata"]["name"] for q in state.cluster_queues)


def test_no_device_limit_and_no_node_limit_is_rejected() -> None:
    dump = read_cluster_input(EXAMPLES / "pools-at-zero.yaml")
    nodepool = copy.deepcopy(next(p for p in dump.pools if p["metadata"]["name"] == "h100"))
    nodepool["spec"]["limits"] = {"cpu": "1000"}
    result = karpenter_pool(nodepool)
    assert isinstance(result, PoolRejection)
    assert "spec.limits.nvidia.com/gpu" in result.reason
    assert "spec.limits.nodes" in result.reason


def test_a_cpu_nodepool_is_no_accelerator_pool() -> None:
    nodepool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
                    ]
                }
            },
            "limits": {"cpu": "1000"},
        },
    }
    assert karpenter_pool(nodepool) is None


def _chain_names(state: DesiredState) -> dict[str, set[str]]:
    return {
        "flavors": {o["metadata"]["name"] for o in state.resource_flavors},
        "cohorts": {o["metadata"]["name"] for o in state.cohorts},
        "queues": {o["metadata"]["name"] for o in state.cluster_queues},
        "local": {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in state.local_queues},
    }


def test_nodes_that_appear_fall_in_the_pool_flavor_nothing_renamed() -> None:
    at_zero = _state()
    at_two = _state([_h100_node("ip-10-0-1-1"), _h100_node("ip-10-0-1-2")])
    assert _chain_names(at_two) == _chain_names(at_zero)
    # The quota stays the declared maximum; the flavor is the same object.
    assert _device_quota(_queues(at_two)["pool-karpenter-h100"]) == "16"
    flavor = next(
        f for f in at_two.resource_flavors if f["metadata"]["name"] == "pool-karpenter-h100"
    )
    assert flavor == next(
        f for f in at_zero.resource_flavors if f["metadata"]["name"] == "pool-karpenter-h100"
    )


def test_a_live_count_above_the_declared_maximum_still_counts() -> None:
    state = _state([_h100_node(f"ip-10-0-1-{i}") for i in range(3)])  # 24 GPUs > 16
    assert _device_quota(_queues(state)["pool-karpenter-h100"]) == "24"


def test_a_node_of_no_declared_pool_keeps_its_own_flavor() -> None:
    state = _state([_h100_node("ip-10-0-9-9", pool="accelerated")])
    own = [f for f in state.resource_flavors if not f["metadata"]["name"].startswith("pool-")]
    assert own, "a Karpenter node of an undeclared NodePool is pooled from its labels"


def test_provisioning_checks_scoped_to_their_flavors_where_served() -> None:
    state = _state(provisioning=True)
    checks = {c["metadata"]["name"]: c for c in state.admission_checks}
    configs = {c["metadata"]["name"]: c for c in state.provisioning_configs}
    # Karpenter implements no ProvisioningRequest class: its pools get no check.
    assert set(checks) == set(configs) == {"pool-capi-md-a100", "pool-declared-l4-flex"}
    assert configs["pool-declared-l4-flex"]["spec"]["provisioningClassName"] == CLASS_GKE_QUEUED
    assert configs["pool-capi-md-a100"]["spec"]["provisioningClassName"] == CLASS_ATOMIC_SCALE_UP
    for name, config in configs.items():
        assert config["spec"]["managedResources"] == ["nvidia.com/gpu"]
        assert config["spec"]["retryStrategy"]["backoffLimitCount"] == 3
        assert checks[name]["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
        assert checks[name]["spec"]["parameters"]["name"] == name
        queue = _queues(state)[name]
        assert queue["spec"]["admissionChecksStrategy"] == {
            "admissionChecks": [{"name": name, "onFlavors": [name]}]
        }
    assert "admissionChecksStrategy" not in _queues(state)["pool-karpenter-h100"]["spec"]


def test_gke_queued_provisioning_pins_pods_to_their_requests_nodes() -> None:
    """Kueue's provisioning docs, "PodSet updates": GKE labels the nodes it adds for a
    ProvisioningRequest with its ResizeRequestName; without podSetUpdates a Job's Pods could
    land on nodes provisioned for another Job's request."""
    configs = {c["metadata"]["name"]: c for c in _state(provisioning=True).provisioning_configs}
    assert configs["pool-declared-l4-flex"]["spec"]["podSetUpdates"] == {
        "nodeSelector": [
            {
                "key": "autoscaling.gke.io/provisioning-request",
                "valueFromProvisioningClassDetail": "ResizeRequestName",
            }
        ]
    }
    # best-effort-atomic-scale-up publishes no such detail: nothing to select on.
    assert "podSetUpdates" not in configs["pool-capi-md-a100"]["spec"]


@pytest.mark.parametrize("served", [None, False])
def test_no_check_where_provisioning_requests_are_not_served(served: bool | None) -> None:
    state = _state(provisioning=served)
    assert state.admission_checks == [] and state.provisioning_configs == []
    assert all("admissionChecksStrategy" not in q["spec"] for q in state.cluster_queues)


def test_limits_written_as_numbers_count_as_strings_do() -> None:
    """Karpenter's ``spec.limits`` are int-or-string: ``16`` comes back from the API as a
    number and bounds the pool as ``"16"`` does."""
    dump = read_cluster_input(EXAMPLES / "pools-at-zero.yaml")
    for name in ("h100", "l40s"):
        nodepool = next(p for p in dump.pools if p["metadata"]["name"] == name)
        written = karpenter_pool(nodepool)
        numbers = copy.deepcopy(nodepool)
        numbers["spec"]["limits"] = {
            k: int(v) if str(v).isdigit() else v for k, v in nodepool["spec"]["limits"].items()
        }
        assert any(isinstance(v, int) for v in numbers["spec"]["limits"].values())
        as_numbers = karpenter_pool(numbers)
        assert not isinstance(as_numbers, PoolRejection), as_numbers
        assert not isinstance(written, PoolRejection)
        assert as_numbers.max_devices == written.max_devices


def test_a_declared_pool_with_no_room_per_node_names_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    pool = {
        "name": "p",
        "nodeSelector": {"cloud.google.com/gke-nodepool": "p"},
        "accelerator": {"perNode": 1},
        "maxNodes": 2,
        "cpu": "-8",
        "memory": "1Gi",
    }
    path.write_text(yaml.safe_dump({"pools": [pool]}))
    by_resource = ChainPolicy(manufacturers=MFRS).manufacturers_by_resource
    with pytest.raises(ValueError, match="above 0"):  # one bad pool refuses the file
        read_declared_pools(path, by_resource)
    pool.update(cpu="8", nodeSelector={"cloud.google.com/gke-nodepool": None})
    path.write_text(yaml.safe_dump({"pools": [pool]}))
    with pytest.raises(ValueError, match="as strings"):
        read_declared_pools(path, by_resource)


def test_a_malformed_declaration_names_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump({"pools": [{"name": "Bad_Name"}]}))
    with pytest.raises(ValueError, match="DNS label"):
        read_declared_pools(path, ChainPolicy(manufacturers=MFRS).manufacturers_by_resource)
    path.write_text(yaml.safe_dump({"pools": [{"name": "p", "nodeSelector": {"a": "b"}}]}))
    with pytest.raises(ValueError, match="perNode"):
        read_declared_pools(path, ChainPolicy(manufacturers=MFRS).manufacturers_by_resource)


def test_a_pool_past_kueues_flavor_limits_is_rejected_alone() -> None:
    """A ResourceFlavor holds at most 8 nodeLabels and 8 tolerations: a pool past either is
    rejected with the reason, and every other pool keeps its queue (it used to stop the
    whole chain: plan exited 2, the worker's pool reconcile failed for every pool)."""
    dump = read_cluster_input(EXAMPLES / "pools-at-zero.yaml")
    tainted = copy.deepcopy(next(p for p in dump.pools if p["metadata"]["name"] == "h100"))
    tainted["metadata"]["name"] = "h100-tainted"
    tainted["spec"]["template"]["spec"]["taints"] = [
        {"key": f"example.com/t{i}", "value": "x", "effect": "NoSchedule"} for i in range(9)
    ]
    base = _policy()
    wide = {
        "pools": [
            {
                "name": "wide",
                "nodeSelector": {f"example.com/l{i}": "x" for i in range(9)},
                "accelerator": {"product": "NVIDIA L4", "resource": "nvidia.com/gpu", "perNode": 2},
                "cpu": "23",
                "memory": "86Gi",
                "maxNodes": 4,
            }
        ]
    }
    declared = [*base.declared_pools, *parse_declarations(wide, base.manufacturers_by_resource)]
    node = _h100_node("ip-10-0-7-7", pool="none")
    node["metadata"]["labels"].update({f"example.com/l{i}": "x" for i in range(9)})
    state = plan_state(
        [*dump.nodes, node],
        dump.namespaces,
        replace(base, declared_pools=declared),
        pool_objects=[*dump.pools, tainted],
    )
    reasons = {r.key: r.reason for r in state.pool_rejections}
    assert "at most 8 tolerations" in reasons["karpenter.h100-tainted"]
    assert reasons["karpenter.h100-tainted"].startswith("NodePool h100-tainted: its nodes carry 9")
    assert "at most 8 nodeLabels" in reasons["declared.wide"]
    queues = _queues(state)
    assert {"pool-karpenter-h100", "pool-declared-l4-flex"} <= set(queues)
    assert not {"pool-karpenter-h100-tainted", "pool-declared-wide"} & set(queues)
    (explanation,) = [e for e in state.explanations if e.node == "ip-10-0-7-7"]
    said = [r for r in explanation.reasons if r.code == "declared-pool-rejected"]
    assert len(said) == 1 and "declared.wide gets no queue" in said[0].message


POOL_TEXT = """
pools:
  - name: l4
    nodeSelector: {cloud.google.com/gke-nodepool: l4}
    accelerator: {product: NVIDIA L4, resource: nvidia.com/gpu, perNode: 2}
    cpu: "8"
    memory: 32Gi
    maxNodes: 4
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("pools: []\n#" + "x" * 870_000, "256 KiB allowed", id="0.83-MB"),
        pytest.param(
            'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
            + "".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n"
                for i in range(8)
            ),
            "aliases expanded",
            id="alias-bomb",
        ),
        pytest.param("pools: " + "[" * 10_000 + "]" * 10_000, "deeper than 16", id="deep"),
        pytest.param(POOL_TEXT + "\x00", "not valid YAML", id="nul"),
        pytest.param(POOL_TEXT.replace("perNode: 2", "perNode: [2]"), "perNode", id="list"),
        pytest.param(
            POOL_TEXT.replace("{cloud.google.com/gke-nodepool: l4}", "[l4]"),
            "give nodeSelector",
            id="selector-list",
        ),
        pytest.param(
            POOL_TEXT.replace("{cloud.google.com/gke-nodepool: l4}", "{'bad key!': l4}"),
            "is not a label key and value",
            id="selector-key",
        ),
        pytest.param(POOL_TEXT + POOL_TEXT.split("pools:\n")[1], "declared twice", id="twice"),
        pytest.param("pools: {not: a list}", "a mapping with a list 'pools'", id="not-a-list"),
    ],
)
def test_every_bad_pools_text_is_one_refusal_with_a_message(text: str, message: str) -> None:
    """docs/autoscaling.md, "Pools declared by a person": the one validation of the worker's
    ConfigMap and ``--declared-pools FILE`` refuses each bad shape with a short message,
    never another exception, and quickly whatever the size."""
    by_resource = ChainPolicy(manufacturers=MFRS).manufacturers_by_resource
    assert len(validate_declared_pools(POOL_TEXT, by_resource)) == 1
    with pytest.raises(DeclarationError) as refused:
        validate_declared_pools(text, by_resource)
    assert message in str(refused.value) and len(str(refused.value)) <= 600


def test_a_new_pool_kind_is_one_entry_in_the_table() -> None:
    """A new pool source is an entry of ``POOL_KINDS`` (with its reader): ``plan`` reads its
    objects and builds their pool's chain, the worker discovers and watches the kind at each
    version and the simulator serves its stand-in CRD; its RBAC grant is the one more file
    (tests/integration/bootstrap/test_rbac.py reads the same table)."""
    from gpustack_operator.controllers.declaredpool import all_pool_kinds
    from gpustack_operator.domain.chain.declaredpools import (
        POOL_KINDS,
        PoolKind,
        PoolObjects,
        PoolResult,
        PoolSource,
        is_pool_object,
    )
    from gpustack_sim.standins.crds import autoscaling_stand_in_crds

    dump = read_cluster_input(EXAMPLES / "pools-at-zero.yaml")
    nodepool = next(p for p in dump.pools if p["metadata"]["name"] == "h100")
    example = {**copy.deepcopy(nodepool), "apiVersion": "pools.example.com/v1alpha1"}
    example["kind"] = "ExamplePool"
    example["metadata"]["name"] = "h100-example"

    def read(obj: dict[str, Any], _: PoolObjects) -> PoolResult | None:
        """Example pools say what Karpenter's NodePools say."""
        return karpenter_pool(obj)

    def chain() -> set[str]:
        state = plan_state([], dump.namespaces, ChainPolicy(MFRS), pool_objects=[example])
        return set(_queues(state))

    assert not is_pool_object(example) and not chain()
    kind = PoolKind(
        PoolSource.KARPENTER, "pools.example.com", "ExamplePool", "examplepools", False,
        ("v1alpha1",), read,
    )  # fmt: skip
    POOL_KINDS.append(kind)
    try:
        assert is_pool_object(example)
        assert chain() == {"pool-karpenter-h100-example"}
        assert ("pools.example.com", "v1alpha1", "examplepools") in {
            (r.group, r.version, r.plural) for r in all_pool_kinds()
        }
        assert "examplepools.pools.example.com" in {
            c["metadata"]["name"] for c in autoscaling_stand_in_crds(provisioning=False)
        }
    finally:
        POOL_KINDS.remove(kind)
