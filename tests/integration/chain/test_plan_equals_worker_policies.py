"""``plan`` equals the worker under every chain policy, not just the defaults.

Hypothesis draws small clusters (tainted nodes among them, cards a device manager already
labelled, simulated cards the device-manager agents label, or the Nodes of a vCluster tenant
on shared host nodes, labelled by the host's NFD and GPU Feature Discovery) and a chain
policy (manufacturers, system and excluded namespaces, Kueue version, quota resources, flavor
tolerations, tenancy, the virtual scheduler, tenant quota caps; docs/configuration.md, "Chain
policy"). The simulated worker runs under that policy and must converge to exactly what
``plan`` computes for the same nodes and policy. Each example starts a simulated cluster, so
there are few of them; the explicit examples cover a capped shared-node tenant and a tenancy
set against what the Nodes say.

Simulated cards are drawn only while NVIDIA is profiled in an ordinary cluster: ``plan``
refuses a ``sim.gpustack.ai/devices`` annotation naming a manufacturer the policy leaves
out, which is an input error, not a chain to compare, and no device manager runs in a tenant.

Shown to catch a dropped option: ``plan_state`` passing ``desired_state`` its policy with
``tenant_quota_caps={}`` fails the capped tenant (the worker caps the A10G queue at 1 card,
``plan`` gives 8); with ``virtual_scheduler=False``, the virtual-scheduler tenant (``plan``
merges the 8- and 16-CPU A10G hosts into one pool, the worker tells them apart by the
tenant's own instance-type label); ignoring a set tenancy (``tenancy=None``), the tenant set
to ordinary (``plan`` builds the tenant's chain, the worker the ordinary one).
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.queues import QuotaResources
from gpustack_operator.domain.chain.teams import parse_teams
from gpustack_operator.domain.chain.tenancy import SYNCED_NODE_LABEL, Tenancy
from gpustack_operator.domain.labels import HOST_LABELS_ANNOTATION
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.worker.support import MANUFACTURERS, fast_config, node

TIMEOUT = 30.0
NAMESPACES = ["default", "team-a", "team-b"]
TAINTS = (
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "ml", "effect": "NoExecute"},
    {"key": "team", "value": "a", "effect": "NoSchedule"},
)
SIM_CARDS = (("Tesla T4", 15360), ("NVIDIA H100 80GB HBM3", 81559))
CARDS = (("Tesla T4", 1), ("Tesla T4", 2), ("NVIDIA A10G", 4))
QUOTA_CAPS = ({}, {"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 3, "amd.com/gpu": 0})


def policies() -> st.SearchStrategy[ChainPolicy]:
    return st.builds(
        lambda names, system, excluded, version, quota, tolerations, tenancy, virtual, caps: (
            ChainPolicy(
                manufacturers={n: MANUFACTURERS[n] for n in names},
                system_namespace=system,
                excluded_namespaces=excluded,
                kueue_version=version,
                quota_resources=quota,
                flavor_tolerations=tolerations,
                tenancy=tenancy,
                virtual_scheduler=virtual,
                tenant_quota_caps=caps,
            )
        ),
        st.sampled_from((("nvidia",), ("amd",), ("amd", "nvidia"), tuple(MANUFACTURERS))),
        st.sampled_from(("gpustack-system", "ops")),
        st.sampled_from(((), ("team-a",), ("kube-system", "team-b"))),
        st.sampled_from((None, KueueVersion.V1BETA2, KueueVersion.V1BETA1)),
        st.sampled_from(tuple(QuotaResources)),
        st.sampled_from((None, (), ("nvidia.com/gpu",), ("dedicated", "team"))),
        st.sampled_from((None, None, Tenancy.ORDINARY, Tenancy.SHARED_NODES)),
        st.booleans(),
        st.sampled_from(QUOTA_CAPS),
    )


def host_copy(obj: dict[str, Any], cards: tuple[str, int] | None) -> dict[str, Any]:
    """*obj* as a shared-node tenant sees the host's Node: NFD's CPU labels and GPU Feature
    Discovery's labels, all host-owned; a tenant-written label the host never gets; none of
    the operator's own labels (docs/tenants.md, "Shared host nodes")."""
    labels = {
        k: v
        for k, v in obj["metadata"]["labels"].items()
        if not k.startswith(("acceleratable.feature.gpustack.ai/", "feature.gpustack.ai/"))
    }
    if cards is not None:
        product, count = cards
        labels |= {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": product.replace(" ", "-"),
            "nvidia.com/gpu.count": str(count),
            "nvidia.com/gpu.memory": "15360" if "T4" in product else "23028",
        }
    labels[SYNCED_NODE_LABEL] = "tenant-a"
    owned = "\n".join(sorted(labels))
    # Written in the tenant, never on the host: only the virtual scheduler matches them.
    labels["team.example.com/owner"] = "ml"
    labels["node.kubernetes.io/instance-type"] = f"tenant-{obj['status']['capacity']['cpu']}c"
    obj["metadata"]["labels"] = labels
    obj["metadata"]["annotations"] = {HOST_LABELS_ANNOTATION: owned}
    return obj


