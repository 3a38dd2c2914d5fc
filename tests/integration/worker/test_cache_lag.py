"""A reconcile that runs while a cache lags the server writes nothing it would have to undo.

The LocalQueue reconciler (one key per namespace) creates a namespace's queues, and another
event of that namespace can bring it back before the LocalQueue watch delivers them. Under
load that happened within a second, and each queue was created twice (docs/worker.md,
"Writes and ownership"). Here the LocalQueue events are held back on purpose, so the second
reconcile always reads a cache without the queues.

A Node deleted while the worker's Node watch lags (an API outage, a broken watch) is still in
the cache when the garbage collector deletes its NodeFeature; recreating the NodeFeature for
it had the collector delete it again at once, and the two looped at the API server's speed
(over a thousand creates in a second after an outage) until the Node watch caught up. Here
the Node events are held back, so the Node stays in the cache.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest

from controllers.capacity import WORKER_NODE_FEATURES
from gpustack_operator.apis import NODE_FEATURES
from gpustack_operator.runtime.client import WatchEvent
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.wiring import WorkerConfig
from gpustack_operator.worker.caches import BY_NAMESPACE
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    Running,
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


@asynccontextmanager
async def settled_worker(
    sim: SimServer, kubeconfig: Path, config: WorkerConfig, *names: str
) -> AsyncIterator[Running]:
    """The worker on CPU nodes *names*, once the chain is converged and every controller idle."""
    for name in names:
        put_node(sim, node(name))
    async with nfd_master(sim), worker_running(kubeconfig, config) as running:
        await converged(sim, config)
        await eventually(lambda: idle(running.manager), "the controllers to go idle")
        yield running


async def test_a_nodefeature_collected_for_a_node_the_cache_still_holds_is_not_recreated(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    config = fast_config()
    namespace = config.policy.system_namespace
    async with settled_worker(sim, sim_kubeconfig, config, "cpu-a", "cpu-b") as running:
        caches = running.worker.caches
        assert caches is not None
        features = running.manager.informer(
            NODE_FEATURES, namespace=namespace, label_selector=WORKER_NODE_FEATURES
        )
        collected = f"{namespace}/cpu-b-gpustack-worker"
        assert features.indexer.get(collected) is not None
        sim.counters.reset()

        # The first read of the Node fails: the retry must ask again, not create.
        failed = sim.faults.add(verb="get", kind="Node", status=500, count=1)
        with held_events(caches.nodes) as held:
            sim.store.delete("v1", "Node", "cpu-b")
            await sim.settle()  # the garbage collector deletes the Node's NodeFeatures
            await eventually(lambda: held() >= 1, "the Node's deletion to be held back")

            def judged() -> bool:
                return features.indexer.get(collected) is None and idle(running.manager)

            await eventually(judged, "the NodeFeature's deletion to be reconciled")
            assert caches.nodes.indexer.get("cpu-b") is not None  # the cache still lags
            assert sim.counters.writes("NodeFeature") == 0
            assert failed.fired == 1
            assert sim.counters.get("get", "Node") >= 2  # asked the API server again

        await eventually(
            lambda: caches.nodes.indexer.get("cpu-b") is None and idle(running.manager),
            "the Node's deletion to reach the cache",
        )
        await converged(sim, config)
        assert sim.counters.writes("NodeFeature") == 0
        assert (
            sim.store.get(
                NODE_FEATURES.api_version, "NodeFeature", "cpu-b-gpustack-worker", namespace
            )
            is None
        )


async def test_a_nodefeature_a_person_deletes_is_created_again_once_its_node_is_confirmed(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    config = fast_config()
    namespace = config.policy.system_namespace
    async with settled_worker(sim, sim_kubeconfig, config, "cpu-a") as running:
        name = "cpu-a-gpustack-worker"
        before = sim.store.get(NODE_FEATURES.api_version, "NodeFeature", name, namespace)
        assert before is not None
        sim.counters.reset()

        sim.store.delete(NODE_FEATURES.api_version, "NodeFeature", name, namespace)

        def recreated() -> bool:
            now = sim.store.get(NODE_FEATURES.api_version, "NodeFeature", name, namespace)
            return now is not None and idle(running.manager)

        await eventually(recreated, "the NodeFeature to be created again")
        after = sim.store.get(NODE_FEATURES.api_version, "NodeFeature", name, namespace)
        assert after is not None
        assert after["spec"] == before["spec"]
        assert after["metadata"]["uid"] != before["metadata"]["uid"]
        assert sim.counters.get("get", "Node") == 1  # the Node confirmed once
        assert sim.counters.writes("NodeFeature") == 1
        await converged(sim, config)
