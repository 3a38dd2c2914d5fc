"""The worker's five reconcilers against the simulated cluster, through real sockets.

One cluster is driven through the changes the chain must follow (node added, removed,
card count changed, slicing set and unset, node unmanaged, namespace created and deleted,
reservations holding a queue); after each, the cluster must equal what the domain's
``desired_state`` says for the same nodes and namespaces — nothing missing, nothing left over.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.runtime.controller import Reconciler, Request, Result
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    KUEUE,
    WRITE_KINDS,
    converged,
    eventually,
    fast_config,
    idle,
    kueue_objects,
    nfd_master,
    node,
    put_node,
    relabel,
    worker_running,
)

pytestmark = [
    pytest.mark.anyio,
]

T4 = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
A10G = "acceleratable.feature.gpustack.ai/nvidia-a10g"


def person_objects() -> list[dict[str, Any]]:
    """Kueue objects a person made (no managed-by label): never modified or deleted."""
    return [
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": "person-flavor"},
            "spec": {"nodeLabels": {"team": "a"}},
        },
        {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": "person-cohort"}},
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "person-cq"},
            "spec": {"cohortName": "person-cohort", "namespaceSelector": {}},
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "person-lq", "namespace": "default"},
            "spec": {"clusterQueue": "person-cq"},
        },
    ]


def versions(sim: SimServer) -> dict[str, str]:
    out = {}
    for kind in ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue"):
        for obj in kueue_objects(sim, kind, managed=False):
            out[f"{kind}/{obj['metadata']['name']}"] = obj["metadata"]["resourceVersion"]
    return out


def still_cohort(sim: SimServer, queue: str) -> bool:
    cq = sim.store.get(KUEUE, "ClusterQueue", queue)
    return cq is not None and sim.store.get(KUEUE, "Cohort", cq["spec"]["cohortName"]) is not None


def recording(reconciler: Reconciler, seen: set[str]) -> Reconciler:
    """*reconciler*, noting every key it is called with in *seen*."""

    async def reconcile(request: Request) -> Result | None:
        seen.add(request.key)
        return await reconciler(request)

    return reconcile


def names(sim: SimServer, kind: str) -> set[str]:
    return {o["metadata"]["name"] for o in kueue_objects(sim, kind)}


async def test_the_chain_follows_the_cluster(sim: SimServer, sim_kubeconfig: Path) -> None:
    config = fast_config()
    for obj in person_objects():
        sim.store.create(obj)
    before = versions(sim)
    put_node(sim, node("cpu-a"))
    put_node(sim, node("gpu-t4", cpu="32", memory="128Gi", cards=("Tesla T4", 2)))
    put_node(sim, node("gpu-a10g", cpu="48", memory="192Gi", cards=("A10G", 4)))

    async with nfd_master(sim), worker_running(sim_kubeconfig, config) as running:
        await converged(sim, config)
        assert len(names(sim, "ResourceFlavor")) == 5  # 3 general + 2 device flavors
        assert {lq["metadata"]["namespace"] for lq in kueue_objects(sim, "LocalQueue")} == {
            "default"
        }

        # Steady state: a resync reaches every cached key of all five controllers (it
        # bypasses their update predicates; docs/worker.md, "Writes and ownership") and
        # writes nothing.
        await eventually(lambda: idle(running.manager), "the controllers to go idle")
        caches = running.worker.caches
        assert caches is not None
        keys = {
            "capacity": set(caches.nodes.indexer.keys()),
            "unpooled": set(caches.nodes.indexer.keys()),
            "resourceflavor": set(caches.flavors.indexer.keys()),
            "cohort": set(caches.cohorts.indexer.keys()),
            "clusterqueue": set(caches.cluster_queues.indexer.keys()),
            "localqueue": set(caches.namespaces.indexer.keys()),
            "kueueconfig": {"kueue-system/kueue-manager-config"},
            # no node publishes topology levels here: no Topology (docs/topology.md)
            "topology": set(caches.topologies.indexer.keys()) if caches.topologies else set(),
        }
        assert all(v for k, v in keys.items() if k != "topology")
        seen: dict[str, set[str]] = {name: set() for name in keys}
        # The declared-pool controller has no key without pools (test_declared_pools.py),
        # ``teams`` none without its ConfigMap (docs/teams.md).
        controllers = {
            c.name: c
            for c in running.manager.controllers
            if c.name not in ("declaredpool", "teams")
        }
        assert set(controllers) == set(keys)
        for name, controller in controllers.items():
            if name in seen:
                controller.reconciler = recording(controller.reconciler, seen[name])
        sim.counters.reset()
        for informer in running.manager.informers.informers:
            informer.resync()
        await eventually(
            lambda: all(seen[name] >= keys[name] for name in keys) and idle(running.manager),
            what="the resync to reconcile every cached key",
        )
        assert sum(sim.counters.writes(kind) for kind in WRITE_KINDS) == 0

        # A node added.
        put_node(sim, node("cpu-b", cpu="8", memory="32Gi"))
        await converged(sim, config)

        # A card count changed: the old flavor goes, the new one comes.
        old_flavors = names(sim, "ResourceFlavor")
        relabel(sim, "gpu-t4", **{T4 + ".count": "4"})
        current = sim.store.get("v1", "Node", "gpu-t4")
        assert current is not None
        current["status"]["allocatable"]["nvidia.com/gpu"] = "4"
        sim.store.update_status(current)
        await converged(sim, config)
        assert names(sim, "ResourceFlavor") != old_flavors

        # Slicing set, then unset: a sliced queue appears in the same cohort, then goes.
        cohorts = names(sim, "Cohort")
        relabel(sim, "gpu-a10g", **{A10G + ".sliced.partitions": "8"})
        await converged(sim, config)
        sliced = {q for q in names(sim, "ClusterQueue") if q.endswith("-8s")}
        assert len(sliced) == 1
        assert names(sim, "Cohort") == cohorts
        (queue,) = sliced
        cq = sim.store.get(KUEUE, "ClusterQueue", queue)
        assert cq is not None
        quotas = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        assert all(r.get("borrowingLimit") == "0" for r in quotas)
        relabel(sim, "gpu-a10g", **{A10G + ".sliced.partitions": None})
        await converged(sim, config)
        assert not any(q.endswith("-8s") for q in names(sim, "ClusterQueue"))

        # A namespace created, then deleted.
        sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
        await converged(sim, config)
        assert any(lq["metadata"]["namespace"] == "team" for lq in kueue_objects(sim, "LocalQueue"))
        sim.store.delete("v1", "Namespace", "team")
        await eventually(lambda: sim.store.get("v1", "Namespace", "team") is None, "ns gone")
        await converged(sim, config)

        # Reservations hold a ClusterQueue whose flavors are gone; releasing them lets it go.
        cpu_queue = next(q for q in names(sim, "ClusterQueue") if "--" not in q[10:])
        reserved = sim.store.get(KUEUE, "ClusterQueue", cpu_queue)
        assert reserved is not None
        flavor = reserved["spec"]["resourceGroups"][0]["flavors"][0]["name"]
        reserved["status"] = {
            "flavorsReservation": [
                {"name": flavor, "resources": [{"name": "cpu", "total": "1", "borrowed": "0"}]}
            ]
        }
        sim.store.update_status(reserved)
        for general_node in ("cpu-a", "cpu-b", "gpu-t4", "gpu-a10g"):
            relabel(sim, general_node, **{"gpustack.ai/managed": "false"})
        await eventually(lambda: not names(sim, "ResourceFlavor"), "every flavor to be deleted")
        cq_controller = next(c for c in running.manager.controllers if c.name == "clusterqueue")
        await eventually(
            lambda: cq_controller.queue.waiting_deadline(cpu_queue) is not None,
            "the reserved queue to be re-checked later",
        )
        assert cpu_queue in names(sim, "ClusterQueue")
        # Its Cohort stays too: deleting it would cascade into the queue (docs/worker.md).
        assert still_cohort(sim, cpu_queue)
        assert cq["metadata"]["name"] not in names(sim, "ClusterQueue")
        still = sim.store.get(KUEUE, "ClusterQueue", cpu_queue)
        assert still is not None
        still["status"] = {}
        sim.store.update_status(still)
        await converged(sim, config)  # nodes unmanaged: no flavor, queue, cohort or LocalQueue
        assert not names(sim, "ClusterQueue") and not names(sim, "Cohort")

        # Managed again, then a node removed: its NodeFeature goes with it (owner GC).
        for general_node in ("cpu-a", "cpu-b", "gpu-t4", "gpu-a10g"):
            relabel(sim, general_node, **{"gpustack.ai/managed": "true"})
        await converged(sim, config)
        sim.store.delete("v1", "Node", "gpu-t4")
        await converged(sim, config)
        assert not any("tesla-t4" in n for n in names(sim, "ResourceFlavor"))

    assert versions(sim) == before, "objects a person made were modified or deleted"
