"""The live worker builds the TAS chain ``plan`` prints, and changes it without a patch
Kueue's CEL rules reject (docs/topology.md).

Every dump of examples/topology-*.yaml converges to ``plan``'s chain (Topologies included).
Against the real Kueue v0.19.2 CRDs, whose CEL rules freeze a TAS flavor's nodeLabels,
tolerations and topologyName and a Topology's levels, a change of the taints of a TAS
flavor's nodes and a change of a node's level set end in new flavors (and a new Topology)
with no write turned down and no ClusterQueue deleted, counted at the simulated server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.commands.plan import read_cluster_file
from gpustack_sim.apiserver.counters import REJECTED
from gpustack_sim.cluster.chain import differences
from gpustack_sim.cluster.cluster import SimCluster
from tests.conftest import REAL_CRDS_MISSING, shared_crds_dir
from tests.integration.worker.support import eventually

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DUMPS = sorted(p.name for p in EXAMPLES.glob("topology-*.yaml"))
HOST = "cloud.google.com/gce-topology-host"


def _nodes(dump: str) -> list[dict[str, Any]]:
    return [dict(n) for n in read_cluster_file(EXAMPLES / dump)[0]]


@pytest.mark.parametrize("dump", DUMPS)
async def test_the_worker_converges_to_plan_on_each_dump(dump: str) -> None:
    async with SimCluster(_nodes(dump), ["default"]) as cluster:
        await cluster.converge(60)
        back = await cluster.read_back()
        assert differences(back, cluster.expected()) == []
        assert back.topologies, "the Topologies are part of what converged"


def _taint(cluster: SimCluster, name: str, key: str) -> None:
    taints = [{"key": key, "value": "true", "effect": "NoSchedule"}]
    cluster.nodes[name].setdefault("spec", {})["taints"] = taints
    stored = cluster.sim.store.get("v1", "Node", name)
    assert stored is not None
    stored.setdefault("spec", {})["taints"] = taints
    cluster.sim.store.update(stored)


def _tas_flavors(cluster: SimCluster) -> dict[str, dict[str, Any]]:
    return {
        f["metadata"]["name"]: f
        for f in cluster.actual().resource_flavors
        if "topologyName" in f["spec"]
    }


@pytest.mark.skipif(shared_crds_dir() is None, reason=REAL_CRDS_MISSING)
async def test_frozen_fields_change_by_new_objects_under_the_real_cel_rules() -> None:
    from gpustack_sim.command import load_crd_documents

    crds_dir = shared_crds_dir()
    assert crds_dir is not None
    crds = load_crd_documents(sorted(p for p in crds_dir.iterdir() if p.is_dir()))
    nodes = _nodes("topology-gke-a3-ultra.yaml")
    async with SimCluster(nodes, ["default"], crds=crds) as cluster:
        await cluster.converge(60)
        queues = {q["metadata"]["name"] for q in cluster.actual().cluster_queues}
        before = _tas_flavors(cluster)
        topologies = {t["metadata"]["name"] for t in cluster.actual().topologies}
        cluster.sim.counters.reset()

        # 1. every node of the TAS flavors gets a dedication taint: tolerations must change
        for node in nodes:
            _taint(cluster, node["metadata"]["name"], "dedicated")
        await cluster.converge(60)
        tainted = _tas_flavors(cluster)
        assert tainted and set(tainted).isdisjoint(before)
        assert all(
            [t["key"] for t in f["spec"]["tolerations"]] == ["dedicated"] for f in tainted.values()
        )

        # 2. two nodes lose their host level: a new level set, so a new Topology and flavor
        for node in nodes[:2]:
            cluster.edit_node(node["metadata"]["name"], labels={HOST: None})
        await cluster.converge(60)
        after = cluster.actual()
        new_topologies = {t["metadata"]["name"] for t in after.topologies}
        assert len(new_topologies) == 2 and topologies < new_topologies
        assert len(_tas_flavors(cluster)) == 2 * len(tainted)

        assert cluster.sim.counters.get(REJECTED, "422") == 0, cluster.sim.counters.snapshot()
        assert cluster.sim.counters.get("delete", "ClusterQueue") == 0
        assert {q["metadata"]["name"] for q in after.cluster_queues} == queues
        assert cluster.sim.counters.get("delete", "ResourceFlavor") >= len(before)
        assert (
            differences(await cluster.read_back(), cluster.expected(), server_defaults=True) == []
        )


def _level_warnings(cluster: SimCluster, node: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.sim.store.list("v1", "Event", "default")
        if e.get("reason") == "TopologyLevelMissing"
        and e.get("type") == "Warning"
        and e["involvedObject"].get("name") == node
    ]


async def test_a_node_missing_a_level_gets_a_warning_event() -> None:
    """docs/topology.md, "Seeing it": the mixed dump's gke-mix-3 and -4 carry a block and a
    sub-block but no host; the nodes with every level and those with none get no Event."""
    async with SimCluster(_nodes("topology-mixed.yaml"), ["default"]) as cluster:
        await cluster.converge(60)
        await eventually(lambda: _level_warnings(cluster, "gke-mix-3"), "an Event on gke-mix-3")
        (event,) = _level_warnings(cluster, "gke-mix-4")
        assert HOST in event["message"]
        for other in ("gke-mix-1", "gke-mix-2", "gke-mix-5", "gke-mix-6"):
            assert _level_warnings(cluster, other) == []
        cluster.edit_node("gke-mix-3", labels={HOST: "h3-77c0e5d2"})
        await cluster.converge(60)
        assert len(_level_warnings(cluster, "gke-mix-3")) == 1  # said once, not repeated
