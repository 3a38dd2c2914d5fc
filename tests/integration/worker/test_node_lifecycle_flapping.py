"""Nothing flaps (docs/node-lifecycle.md, "Flapping"): ten simulated minutes of a node's
Ready condition flipping every 10 s, of its device plugin restarting, and of Karpenter adding
and withdrawing its taint, each costing at most the stated number of ClusterQueue writes.
The worker runs on a driven clock: each step moves it and fires the queues' requeues."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpustack_operator.domain.node.availability import format_time
from tests.integration.worker.lifecycle import GPU, TIMERS, Lifecycle, gpu_node, lifecycle_cluster

pytestmark = pytest.mark.anyio

MINUTES = 10
STEP = 10.0
STEPS = int(MINUTES * 60 / STEP)
READY_FLAPPING_WRITES = 0
"""Each NotReady spell (10 s) is shorter than the soft grace: the node never stops counting."""
PLUGIN_RESTART_WRITES = 0
"""Each restart (allocatable 0 for 20 s) is shorter than the device grace."""
KARPENTER_TAINT_WRITES = 2
"""Per ClusterQueue the node counts in (its device pool and its general pool): withheld at
the first taint, counted again a join window after the last withdrawal."""


def pool(clock: Any) -> list[dict[str, Any]]:
    return [gpu_node("gpu-a", clock), gpu_node("gpu-b", clock)]


async def flap(life: Lifecycle, state_at: Callable[[int], Callable[[dict[str, Any]], None]]) -> int:
    """Apply ``state_at(step)`` to gpu-a every STEP simulated seconds for MINUTES; returns
    the ClusterQueue writes it cost (the recovery afterwards included)."""
    life.cluster.sim.counters.reset()
    for step in range(STEPS):
        life.edit("gpu-a", state_at(step))
        await life.settled()
        await life.advance(STEP)
    return life.cluster.sim.counters.writes("ClusterQueue")


async def test_ready_flipping_every_ten_seconds_writes_nothing() -> None:
    async with lifecycle_cluster(pool) as life:

        def state_at(step: int) -> Callable[[dict[str, Any]], None]:
            status = "False" if step % 2 == 0 else "True"
            since = format_time(life.clock.now)

            def edit(n: dict[str, Any]) -> None:
                n["status"]["conditions"] = [
                    {"type": "Ready", "status": status, "lastTransitionTime": since}
                ]

            return edit

        writes = await flap(life, state_at)
        assert life.gpus() == 4
        assert writes <= READY_FLAPPING_WRITES, f"{writes} ClusterQueue writes"


async def test_a_device_plugin_restarting_writes_nothing() -> None:
    async with lifecycle_cluster(pool) as life:

        def state_at(step: int) -> Callable[[dict[str, Any]], None]:
            gone = step % 6 < 2  # 20 s of every minute

            def edit(n: dict[str, Any]) -> None:
                n["status"]["allocatable"][GPU] = "0" if gone else "2"

            return edit

        writes = await flap(life, state_at)
        assert life.gpus() == 4
        assert writes <= PLUGIN_RESTART_WRITES, f"{writes} ClusterQueue writes"


async def test_karpenter_adding_and_withdrawing_its_taint_writes_twice() -> None:
    async with lifecycle_cluster(pool) as life:

        def state_at(step: int) -> Callable[[dict[str, Any]], None]:
            tainted = step % 2 == 0

            def edit(n: dict[str, Any]) -> None:
                if tainted:
                    n["spec"]["taints"] = [
                        {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
                    ]
                else:
                    n["spec"].pop("taints", None)

            return edit

        writes = await flap(life, state_at)
        assert life.gpus() == 2, "withheld while the taint keeps coming back"
        life.edit("gpu-a", lambda n: n["spec"].pop("taints", None))
        await life.settled()
        await life.advance(TIMERS.join_window + 1)
        assert life.gpus() == 4
        writes = life.cluster.sim.counters.writes("ClusterQueue")
        bound = KARPENTER_TAINT_WRITES * life.queues()
        assert life.queues() == 2 and 1 <= writes <= bound, f"{writes} ClusterQueue writes"
