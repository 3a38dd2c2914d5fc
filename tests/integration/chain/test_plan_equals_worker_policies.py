"""``plan`` equals the worker under every chain policy, not just the defaults.

Hypothesis draws small clusters (tainted nodes among them, cards a device manager already
labelled, simulated cards the device-manager agents label) and a chain policy (manufacturers,
system and excluded namespaces, Kueue version, quota resources, flavor tolerations;
docs/configuration.md, "Chain policy"). The simulated worker runs under that policy and must
converge to exactly what ``plan`` computes for the same nodes and policy. Each example starts
a simulated cluster, so there are few of them.

Simulated cards are drawn only while NVIDIA is profiled: ``plan`` refuses a
``sim.gpustack.ai/devices`` annotation naming a manufacturer the policy leaves out, which is
an input error, not a chain to compare.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gpustack_operator.domain.kueue import KueueVersion
from gpustack_operator.domain.policy import ChainPolicy
from gpustack_operator.domain.queues import QuotaResources
from gpustack_operator.simcluster.cluster import SimCluster
from tests.integration.worker.support import MANUFACTURERS, fast_config, node

TIMEOUT = 30.0
NAMESPACES = ["default", "team-a", "team-b"]
TAINTS = (
    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "ml", "effect": "NoExecute"},
    {"key": "team", "value": "a", "effect": "NoSchedule"},
)
SIM_CARDS = (("Tesla T4", 15360), ("NVIDIA H100 80GB HBM3", 81559))


def policies() -> st.SearchStrategy[ChainPolicy]:
    return st.builds(
        lambda names, system, excluded, version, quota, tolerations: ChainPolicy(
            manufacturers={n: MANUFACTURERS[n] for n in names},
            system_namespace=system,
            excluded_namespaces=excluded,
            kueue_version=version,
            quota_resources=quota,
            flavor_tolerations=tolerations,
        ),
        st.sampled_from((("nvidia",), ("amd",), ("amd", "nvidia"), tuple(MANUFACTURERS))),
        st.sampled_from(("gpustack-system", "ops")),
        st.sampled_from(((), ("team-a",), ("kube-system", "team-b"))),
        st.sampled_from((None, KueueVersion.V1BETA2, KueueVersion.V1BETA1)),
        st.sampled_from(tuple(QuotaResources)),
        st.sampled_from((None, (), ("nvidia.com/gpu",), ("dedicated", "team"))),
    )


@st.composite
def clusters(draw: st.DrawFn, simulated_cards: bool) -> list[dict[str, Any]]:
    """Two to five nodes; some tainted, some with cards, some of them simulated."""
    nodes = []
    for i in range(draw(st.integers(2, 5))):
        kind = draw(
            st.sampled_from(("cpu", "cards", "sim") if simulated_cards else ("cpu", "cards"))
        )
        cards = draw(st.sampled_from((("Tesla T4", 1), ("Tesla T4", 2), ("NVIDIA A10G", 4))))
        obj = node(
            f"node-{i}",
            cpu=draw(st.sampled_from(("8", "16"))),
            cards=cards if kind == "cards" else None,
        )
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
    return policy, draw(clusters("nvidia" in policy.manufacturers))


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
    max_examples=6,
    deadline=None,
    database=None,
    # Each example runs a cluster: a failure is reported as drawn, not shrunk for minutes.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(cases())
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
