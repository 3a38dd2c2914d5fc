"""A flapping node: its NodeFeature is written at most once per coalescing window, and ends
with the node's final state (docs/worker.md, "Flapping nodes").

The acceptance is a node flipping its labels every 100 ms for 10 s under the default 1 s
window: at most one write per window. Scaled by one half to keep the suite fast (flips every
50 ms for 5 s, a 0.5 s window): the same ten flips per window and ten windows, so the same
bound, ceil(5 s / 0.5 s) + 1 = 11 writes (the leading write, then at most one per window).
"""

from __future__ import annotations

import math
from pathlib import Path

import anyio
import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    NFD,
    NS,
    A,
    converged,
    eventually,
    fast_config,
    nfd_master,
    node,
    put_node,
    relabel,
    worker_running,
)

pytestmark = [
    pytest.mark.anyio,
]

WINDOW = 0.5
FLIP_PERIOD = 0.05
FLAPPING_FOR = 5.0
SLICED = A + "nvidia-tesla-t4.sliced.partitions"
PARTITIONS = ("2", "3", "4")
"""The values the node cycles through: three, so that a window of ten flips ends on a value
other than the one it started from and every window has something to write."""
QUEUE_LABEL = A + "nvidia-tesla-t4.z-queue"


def queue_label(sim: SimServer) -> str | None:
    """The queue label of the flapping node's NodeFeature (it names the partitions)."""
    feature = sim.store.get(NFD, "NodeFeature", "flappy-gpustack-worker", NS)
    return None if feature is None else feature["spec"]["labels"].get(QUEUE_LABEL)


async def test_a_flapping_node_is_written_at_most_once_per_window(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    config = fast_config(capacity_window=WINDOW)
    async with nfd_master(sim), worker_running(sim_kubeconfig, config):
        put_node(sim, node("flappy", cards=("Tesla T4", 2), sliced=2))
        await converged(sim, config)
        assert queue_label(sim) == "8c-32g-1d-2s"
        sim.counters.reset()
        flips = 0
        with anyio.move_on_after(FLAPPING_FOR):
            while True:
                flips += 1
                last = PARTITIONS[flips % len(PARTITIONS)]
                relabel(sim, "flappy", **{SLICED: last})
                await anyio.sleep(FLIP_PERIOD)
        # Each flip changes the NodeFeature: without coalescing, one write per flip.
        assert flips > 2 * math.ceil(FLAPPING_FOR / WINDOW)
        await eventually(
            lambda: queue_label(sim) == f"8c-32g-1d-{last}s", "the final partitions written"
        )
        await converged(sim, config)
        writes = sim.counters.writes("NodeFeature")
        assert 2 <= writes <= math.ceil(FLAPPING_FOR / WINDOW) + 1, f"{writes} NodeFeature writes"
