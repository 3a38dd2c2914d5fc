"""Two workers against one cluster: only the leader runs controllers; the other takes over."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack_operator.runtime.leaderelection import LeaderElectionConfig
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    NS,
    Running,
    converged,
    eventually,
    fast_config,
    nfd_master,
    node,
    put_node,
    worker_running,
)

pytestmark = [
    pytest.mark.anyio,
]


def election(identity: str) -> LeaderElectionConfig:
    """Short timers, yet a renewal may wait out the event loop this process shares with the
    simulated API server and a second worker: at controller start on two busy cores that
    loop stalled past a 1.5 s deadline and the leader (rightly) stepped down. The takeover
    is timed by the first worker's release, not by these."""
    return LeaderElectionConfig(
        lease_name="worker.gpustack.ai",
        lease_namespace=NS,
        identity=identity,
        lease_duration=8.0,
        renew_deadline=6.0,
        retry_period=0.2,
    )


def quiet(running: Running) -> bool:
    """No controller of this replica has started (so it has written nothing)."""
    return not running.manager.elected.is_set() and not any(
        c.started for c in running.manager.controllers
    )


async def test_only_the_leader_writes_and_the_standby_takes_over(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    config = fast_config()
    put_node(sim, node("one"))
    async with (
        nfd_master(sim),
        worker_running(sim_kubeconfig, config, election=election("first")) as first,
    ):
        await eventually(lambda: first.manager.is_leader, "the first worker to lead")
        async with worker_running(sim_kubeconfig, config, election=election("second")) as second:
            await converged(sim, config)
            # Discovery runs on standbys too (readiness), the controllers do not.
            await eventually(second.worker.kueue_ready, "the standby to find Kueue")
            assert quiet(second)
            assert not any(c.started for c in second.worker.queue_controllers)
            assert all(len(c.queue) == 0 for c in second.worker.queue_controllers)

            first.stop()  # graceful: the Lease is released
            await eventually(lambda: second.manager.is_leader, "the standby to take over")
            put_node(sim, node("two", cpu="32", memory="128Gi"))
            await converged(sim, config)
            assert len(second.worker.queue_controllers) == 7  # Topology, teams (docs/teams.md)
            assert all(c.started for c in second.worker.queue_controllers)
            assert not first.manager.is_leader
