"""A ResourceFlavor a person deletes is recreated, and the ClusterQueue that lists it and the
queue's LocalQueues are never deleted on the way (docs/worker.md, "Chain objects deleted by
hand").

The flavor deleted is the only one of its ClusterQueue in the worked example, the case where
the queue used to be deleted (no flavor left in the cache) and its LocalQueues
garbage-collected. Every DELETED event the simulated server commits is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_sim.cluster.cluster import SimCluster
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


def kept_uids(cluster: SimCluster, queue: str) -> dict[tuple[str, str], str]:
    """(kind, namespace/name) -> uid of the ClusterQueue *queue* and its LocalQueues."""
    found = cluster.sim.store.get(KUEUE, "ClusterQueue", queue)
    assert found is not None
    uids = {("ClusterQueue", queue): found["metadata"]["uid"]}
    for lq in managed(cluster, "LocalQueue"):
        if lq["spec"].get("clusterQueue") == queue:
            meta = lq["metadata"]
            uids[("LocalQueue", f"{meta['namespace']}/{meta['name']}")] = meta["uid"]
    assert len(uids) > 1, f"{queue} has no LocalQueue to protect"
    return uids


async def delete_while_it_cannot_come_back(cluster: SimCluster, name: str) -> None:
    """Delete the flavor while applies of flavors fail, until the ClusterQueue has been
    reconciled with its only flavor missing from the cache; then let the worker recreate it."""
    fault = cluster.sim.faults.add(verb="patch", kind="ResourceFlavor", status=500)
    reconciles = queue_reconciles()
    cluster.sim.store.delete(KUEUE, "ResourceFlavor", name)  # a person's kubectl delete
    await eventually(
        lambda: fault.fired > 0 and queue_reconciles() > reconciles,
        "the ClusterQueue to be reconciled without its flavor",
        TIMEOUT,
    )
    cluster.sim.faults.remove(fault)


async def delete_held_by_kueue(cluster: SimCluster, name: str, queue: str) -> None:
    """As on a real cluster, where Kueue's ``resource-in-use`` finalizer keeps a deleted
    flavor until no ClusterQueue lists it: the queue must let go of it (no resource groups),
    then the test removes the finalizer as Kueue would."""
    flavor = cluster.sim.store.get(KUEUE, "ResourceFlavor", name)
    assert flavor is not None
    flavor["metadata"]["finalizers"] = [IN_USE]
    cluster.sim.store.update(flavor)
    cluster.sim.store.delete(KUEUE, "ResourceFlavor", name)

    def let_go() -> bool:
        held = cluster.sim.store.get(KUEUE, "ClusterQueue", queue)
        return held is not None and held["spec"].get("resourceGroups") == []

    await eventually(let_go, f"{queue} to stop listing {name}", TIMEOUT)
    terminating = cluster.sim.store.get(KUEUE, "ResourceFlavor", name)
    assert terminating is not None and terminating["metadata"].get("deletionTimestamp")
    terminating["metadata"]["finalizers"] = []  # Kueue: no queue lists it any more
    cluster.sim.store.update(terminating)


async def test_a_deleted_flavor_is_recreated_and_its_queues_are_kept() -> None:
    """Plainly deleted, then (once the chain is whole again) deleted while Kueue holds it."""
    async with SimCluster(example_nodes(), ["default", "team-a"]) as cluster:
        await cluster.converge(TIMEOUT)
        flavor, queue = only_flavor_of_a_queue(cluster)
        name = flavor["metadata"]["name"]
        kept = kept_uids(cluster, queue)
        for held in (False, True):
            current = cluster.sim.store.get(KUEUE, "ResourceFlavor", name)
            assert current is not None
            uid = str(current["metadata"]["uid"])
            deleted: list[tuple[str, str]] = []
            unsubscribe = cluster.sim.store.subscribe(deletes_into(deleted))
            if held:
                await delete_held_by_kueue(cluster, name, queue)
            else:
                await delete_while_it_cannot_come_back(cluster, name)
            await eventually(
                partial(recreated, cluster, name, uid),
                f"ResourceFlavor {name} to be recreated",
                TIMEOUT,
            )
            await cluster.converge(TIMEOUT)
            unsubscribe()

            assert deleted == [("ResourceFlavor", name)], f"held by Kueue: {held}"
            assert kept_uids(cluster, queue) == kept, f"held by Kueue: {held}"
