"""The write fence (docs/runtime.md, "Write fence"): once the Lease has not been renewed for
``renew_deadline`` seconds by the leader's monotonic clock, its reconcilers keep running but
no write reaches the server.

The leader's clock is injected: renewals are made to fail (a fault on Leases), the clock is
moved past the deadline — what a process resumed after a long stop sees — and then a person's
edits give the reconcilers work. Every write
request the simulated server receives from then on is counted. The same scenario with the
fence held open shows that the reconcilers would have written, so the first assertion can
fail.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.fence import LeaseFence
from gpustack_operator.runtime.leaderelection import LeaderElectionConfig, LeaderElectionLost
from gpustack_operator.runtime.manager import ManagerOptions
from gpustack_operator.wiring import new_worker_manager, setup_worker
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    KUEUE,
    NS,
    converged,
    eventually,
    fast_config,
    kueue_objects,
    nfd_master,
    node,
    put_node,
)

pytestmark = pytest.mark.anyio

RENEW_DEADLINE = 10.0


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def writes_after_the_deadline(sim: SimServer, kubeconfig: Path) -> tuple[int, int]:
    """Run the scenario; return (write requests after the deadline, writes refused)."""
    config = fast_config()
    clock = FakeClock()
    election = LeaderElectionConfig(
        "worker.gpustack.ai",
        NS,
        "leader-a",
        lease_duration=15.0,
        renew_deadline=RENEW_DEADLINE,
        retry_period=0.5,
    )
    options = ManagerOptions(
        component="gpustack-operator-worker",
        health_probe_bind_address="0",
        metrics_bind_address="0",
        leader_election=election,
        graceful_shutdown_timeout=2.0,
    )
    put_node(sim, node("gpu-1", cards=("Tesla T4", 2)))
    put_node(sim, node("cpu-1"))
    lost: list[BaseException] = []
    async with await Client.connect(kubeconfig) as client, nfd_master(sim):
        manager = new_worker_manager(client, options, clock=clock)
        setup_worker(manager, config)

        async def run() -> None:
            try:
                await manager.run()
            except LeaderElectionLost as err:
                lost.append(err)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await converged(sim, config)
            # Renewals stop: every Lease request fails from now on, answered only after the
            # elector's own bound (renew_deadline, real seconds) gives up on it. Once one has
            # arrived, the elector waits on it that long before it can see the deadline
            # passed: the reconcilers have that long to try their writes (a failure answered
            # at once left them half a second, too little under load).
            fault = sim.faults.add(kind="Lease", status=500, delay=3 * RENEW_DEADLINE)
            await eventually(lambda: fault.fired > 0, "a renewal to be sent")
            clock.now += RENEW_DEADLINE + 0.5
            before = sim.counters.writes()
            # Work for every reconciler: a node joins, a person deletes a flavor.
            put_node(sim, node("gpu-2", cards=("A10G", 1)))
            flavor = kueue_objects(sim, "ResourceFlavor")[0]
            sim.store.delete(KUEUE, "ResourceFlavor", flavor["metadata"]["name"])
            refused_before = manager.fence.refused
            await eventually(
                lambda: manager.fence.refused > refused_before or sim.counters.writes() > before,
                "a reconciler to try a write",
            )
            # Let the reconcilers keep trying until the elector gives up and stops them.
            await eventually(lambda: bool(lost), "the manager to stop on the lost lease")
            after = sim.counters.writes()
            tg.cancel_scope.cancel()
    return after - before, manager.fence.refused


async def test_a_leader_past_its_renew_deadline_writes_nothing(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    writes, refused = await writes_after_the_deadline(sim, sim_kubeconfig)
    assert writes == 0
    assert refused > 0


async def test_without_the_fence_the_same_leader_writes(
    sim: SimServer, sim_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: the scenario does make the reconcilers write when nothing stops them."""
    monkeypatch.setattr(LeaseFence, "held", lambda self: True)
    writes, _ = await writes_after_the_deadline(sim, sim_kubeconfig)
    assert writes > 0
