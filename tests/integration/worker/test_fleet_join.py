"""A fleet joining at once: each ClusterQueue is written with its final quotas, not once per
node (the coalescing window waits while nodes still await their capacity labels)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    converged,
    fast_config,
    kueue_objects,
    nfd_master,
    node,
    put_node,
    worker_running,
)

pytestmark = [
    pytest.mark.anyio,
]
NODES = 24


async def test_a_joining_fleet_writes_each_queue_a_few_times(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    config = fast_config()
    async with nfd_master(sim), worker_running(sim_kubeconfig, config):
        put_node(sim, node("first"))
        await converged(sim, config)
        sim.counters.reset()
        for i in range(NODES):
            put_node(sim, node(f"joiner-{i:02d}", cards=("Tesla T4", 2)))
        await converged(sim, config)
        queues = kueue_objects(sim, "ClusterQueue")
        assert len(queues) == 2
        # One host queue (its quota unchanged by the cards) and one accelerated queue that
        # went from nothing to 24 nodes: without coalescing it was written about once per
        # batch window while the nodes were labelled one by one.
        assert sim.counters.writes("ClusterQueue") <= 3
        assert sim.counters.writes("NodeFeature") == NODES


async def test_a_lagging_nodefeature_watch_gets_no_second_write(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    """NFD's labelling of a new Node reaches the worker before the echo of the NodeFeature the
    worker just created (two watch streams, a busy machine): the reconcile that follows must
    not create the NodeFeature again because its cache has not seen it yet."""
    config = fast_config()
    sim.faults.add(verb="watch", kind="NodeFeature", status=None, write_delay=0.5)
    async with nfd_master(sim), worker_running(sim_kubeconfig, config):
        put_node(sim, node("first"))
        await converged(sim, config)
        sim.counters.reset()
        for i in range(4):
            put_node(sim, node(f"joiner-{i:02d}", cards=("Tesla T4", 2)))
        await converged(sim, config)
        assert sim.counters.writes("NodeFeature") == 4
