"""Two managers, one simulated API server, one Lease: exactly one runs the controllers."""

from __future__ import annotations

import copy
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.controller import Request
from gpustack_operator.runtime.leaderelection import LeaderElectionConfig, LeaderElectionLost
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.resources import CONFIGMAPS
from gpustack_sim.apiserver.server import SimServer
from tests.unit.runtime.polling import eventually

from .support import connected, options, running, start, unique

pytestmark = pytest.mark.anyio

LEASES_V1 = "coordination.k8s.io/v1"


def lease_spec(sim: SimServer, name: str) -> dict[str, Any]:
    lease = sim.store.get(LEASES_V1, "Lease", name, "default")
    assert lease is not None, f"lease {name} was never created"
    return dict(lease["spec"])


def build(
    client: Client, lease: str, identity: str, seen: list[tuple[str, str]], **timings: Any
) -> Manager:
    """A manager electing on *lease*, with a controller that records who reconciled what."""
    election = LeaderElectionConfig(lease, "default", identity, **timings)
    manager = Manager(client, options(leader_election=election))

    async def reconcile(req: Request) -> None:
        seen.append((identity, req.key))

    manager.controller(unique(f"le-{identity}")).for_(CONFIGMAPS).complete(reconcile)
    return manager


def reconciled_by(seen: list[tuple[str, str]], identity: str) -> set[str]:
    return {key for who, key in seen if who == identity}


async def two_clients(stack: AsyncExitStack, kubeconfig: Path) -> tuple[Client, Client]:
    """Each manager gets its own connection, as two replicas would."""
    return (
        await stack.enter_async_context(connected(kubeconfig)),
        await stack.enter_async_context(connected(kubeconfig)),
    )


async def test_one_leader_and_takeover_after_the_leader_dies(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    """The leader stops without releasing (as in a crash): the standby takes over on expiry."""
    lease = unique("crash-lease")
    seen: list[tuple[str, str]] = []
    # Short, but with slack for a loaded CI machine: the leader must never miss a renewal.
    timings: dict[str, Any] = {
        "lease_duration": 2.0,
        "renew_deadline": 1.5,
        "retry_period": 0.05,
        "release_on_cancel": False,
    }
    keys = set()
    for i in range(3):
        sim.store.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{i}", "namespace": "default"},
            }
        )
        keys.add(f"default/cm-{i}")
    async with AsyncExitStack() as stack:
        client_a, client_b = await two_clients(stack, sim_kubeconfig)
        a = build(client_a, lease, "a", seen, **timings)
        b = build(client_b, lease, "b", seen, **timings)
        async with anyio.create_task_group() as tg:
            handle_a = start(tg, a)
            await a.elected.wait()
            handle_b = start(tg, b)
            await b.synced.wait()
            await eventually(lambda: reconciled_by(seen, "a") == keys)
            # The standby watches the same objects and polls the Lease, but does not lead.
            await eventually(lambda: b.elector is not None and b.elector.observed_holder == "a")
            assert a.is_leader and not b.is_leader and not b.elected.is_set()
            assert reconciled_by(seen, "b") == set(), "the standby reconciled"

            await handle_a.stop()
            assert handle_a.errors == []
            assert lease_spec(sim, lease)["holderIdentity"] == "a", "nothing was released"
            await eventually(lambda: b.is_leader, timeout=60, what="takeover after expiry")
            # The new leader starts with a warm cache: its queue already holds every key.
            await eventually(lambda: reconciled_by(seen, "b") == keys)
            spec = lease_spec(sim, lease)
            assert spec["holderIdentity"] == "b"
            assert spec["leaseTransitions"] == 1
            await handle_b.stop()


async def test_release_on_clean_shutdown_makes_takeover_immediate(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    """The leader writes a one-hour lease: only its release can let the standby in."""
    lease = unique("release-lease")
    seen: list[tuple[str, str]] = []
    long_lease: dict[str, Any] = {
        "lease_duration": 3600.0,
        "renew_deadline": 10.0,
        "retry_period": 0.05,
    }
    async with AsyncExitStack() as stack:
        client_a, client_b = await two_clients(stack, sim_kubeconfig)
        a = build(client_a, lease, "a", seen, **long_lease)
        b = build(client_b, lease, "b", seen, **long_lease)
        async with anyio.create_task_group() as tg:
            handle_a = start(tg, a)
            await a.elected.wait()
            handle_b = start(tg, b)
            await eventually(lambda: b.elector is not None and b.elector.observed_holder == "a")
            assert lease_spec(sim, lease)["leaseDurationSeconds"] == 3600
            assert not b.is_leader

            await handle_a.stop()
            released = lease_spec(sim, lease)
            assert released["holderIdentity"] in ("", None, "b")
            await eventually(lambda: b.is_leader, timeout=60, what="takeover after release")
            assert lease_spec(sim, lease)["holderIdentity"] == "b"
            await handle_b.stop()
            assert handle_b.errors == []


async def test_losing_the_lease_stops_the_manager_with_an_error(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    lease = unique("lost-lease")
    seen: list[tuple[str, str]] = []
    async with connected(sim_kubeconfig) as client:
        manager = build(
            client, lease, "a", seen, lease_duration=30.0, renew_deadline=20.0, retry_period=0.05
        )
        async with running(manager) as (_, errors):
            await manager.elected.wait()
            stored = sim.store.get(LEASES_V1, "Lease", lease, "default")
            assert stored is not None
            stolen = copy.deepcopy(stored)
            stolen["spec"]["holderIdentity"] = "usurper"
            sim.store.update(stolen)
            await eventually(lambda: bool(errors), what="the manager to stop")
        assert isinstance(errors[0], LeaderElectionLost)
        assert "usurper" in str(errors[0])
        assert not manager.is_leader
        assert lease_spec(sim, lease)["holderIdentity"] == "usurper", "a lost leader wrote"


async def test_run_until_signal_exits_non_zero_on_lost_leadership(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    lease = unique("exit-lease")
    seen: list[tuple[str, str]] = []
    async with connected(sim_kubeconfig) as client:
        manager = build(
            client, lease, "a", seen, lease_duration=30.0, renew_deadline=20.0, retry_period=0.05
        )
        codes: list[int] = []

        async def main() -> None:
            codes.append(await manager.run_until_signal())

        async with anyio.create_task_group() as tg:
            tg.start_soon(main)
            with anyio.fail_after(30):
                await manager.elected.wait()
            stored = sim.store.get(LEASES_V1, "Lease", lease, "default")
            assert stored is not None
            stored["spec"]["holderIdentity"] = "usurper"
            sim.store.update(stored)
            await eventually(lambda: bool(codes), what="the process entry to return")
        assert codes == [1]
