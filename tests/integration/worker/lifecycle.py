"""Helpers of the node-lifecycle tests (docs/node-lifecycle.md): a simulated cluster whose
worker runs on a clock the test drives, GPU pools whose nodes report Ready, and edits of
what a Node says, as kubelet, `kubectl cordon` or an autoscaler would make them."""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from gpustack_operator.controllers.clusterqueue import NAME as CLUSTER_QUEUE
from gpustack_operator.domain.node.availability import LifecycleTimers, format_time
from gpustack_operator.runtime.controller import Request
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.worker.support import KUEUE, fast_config, node

TIMERS = LifecycleTimers(soft_grace=100, maintenance_grace=1000, join_window=50, device_grace=300)
"""Simulated seconds: the clock is driven, so the defaults' proportions can stay."""
GPU = "nvidia.com/gpu"
SETTLE_DEADLINE = 20.0
"""Real seconds a step may take to settle before the test fails."""


class Clock:
    """Wall-clock seconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def gpu_node(name: str, clock: Clock, *, cards: int = 2, cpu: str = "16") -> dict[str, Any]:
    """A node of NVIDIA T4 cards, Ready for an hour, device plugin reporting every card."""
    obj = node(name, cpu=cpu, cards=("Tesla T4", cards))
    status = obj["status"]
    status["capacity"][GPU] = str(cards)
    status["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": format_time(clock.now - 3600)}
    ]
    obj["spec"] = {}
    return obj


class Lifecycle:
    """A running simulated cluster, its clock, and what the tests read and change."""

    def __init__(self, cluster: SimCluster, clock: Clock) -> None:
        self.cluster = cluster
        self.clock = clock

    @property
    def tracker(self) -> Any:
        assert self.cluster.worker is not None
        return self.cluster.worker.availability

    def stored(self, name: str) -> dict[str, Any]:
        found = self.cluster.sim.store.get("v1", "Node", name)
        assert found is not None, f"node {name} is gone"
        return copy.deepcopy(found)

    def edit(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Change a Node as its writers would: spec and metadata, then status."""
        obj = self.stored(name)
        change(obj)
        store = self.cluster.sim.store
        updated = store.update(obj)
        updated = copy.deepcopy(updated)
        updated["status"] = obj.get("status", {})
        store.update_status(updated)

    def device_queue(self) -> dict[str, Any]:
        queues = self.cluster.sim.store.list(KUEUE, "ClusterQueue")
        found = [q for q in queues if "nvidia" in q["metadata"]["name"]]
        assert len(found) == 1, [q["metadata"]["name"] for q in queues]
        return copy.deepcopy(found[0])

    def gpus(self) -> int:
        """The device queue's nominal GPU quota over its flavors."""
        total = 0
        for group in self.device_queue()["spec"].get("resourceGroups") or []:
            for flavor in group["flavors"]:
                for resource in flavor["resources"]:
                    if resource["name"] == GPU:
                        total += int(resource["nominalQuota"])
        return total

    def queues(self) -> int:
        """How many ClusterQueues the server holds."""
        return len(self.cluster.sim.store.list(KUEUE, "ClusterQueue"))

    def flavors(self) -> list[str]:
        spec = self.device_queue()["spec"]
        return [f["name"] for g in spec.get("resourceGroups") or [] for f in g["flavors"]]

    def kick(self) -> None:
        """What a requeue at a grace's end does: look at every ClusterQueue again."""
        assert self.cluster.worker is not None
        controller = next(
            c for c in self.cluster.worker.queue_controllers if c.name == CLUSTER_QUEUE
        )
        for queue in self.cluster.sim.store.list(KUEUE, "ClusterQueue"):
            controller.queue.add(str(Request.of(queue["metadata"]["name"])))

    def caught_up(self) -> bool:
        """The worker's Node cache holds every Node as the server stores it, and no event
        waits in a coalescing window: the worker has seen the last edit (its watch can
        deliver it after the controllers went idle, and the clock must not move before)."""
        worker, manager = self.cluster.worker, self.cluster.worker_manager
        if worker is None or worker.caches is None or manager is None:
            return False
        cached = worker.caches.nodes.indexer
        stored = self.cluster.sim.store.list("v1", "Node")
        return (
            len(cached.keys()) == len(stored)
            and all(
                (cached.get(n["metadata"]["name"]) or {}).get("metadata", {}).get("resourceVersion")
                == n["metadata"]["resourceVersion"]
                for n in stored
            )
            and all(c.pending_bursts() == 0 for c in manager.controllers)
        )

    async def settled(self, seen: Callable[[], bool] = lambda: True) -> None:
        """Poll until *seen* holds, the worker has seen every Node as stored and the cluster
        has been idle for a few checks."""
        deadline = time.monotonic() + SETTLE_DEADLINE
        quiet = 0
        while quiet < 2:
            assert time.monotonic() < deadline, "the cluster did not settle"
            quiet = quiet + 1 if seen() and self.caught_up() and self.cluster.idle() else 0
            await anyio.sleep(0.02)

    async def advance(self, seconds: float) -> None:
        """Let *seconds* of simulated time pass, then the requeues fire."""
        self.clock.advance(seconds)
        self.kick()
        await self.settled()


@asynccontextmanager
async def lifecycle_cluster(
    nodes: Callable[[Clock], list[dict[str, Any]]],
    timers: LifecycleTimers = TIMERS,
    **config: Any,
) -> AsyncIterator[Lifecycle]:
    """A simulated cluster of *nodes* (built on the test's clock), its worker on that clock
    and *timers*, converged."""
    clock = Clock()
    worker_config = fast_config(lifecycle=timers, clock=clock, **config)
    async with SimCluster(
        nodes(clock), ["default"], run_agents=False, worker_config=worker_config
    ) as cluster:
        await cluster.converge(45)
        life = Lifecycle(cluster, clock)
        await life.settled()
        yield life
