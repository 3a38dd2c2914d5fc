"""Flavor tolerations (docs/worker.md, "Tolerations"): the dedication taints common to the
flavor's nodes, never a lifecycle taint, never a blanket ``Exists``."""

from __future__ import annotations

from typing import Any

from gpustack_operator.domain.chain.flavors import desired_resource_flavor
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.node.taints import flavor_tolerations
from tests.unit.domain.nodes import planned_flavors

from .nodes import make_node, t4
from .test_desired import converged

MFRS = default_manufacturers()
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TEAM = {"key": "team", "effect": "NoExecute"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
SCALE_DOWN = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}
PREFER = {"key": "spot", "effect": "PreferNoSchedule"}
DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
SPOT_NOTICE = {"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"}


def tainted(node: dict[str, Any], *taints: dict[str, str]) -> dict[str, Any]:
    node.setdefault("spec", {})["taints"] = list(taints)
    return node


def t4_nodes(*taint_sets: tuple[dict[str, str], ...]) -> list[dict[str, Any]]:
    nodes = [
        tainted(make_node(f"n{i}", cpu="8", memory="31Gi", storage="97Gi", labels=t4(2)), *ts)
        for i, ts in enumerate(taint_sets)
    ]
    return converged(*nodes)


def device_flavor(flavors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (name,) = [n for n in flavors if "nvidia" in n]
    return flavors[name]


def test_only_taints_common_to_every_node_are_tolerated() -> None:
    nodes = t4_nodes((GPU, TEAM), (GPU,), (TEAM, GPU))
    flavor = device_flavor(planned_flavors(nodes, MFRS))
    assert flavor["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
    # The same flavor from the controller's path (its nodes, in any order).
    name = flavor["metadata"]["name"]
    alone = desired_resource_flavor(name, list(reversed(nodes)), MFRS)
    assert alone == flavor


def test_lifecycle_and_soft_taints_are_never_tolerated() -> None:
    nodes = t4_nodes((UNREACHABLE, NOT_READY, SCALE_DOWN, PREFER, DISRUPTED, SPOT_NOTICE, TEAM))
    flavor = device_flavor(planned_flavors(nodes, MFRS))
    assert flavor["spec"]["tolerations"] == [
        {"key": "team", "operator": "Exists", "effect": "NoExecute"}
    ]


def test_untainted_nodes_get_no_toleration() -> None:
    flavors = planned_flavors(t4_nodes(()), MFRS)
    assert all(f["spec"]["tolerations"] == [] for f in flavors.values())
    assert not any(
        t == {"operator": "Exists"} for f in flavors.values() for t in f["spec"]["tolerations"]
    )


def test_policy_limits_the_keys() -> None:
    nodes = t4_nodes((GPU, TEAM))
    only_gpu = flavor_tolerations(nodes, ("nvidia.com/gpu",))
    assert [t.key for t in only_gpu] == ["nvidia.com/gpu"]
    assert flavor_tolerations(nodes, ()) == ()
    assert [t.key for t in flavor_tolerations(nodes)] == ["nvidia.com/gpu", "team"]
    flavor = device_flavor(planned_flavors(nodes, MFRS, tolerations=()))
    assert flavor["spec"]["tolerations"] == []


def test_worker_flag_sets_the_policy() -> None:
    from gpustack_operator.cli import build_parser
    from gpustack_operator.commands.worker import build_config

    def policy(*argv: str) -> Any:
        return build_config(
            build_parser({}).parse_args(["worker", *argv])
        ).policy.flavor_tolerations

    assert policy() is None
    assert policy("--flavor-tolerations", "none") == ()
    assert policy("--flavor-tolerations", "nvidia.com/gpu,team") == ("nvidia.com/gpu", "team")
