"""Recovery after faults (docs/runtime.md, "Recovery after faults"): once the API server
answers again, the chain equals the desired state within seconds (15 s at most here) and
``/readyz`` is ready.

The worked example converges; then every request fails (half 429 with ``Retry-After: 1``,
half 503), open watches are ended so the informers must list again, and meanwhile a person
changes the cluster (a namespace added, a node deleted, a node opted out). After the faults
are cleared, the chain must reach what ``plan`` computes within ``RECOVERY_BOUND``.

In the suite the faults last 10 s rather than the 60 s of the chaos campaign: what bounds
recovery is where the back-offs stand when the faults end, and 10 s of failures take every
one of them to its cap (a key's 5 ms doubling passes the 4 s cap after 10 failures, about
5 s; an informer's 0.8 s doubling reaches its 3 s cap after 3, under 7 s with jitter). A
longer outage only repeats capped retries. ``GPUSTACK_TEST_FAULT_SECONDS=60`` runs the same
test with the campaign's 60 s outage (docs/runtime.md, "Recovery after faults", gives both
figures). ``/readyz`` uses a 5 s failure threshold instead of 60 s
so that it turns not ready during the outage; turning ready again depends on the informers'
next successful list, not on the threshold.
"""

from __future__ import annotations

import os
import time

import aiohttp
import anyio
import pytest

from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.manager import Manager, ManagerOptions
from gpustack_operator.wiring import new_worker_manager, setup_worker
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.worker.support import idle

from .support import example_nodes

FAULT_SECONDS = float(os.environ.get("GPUSTACK_TEST_FAULT_SECONDS", "10"))
RECOVERY_BOUND = 15.0
"""The worst case docs/runtime.md derives is about 9 s (a key's 4 s cap plus ``Retry-After``,
3.9 s for the caches); the suite runs another worker beside this test on two cores, so the
bound leaves room for that. Without the transient cap a key of this outage waits over 60 s,
so the bound still tells the two apart."""

# The suite's per-test timeout (120 s) with room for a longer outage.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120 + int(FAULT_SECONDS))]


async def ready(manager: Manager) -> bool:
    assert manager.health_server is not None
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{manager.health_server.url}/readyz") as response,
    ):
        return response.status == 200


async def test_the_chain_recovers_within_seconds_of_the_faults_ending() -> None:
    async with SimCluster(example_nodes(), ["default", "team-a"], run_worker=False) as cluster:
        assert cluster.kubeconfig is not None
        async with await Client.connect(cluster.kubeconfig) as client:
            options = ManagerOptions(
                component="gpustack-operator",
                health_probe_bind_address="127.0.0.1:0",
                metrics_bind_address="0",
                graceful_shutdown_timeout=2.0,
                informer_failure_threshold=5.0,
            )
            manager = new_worker_manager(client, options)
            setup_worker(manager, cluster.worker_config)

            def at_rest() -> bool:
                return cluster.idle() and idle(manager)

            async with anyio.create_task_group() as tg:
                tg.start_soon(manager.run)
                await cluster.converge(60.0, idle=at_rest)
                assert await ready(manager)

                faults = cluster.sim.faults
                faults.add(verb="*", status=429, share=0.5, retry_after=1)
                faults.add(verb="*", status=503)
                assert cluster.sim.end_watches() > 0
                cluster.add_namespace("team-b")
                cluster.delete_node("cpu-epyc-2")
                cluster.edit_node("gpu-t4-2", labels={"gpustack.ai/managed": "false"})
                outage_ends = time.monotonic() + FAULT_SECONDS
                went_unready = False
                while time.monotonic() < outage_ends:
                    if not await ready(manager):
                        went_unready = True
                    await anyio.sleep(0.2)
                assert went_unready, "/readyz stayed ready through the outage"
                faults.clear()
                cleared = time.monotonic()

                await cluster.converge(RECOVERY_BOUND, idle=at_rest)
                converged_after = time.monotonic() - cleared
                with anyio.fail_after(max(0.0, RECOVERY_BOUND - converged_after)):
                    while not await ready(manager):  # noqa: ASYNC110 - polls the probe
                        await anyio.sleep(0.05)
                ready_after = time.monotonic() - cleared
                print(  # the figures docs/runtime.md reports
                    f"recovery: converged {converged_after:.1f}s, ready {ready_after:.1f}s "
                    "after the faults ended"
                )
                tg.cancel_scope.cancel()
