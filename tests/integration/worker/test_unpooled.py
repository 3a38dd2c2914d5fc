"""The live worker reports devices that feed no pool (docs/devices.md, "Why a device gets no
pool"): a Warning Event ``DeviceNotPooled`` on the Node and the gauge
``gpustack_unpooled_devices{reason}``, through the simulated cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_operator.commands.plan import read_cluster_file
from gpustack_operator.domain.nodeview import name_of
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


def _warnings(cluster: SimCluster, node: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.sim.store.list("v1", "Event", "default")
        if e.get("type") == "Warning"
        and e.get("reason") == "DeviceNotPooled"
        and e["involvedObject"].get("kind") == "Node"
        and e["involvedObject"].get("name") == node
    ]


async def test_unpooled_devices_get_an_event_and_a_gauge_until_they_are_pooled() -> None:
    nodes, _, _ = read_cluster_file(DUMP)
    chosen = [copy.deepcopy(dict(n)) for n in nodes if name_of(n) in CHOSEN]
    async with SimCluster(chosen, ["default"]) as cluster:
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
