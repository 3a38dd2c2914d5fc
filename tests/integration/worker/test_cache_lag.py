"""A reconcile that runs before the cache has seen the reconciler's own write writes nothing.

The LocalQueue reconciler (one key per namespace) creates a namespace's queues, and another
event of that namespace can bring it back before the LocalQueue watch delivers them. Under
load that happened within a second, and each queue was created twice (docs/worker.md,
"Writes and ownership"). Here the LocalQueue events are held back on purpose, so the second
reconcile always reads a cache without the queues.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpustack_operator.runtime.client import WatchEvent
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.worker.caches import BY_NAMESPACE
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    converged,
    eventually,
    fast_config,
    idle,
    kueue_objects,
    nfd_master,
    node,
    put_node,
    worker_running,
)

pytestmark = [pytest.mark.anyio]


@contextmanager
def held_events(informer: Informer) -> Iterator[Callable[[], int]]:
    """Hold back *informer*'s watch events until the block ends, then deliver them in order;
    yields how many are held."""
    held: list[WatchEvent] = []
    deliver = informer._apply
    informer._apply = held.append  # type: ignore[method-assign]
    try:
        yield lambda: len(held)
    finally:
        informer._apply = deliver  # type: ignore[method-assign]
        for event in held:
            deliver(event)


async def test_a_namespace_reconciled_again_before_its_queues_arrive_writes_them_once(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    config = fast_config()
    put_node(sim, node("cpu-a"))
    put_node(sim, node("gpu-t4", cpu="32", memory="128Gi", cards=("Tesla T4", 2)))
    async with nfd_master(sim), worker_running(sim_kubeconfig, config) as running:
        await converged(sim, config)
        await eventually(lambda: idle(running.manager), "the controllers to go idle")
        caches = running.worker.caches
        assert caches is not None
        queues = len(kueue_objects(sim, "ClusterQueue"))
        assert queues >= 2
        sim.counters.reset()

        with held_events(caches.local_queues) as held:
            sim.store.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
            )
            await eventually(lambda: held() >= queues, "the team's LocalQueues to be created")
            assert sim.counters.writes("LocalQueue") == queues
            # A label on the namespace brings it back to the reconciler, whose cache still
            # has none of the queues it created.
            team = sim.store.get("v1", "Namespace", "team")
            assert team is not None
            team["metadata"]["labels"] = {"tier": "gold"}
            sim.store.update(team)
            relabelled = sim.store.get("v1", "Namespace", "team")
            assert relabelled is not None
            version = relabelled["metadata"]["resourceVersion"]

            def reconciled() -> bool:
                cached = caches.namespaces.indexer.get("team")
                seen = cached is not None and cached["metadata"]["resourceVersion"] == version
                return seen and idle(running.manager)

            await eventually(reconciled, "the relabelled namespace to be reconciled")
            assert not caches.local_queues.indexer.by_index(BY_NAMESPACE, "team")
        await converged(sim, config)
        await eventually(lambda: idle(running.manager), "the controllers to go idle")
        assert sim.counters.writes("LocalQueue") == queues
