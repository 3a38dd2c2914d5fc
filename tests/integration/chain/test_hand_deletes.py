"""A ResourceFlavor a person deletes is recreated, and the ClusterQueue that lists it and the
queue's LocalQueues are never deleted on the way (docs/worker.md, "Chain objects deleted by
hand").

The flavor deleted is the only one of its ClusterQueue in the worked example, the case where
the queue used to be deleted (no flavor left in the cache) and its LocalQueues
garbage-collected. Every DELETED event the simulated server commits is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_operator.simcluster.cluster import SimCluster
from tests.integration.worker.support import eventually

from .support import KUEUE, example_nodes

pytestmark = pytest.mark.anyio

TIMEOUT = 30.0
IN_USE = "kueue.x-k8s.io/resource-in-use"


def managed(cluster: SimCluster, kind: str) -> list[dict[str, Any]]:
    return [
        o
        for o in cluster.sim.store.list(KUEUE, kind)
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by")
        == "gpustack-operator"
    ]


def only_flavor_of_a_queue(cluster: SimCluster) -> tuple[dict[str, Any], str]:
    """A managed flavor that is the single flavor of its ClusterQueue, and that queue."""
    for queue in sorted(managed(cluster, "ClusterQueue"), key=lambda q: q["metadata"]["name"]):
        flavors = [f["name"] for g in queue["spec"].get("resourceGroups", []) for f in g["flavors"]]
        if len(flavors) == 1:
            flavor = cluster.sim.store.get(KUEUE, "ResourceFlavor", flavors[0])
            assert flavor is not None
            return flavor, queue["metadata"]["name"]
    raise AssertionError("the worked example has no ClusterQueue with a single flavor")


def deletes_into(deleted: list[tuple[str, str]]) -> Callable[[str, dict[str, Any]], None]:
    """A store subscriber recording (kind, name) of every committed delete."""

    def record(event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED":
            deleted.append((obj["kind"], obj["metadata"]["name"]))

    return record


def recreated(cluster: SimCluster, name: str, uid: str) -> bool:
    again = cluster.sim.store.get(KUEUE, "ResourceFlavor", name)
    return again is not None and again["metadata"]["uid"] != uid


def queue_reconciles() -> float:
    return sum(
        REGISTRY.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": "clusterqueue", "result": r}
        )
        or 0.0
        for r in ("success", "error", "requeue", "requeue_after")
    )


async def test_a_deleted_flavor_is_recreated_and_its_queues_are_kept() -> None:
    async with SimCluster(example_nodes(), ["default", "team-a"]) as cluster:
        await cluster.converge(TIMEOUT)
        flavor, queue = only_flavor_of_a_queue(cluster)
        name, uid = flavor["metadata"]["name"], flavor["metadata"]["uid"]
        local_queues = [
            lq for lq in managed(cluster, "LocalQueue") if lq["spec"].get("clusterQueue") == queue
        ]
        assert local_queues, f"{queue} has no LocalQueue to protect"
        deleted: list[tuple[str, str]] = []
        unsubscribe = cluster.sim.store.subscribe(deletes_into(deleted))
        # The flavor cannot be recreated at once, so the queue is reconciled while its only
        # flavor is missing from the cache.
        fault = cluster.sim.faults.add(verb="patch", kind="ResourceFlavor", status=500)
        reconciles = queue_reconciles()
        cluster.sim.store.delete(KUEUE, "ResourceFlavor", name)  # a person's kubectl delete
        await eventually(
            lambda: fault.fired > 0 and queue_reconciles() > reconciles,
            "the ClusterQueue to be reconciled without its flavor",
            TIMEOUT,
        )
        cluster.sim.faults.remove(fault)

        await eventually(
            lambda: recreated(cluster, name, uid), f"ResourceFlavor {name} to be recreated", TIMEOUT
        )
        await cluster.converge(TIMEOUT)
        unsubscribe()

        assert deleted == [("ResourceFlavor", name)]
        assert cluster.sim.store.get(KUEUE, "ClusterQueue", queue) is not None
        for lq in local_queues:
            meta = lq["metadata"]
            kept = cluster.sim.store.get(KUEUE, "LocalQueue", meta["name"], meta["namespace"])
            assert kept is not None and kept["metadata"]["uid"] == meta["uid"]


async def test_a_flavor_held_by_kueue_is_let_go_and_recreated_without_deleting_its_queue() -> None:
    """As on a real cluster, where Kueue's ``resource-in-use`` finalizer keeps a deleted
    flavor until no ClusterQueue lists it: the queue stays, without resource groups, until the
    flavor is gone and recreated (the test removes the finalizer as Kueue would)."""
    async with SimCluster(example_nodes(), ["default", "team-a"]) as cluster:
        await cluster.converge(TIMEOUT)
        flavor, queue = only_flavor_of_a_queue(cluster)
        name, uid = flavor["metadata"]["name"], flavor["metadata"]["uid"]
        queue_uid = cluster.sim.store.get(KUEUE, "ClusterQueue", queue)["metadata"]["uid"]
        flavor["metadata"]["finalizers"] = [IN_USE]
        cluster.sim.store.update(flavor)
        deleted: list[tuple[str, str]] = []
        unsubscribe = cluster.sim.store.subscribe(deletes_into(deleted))
        cluster.sim.store.delete(KUEUE, "ResourceFlavor", name)

        def let_go() -> bool:
            held = cluster.sim.store.get(KUEUE, "ClusterQueue", queue)
            return held is not None and held["spec"].get("resourceGroups") == []

        await eventually(let_go, f"{queue} to stop listing {name}", TIMEOUT)
        terminating = cluster.sim.store.get(KUEUE, "ResourceFlavor", name)
        assert terminating is not None and terminating["metadata"].get("deletionTimestamp")
        terminating["metadata"]["finalizers"] = []  # Kueue: no queue lists it any more
        cluster.sim.store.update(terminating)

        await eventually(
            lambda: recreated(cluster, name, uid), f"ResourceFlavor {name} to be recreated", TIMEOUT
        )
        await cluster.converge(TIMEOUT)
        unsubscribe()

        assert deleted == [("ResourceFlavor", name)]
        kept = cluster.sim.store.get(KUEUE, "ClusterQueue", queue)
        assert kept is not None and kept["metadata"]["uid"] == queue_uid
