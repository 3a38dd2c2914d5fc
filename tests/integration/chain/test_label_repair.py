"""Label repair on the worked example (docs/worker.md, "Label repair"): a label the worker
publishes, taken from a Node by hand, comes back through NFD, and no Kueue object is deleted
on the way.

``gpu-a10g-sliced`` is the only node of its chain, so a pool deleted while the label is
missing would show: every DELETED event of a ResourceFlavor, Cohort, ClusterQueue or
LocalQueue that the simulated server commits is counted, by the worker or its garbage
collector alike.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.worker.support import eventually

from .support import example_nodes

pytestmark = pytest.mark.anyio

TIMEOUT = 30.0
NODE = "gpu-a10g-sliced"
MANAGED = "gpustack.ai/managed"
CHAIN_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")


def node_labels(cluster: SimCluster) -> dict[str, str]:
    node = cluster.sim.store.get("v1", "Node", NODE)
    assert node is not None
    return dict(node["metadata"].get("labels") or {})


def carries(cluster: SimCluster, key: str, value: str) -> bool:
    return node_labels(cluster).get(key) == value


def take_label(cluster: SimCluster, key: str) -> None:
    """``kubectl label node <NODE> <key>-`` (on the server only: the input stays as it was)."""
    node = cluster.sim.store.get("v1", "Node", NODE)
    assert node is not None
    del node["metadata"]["labels"][key]
    cluster.sim.store.update(node)


def repairs() -> float:
    return REGISTRY.get_sample_value("gpustack_label_repairs_total", {"publisher": "worker"}) or 0.0


def managed_label(_: dict[str, str]) -> str:
    return MANAGED


def capacity_label(labels: dict[str, str]) -> str:
    """A capacity label the worker publishes for the node's accelerated view."""
    return next(
        k
        for k in sorted(labels)
        if k.startswith("acceleratable.feature.gpustack.ai/") and k.endswith(".cpu")
    )


async def test_a_removed_label_comes_back_and_no_pool_is_deleted() -> None:
    """First ``gpustack.ai/managed``, then (separately, once the chain is whole again) a
    capacity label, on one cluster."""
    async with SimCluster(example_nodes(), ["default", "team-a"]) as cluster:
        await cluster.converge(TIMEOUT)
        for pick in (managed_label, capacity_label):
            deleted: list[tuple[str, str]] = []

            def count(event_type: str, obj: dict[str, Any], into: list[Any] = deleted) -> None:
                if event_type == "DELETED" and obj.get("kind") in CHAIN_KINDS:
                    into.append((obj["kind"], obj["metadata"]["name"]))

            unsubscribe = cluster.sim.store.subscribe(count)
            deletes_before = sum(cluster.sim.counters.get("delete", k) for k in CHAIN_KINDS)
            repairs_before = repairs()
            key = pick(node_labels(cluster))
            value = node_labels(cluster)[key]
            take_label(cluster, key)
            assert key not in node_labels(cluster)

            await eventually(
                partial(carries, cluster, key, value), f"{key} back on {NODE}", TIMEOUT
            )
            await cluster.converge(TIMEOUT)
            unsubscribe()

            assert deleted == [], key
            deletes = sum(cluster.sim.counters.get("delete", k) for k in CHAIN_KINDS)
            assert deletes == deletes_before, key
            assert repairs() == repairs_before + 1, key