@st.composite
def clusters(draw: st.DrawFn, simulated_cards: bool) -> list[dict[str, Any]]:
    """Two to five nodes; some tainted, some with cards, some of them simulated; or the
    host's Nodes as a shared-node tenant sees them."""
    tenant = draw(st.booleans())
    kinds = ("cpu", "cards", "sim") if simulated_cards and not tenant else ("cpu", "cards")
    nodes = []
    for i in range(draw(st.integers(2, 5))):
        kind = draw(st.sampled_from(kinds))
        cards = draw(st.sampled_from(CARDS))
        obj = node(
            f"node-{i}",
            cpu=draw(st.sampled_from(("8", "16"))),
            cards=cards if kind == "cards" else None,
        )
        if tenant:
            obj = host_copy(obj, cards if kind == "cards" else None)
        if kind == "sim":
            product, memory = draw(st.sampled_from(SIM_CARDS))
            devices = [{"manufacturer": "nvidia", "name": product, "memoryMiB": memory, "count": 2}]
            obj["metadata"]["annotations"] = {"sim.gpustack.ai/devices": json.dumps(devices)}
        taints = draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=lambda t: t["key"]))
        if taints:
            obj["spec"] = {"taints": taints}
        nodes.append(obj)
    return nodes


@st.composite
def cases(draw: st.DrawFn) -> tuple[ChainPolicy, list[dict[str, Any]]]:
    policy = draw(policies())
    ordinary = policy.tenancy in (None, Tenancy.ORDINARY)
    return policy, draw(clusters("nvidia" in policy.manufacturers and ordinary))


def _tenant_nodes() -> list[dict[str, Any]]:
    """Two A10G hosts, one tainted, and a CPU host, as a shared-node tenant sees them."""
    nodes = [
        host_copy(node("gpu-a", cards=("NVIDIA A10G", 4)), ("NVIDIA A10G", 4)),
        host_copy(node("gpu-b", cpu="8", cards=("NVIDIA A10G", 4)), ("NVIDIA A10G", 4)),
        host_copy(node("cpu-a"), None),
    ]
    nodes[1]["spec"] = {"taints": [TAINTS[0]]}
    return nodes


CAPPED_TENANT = (
    ChainPolicy(
        manufacturers={"nvidia": MANUFACTURERS["nvidia"]},
        tenancy=None,
        tenant_quota_caps={"nvidia.com/gpu": 1},
    ),
    _tenant_nodes(),
)
VIRTUAL_SCHEDULER_TENANT = (
    ChainPolicy(manufacturers={"nvidia": MANUFACTURERS["nvidia"]}, virtual_scheduler=True),
    _tenant_nodes(),
)
TEAMS_DECLARED = (
    ChainPolicy(
        manufacturers=dict(MANUFACTURERS),
        teams=parse_teams(
            "teams:\n"
            "- {name: a, namespaces: [team-a], borrow: false,"
            " shares: [{pools: {manufacturer: nvidia}, share: 60%}]}\n"
            "- {name: b, namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: team-b}},"
            " lend: false, shares: [{pools: {model: tesla-t4}, weight: 1}]}\n",
            tuple(MANUFACTURERS),
        ),
    ),
    [
        node("gpu-t4", cards=("Tesla T4", 2)),
        node("gpu-a10g", cpu="48", cards=("NVIDIA A10G", 4)),
        node("cpu-a"),
    ],
)
"""Teams (docs/teams.md): team queues, the Cohort's remainder, LocalQueues per team."""
TENANT_SET_ORDINARY = (
    ChainPolicy(manufacturers=dict(MANUFACTURERS), tenancy=Tenancy.ORDINARY),
    _tenant_nodes(),
)


async def converged_and_planned(
    policy: ChainPolicy, nodes: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The chain the worker converged to under *policy*, read back, and ``plan``'s."""
    config = fast_config(policy=policy)
    async with SimCluster(nodes, NAMESPACES, worker_config=config) as cluster:
        await cluster.converge(TIMEOUT)  # raises NotConverged naming what differs
        actual = await cluster.read_back()
        planned = cluster.expected()
    return planned.objects(), actual.objects()


def _names(objects: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted(
        (
            o["apiVersion"],
            o["kind"],
            o["metadata"].get("namespace", "") + "/" + o["metadata"]["name"],
        )
        for o in objects
    )


@settings(
    max_examples=8,
    deadline=None,
    database=None,
    # Each example runs a cluster: a failure is reported as drawn, not shrunk for minutes.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(cases())
@example(CAPPED_TENANT)
@example(VIRTUAL_SCHEDULER_TENANT)
@example(TENANT_SET_ORDINARY)
@example(TEAMS_DECLARED)
def test_plan_equals_the_worker_under_random_policies(
    case: tuple[ChainPolicy, list[dict[str, Any]]],
) -> None:
    policy, nodes = case
    planned, actual = anyio.run(converged_and_planned, policy, nodes)
    # converge() compared the specs; the objects themselves must be the same set too.
    assert _names(actual) == _names(planned)
    version = (policy.kueue_version or KueueVersion.V1BETA2).api_version
    assert {o["apiVersion"] for o in planned if o["kind"] != "NodeFeature"} <= {version}
    tolerated = {
        t["key"] for o in planned if o["kind"] == "ResourceFlavor" for t in o["spec"]["tolerations"]
    }
    if policy.flavor_tolerations is not None:
        assert tolerated <= set(policy.flavor_tolerations)
    local_namespaces = {o["metadata"]["namespace"] for o in planned if o["kind"] == "LocalQueue"}
    assert not local_namespaces & set(policy.namespaces_without_queues)
    tenant = policy.tenant_settings(nodes)
    if tenant.is_tenant:  # no NodeFeature in a tenant; device quota within the caps
        assert not [o for o in actual if o["kind"] == "NodeFeature"]
        for o in planned:
            if o["kind"] != "ClusterQueue":
                continue
            for group in o["spec"]["resourceGroups"]:
                for flavor in group["flavors"]:
                    for r in flavor["resources"]:
                        cap = tenant.quota_caps.get(r["name"])
                        assert cap is None or int(r["nominalQuota"]) <= cap
