"""The live worker reports devices that feed no pool (docs/devices.md, "Why a device gets no
pool"): a Warning Event ``DeviceNotPooled`` on the Node and the gauge
``gpustack_unpooled_devices{reason}``, through the simulated cluster; a Normal Event
``DeviceNotPooledResolved`` once a reported device is pooled, and nothing at all for a node
whose labels land while its sources are still settling."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_operator.commands.plan import read_cluster_file
from gpustack_operator.domain.nodeview import name_of
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.worker.support import eventually

from ..chain.support import REPO

pytestmark = pytest.mark.anyio
DUMP = REPO / "examples" / "managed-clouds.yaml"
CHOSEN = ("aks-gpunp-12345678-vmss000000", "onprem-t4-1", "gke-a100-pool-2", "gke-l4-1")
GFD_T4 = {
    "nvidia.com/gpu.product": "Tesla-T4",
    "nvidia.com/gpu.count": "4",
    "nvidia.com/gpu.memory": "15360",
}


def _gauge(reason: str) -> float | None:
    return REGISTRY.get_sample_value("gpustack_unpooled_devices", {"reason": reason})


def _events(cluster: SimCluster, node: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.sim.store.list("v1", "Event", "default")
        if e.get("reason") == reason
        and e["involvedObject"].get("kind") == "Node"
        and e["involvedObject"].get("name") == node
    ]


def _warnings(cluster: SimCluster, node: str) -> list[dict[str, Any]]:
    found = _events(cluster, node, "DeviceNotPooled")
    assert all(e["type"] == "Warning" for e in found)
    return found


def _policy(settling: float) -> ChainPolicy:
    return ChainPolicy(load_manufacturers({}), unpooled_settling=settling)


def _reconciles() -> float:
    """Reconciles of the unpooled report so far in this process, whatever their result."""
    return sum(
        REGISTRY.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": "unpooled", "result": result}
        )
        or 0.0
        for result in ("success", "error", "requeue", "requeue_after")
    )


async def test_unpooled_devices_get_an_event_and_a_gauge_until_they_are_pooled() -> None:
    nodes, _, _ = read_cluster_file(DUMP)
    chosen = [copy.deepcopy(dict(n)) for n in nodes if name_of(n) in CHOSEN]
    # A short settling time: these nodes' sources are as complete as they will get.
    async with SimCluster(chosen, ["default"], policy=_policy(0.2)) as cluster:
        await cluster.converge(60)
        await eventually(lambda: _gauge("model-unknown") == 5, "5 devices without a model")
        assert _gauge("no-allocatable-resource") == 1  # the GKE node whose driver installs
        await eventually(lambda: _warnings(cluster, "onprem-t4-1"), "an Event on onprem-t4-1")
        (event,) = _warnings(cluster, "aks-gpunp-12345678-vmss000000")
        assert "model-unknown" in event["message"]
        assert "kubernetes.azure.com/accelerator=nvidia" in event["message"]
        assert _warnings(cluster, "gke-l4-1") == []  # its card feeds a pool

        # GFD arrives on the plain device-plugin node: its 4 cards get a pool, the gauge
        # counts only the AKS card.
        node = cluster.sim.store.get("v1", "Node", "onprem-t4-1")
        assert node is not None
        node["metadata"]["labels"].update(GFD_T4)
        cluster.sim.store.update(node)
        await eventually(lambda: _gauge("model-unknown") == 1, "the T4s pooled")
        await eventually(
            lambda: any(
                q["metadata"]["name"].endswith("--nvidia-tesla-t4-1d")
                for q in cluster.sim.store.list("kueue.x-k8s.io/v1beta2", "ClusterQueue")
            ),
            "the T4 pool's ClusterQueue",
        )
        assert _gauge("no-allocatable-resource") == 1
        # The Warning is followed by a Normal Event saying it no longer holds, and the pool
        # its cards went to got one of its own.
        await eventually(
            lambda: _events(cluster, "onprem-t4-1", "DeviceNotPooledResolved"),
            "a Normal Event resolving the onprem-t4-1 Warning",
        )
        (resolved,) = _events(cluster, "onprem-t4-1", "DeviceNotPooledResolved")
        assert resolved["type"] == "Normal"
        assert resolved["message"].startswith("resolved: nvidia.com/gpu no longer left out")
        assert "model-unknown" in resolved["message"]
        assert len(_warnings(cluster, "onprem-t4-1")) == 1

        def created() -> list[dict[str, Any]]:
            return [
                e
                for e in cluster.sim.store.list("v1", "Event")
                if e.get("reason") == "PoolCreated"
                and e["involvedObject"]["name"].endswith("--nvidia-tesla-t4-1d")
            ]

        await eventually(created, "a PoolCreated Event on the T4 pool")
        assert len(created()) == 1 and created()[0]["type"] == "Normal"
        assert created()[0]["message"].startswith("pool created: 1x Tesla-T4, ")


async def test_a_node_whose_labels_land_while_it_settles_gets_no_warning() -> None:
    """The device plugin advertises the cards before GFD labels them: within the settling
    time that is not reported, and once the labels land there is nothing to report."""
    nodes, _, _ = read_cluster_file(DUMP)
    (t4,) = [copy.deepcopy(dict(n)) for n in nodes if name_of(n) == "onprem-t4-1"]
    async with SimCluster([t4], ["default"], policy=_policy(600.0)) as cluster:
        before = _reconciles()
        await cluster.converge(60)
        await eventually(lambda: _reconciles() > before, "the unpooled report to look")
        assert _warnings(cluster, "onprem-t4-1") == []
        node = cluster.sim.store.get("v1", "Node", "onprem-t4-1")
        assert node is not None
        settled = _reconciles()
        node["metadata"]["labels"].update(GFD_T4)
        cluster.sim.store.update(node)
        await eventually(
            lambda: any(
                q["metadata"]["name"].endswith("--nvidia-tesla-t4-1d")
                for q in cluster.sim.store.list("kueue.x-k8s.io/v1beta2", "ClusterQueue")
            ),
            "the T4 pool's ClusterQueue",
        )
        await eventually(lambda: _reconciles() > settled, "the unpooled report to look again")
        assert _warnings(cluster, "onprem-t4-1") == []
        assert _events(cluster, "onprem-t4-1", "DeviceNotPooledResolved") == []
