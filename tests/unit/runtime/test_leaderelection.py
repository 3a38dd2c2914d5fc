"""Leader election logic against an in-memory Lease store with optimistic concurrency."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from gpustack_operator.runtime import metrics
from gpustack_operator.runtime.client import AlreadyExists, Conflict, NotFound, ServerError
from gpustack_operator.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionLost,
    LeaderElector,
)
from gpustack_operator.runtime.resources import LEASES, Resource

from .polling import eventually

pytestmark = pytest.mark.anyio

_names = iter(range(10**6))


class FakeLeases:
    """Stores Leases by (namespace, name); PUT needs the current resourceVersion."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.rv = 0
        self.fail_reads = False
        self.gets = 0

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(obj)

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        assert res is LEASES
        self.gets += 1
        if self.fail_reads:
            raise ServerError("etcdserver: request timed out", status=500)
        obj = self.objects.get((namespace or "", name))
        if obj is None:
            raise NotFound(f'leases "{name}" not found', status=404, reason="NotFound")
        return copy.deepcopy(obj)

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        key = (namespace or "", body["metadata"]["name"])
        if key in self.objects:
            raise AlreadyExists("already exists", status=409, reason="AlreadyExists")
        self.objects[key] = copy.deepcopy(body)
        return self._bump(self.objects[key])

    async def replace(
        self, res: Resource, body: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        current = self.objects[key]
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict("the object has been modified", status=409, reason="Conflict")
        self.objects[key] = copy.deepcopy(body)
        return self._bump(self.objects[key])

    def spec(self, name: str, namespace: str = "ns") -> dict[str, Any]:
        return dict(self.objects[(namespace, name)]["spec"])


class FrozenClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def config(name: str, identity: str, **overrides: Any) -> LeaderElectionConfig:
    timings: dict[str, Any] = {
        "lease_duration": 1.0,
        "renew_deadline": 0.5,
        "retry_period": 0.01,
    }
    timings.update(overrides)
    return LeaderElectionConfig(name, "ns", identity, **timings)


def lease_name() -> str:
    return f"lease-{next(_names)}"


def test_config_validates_timings() -> None:
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderElectionConfig("l", "ns", "me", lease_duration=5, renew_deadline=10)
    with pytest.raises(ValueError, match="retry_period"):
        LeaderElectionConfig("l", "ns", "me", renew_deadline=2, retry_period=2)
    with pytest.raises(ValueError, match="identity"):
        LeaderElectionConfig("l", "ns", "")
    default = LeaderElectionConfig("l", "ns")
    assert (default.lease_duration, default.renew_deadline, default.retry_period) == (15, 10, 2)
    assert default.identity != LeaderElectionConfig("l", "ns").identity


async def test_single_candidate_acquires_renews_and_releases() -> None:
    leases = FakeLeases()
    name = lease_name()
    elector = LeaderElector(leases, config(name, "a"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(elector.run)
        await elector.elected.wait()
        assert elector.is_leader
        assert (
            metrics.REGISTRY.get_sample_value("leader_election_master_status", {"name": name}) == 1
        )
        first = leases.spec(name)
        assert first["holderIdentity"] == "a"
        assert first["leaseDurationSeconds"] == 1
        assert first["leaseTransitions"] == 0
        await eventually(lambda: leases.spec(name)["renewTime"] != first["renewTime"])
        assert leases.spec(name)["acquireTime"] == first["acquireTime"], "renewal keeps it"
        tg.cancel_scope.cancel()
    released = leases.spec(name)
    assert released["holderIdentity"] == ""
    assert released["leaseDurationSeconds"] == 1
    assert not elector.is_leader
    assert metrics.REGISTRY.get_sample_value("leader_election_master_status", {"name": name}) == 0


async def test_exactly_one_of_two_leads_and_release_hands_over_without_expiry() -> None:
    leases = FakeLeases()
    name = lease_name()
    # The standby's clock never advances: it can only take over a *released* lease.
    standby_clock = FrozenClock()
    a = LeaderElector(leases, config(name, "a"))
    b = LeaderElector(leases, config(name, "b"), clock=standby_clock)
    a_scope = anyio.CancelScope()

    async def run_a() -> None:
        with a_scope:
            await a.run()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_a)
        await a.elected.wait()
        tg.start_soon(b.run)
        await eventually(lambda: leases.gets >= 10, what="the standby to poll a few times")
        assert a.is_leader and not b.is_leader
        assert b.observed_holder == "a"
        a_scope.cancel()
        await eventually(lambda: b.is_leader, what="the standby to take over")
        assert not a.is_leader
        spec = leases.spec(name)
        assert spec["holderIdentity"] == "b"
        assert spec["leaseTransitions"] == 1, "taking a released lease is a transition"
        tg.cancel_scope.cancel()


async def test_expiry_is_judged_on_the_local_monotonic_clock() -> None:
    leases = FakeLeases()
    name = lease_name()
    # A lease whose wall-clock renewTime is decades old: only local observation counts.
    leases.objects[("ns", name)] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
        "spec": {
            "holderIdentity": "ghost",
            "leaseDurationSeconds": 15,
            "acquireTime": "1990-01-01T00:00:00.000000Z",
            "renewTime": "1990-01-01T00:00:00.000000Z",
            "leaseTransitions": 4,
        },
    }
    clock = FrozenClock()
    elector = LeaderElector(leases, config(name, "me"), clock=clock)
    async with anyio.create_task_group() as tg:
        tg.start_soon(elector.run)
        await eventually(lambda: leases.gets >= 5, what="several polls")
        assert not elector.is_leader, "took over on a wall-clock comparison"
        clock.now += 14.9
        gets = leases.gets
        await eventually(lambda: leases.gets >= gets + 3, what="more polls")
        assert not elector.is_leader
        clock.now += 0.2  # now 15.1 s since the record was first seen unchanged
        await elector.elected.wait()
        spec = leases.spec(name)
        assert spec["holderIdentity"] == "me"
        assert spec["leaseTransitions"] == 5
        assert spec["acquireTime"] != "1990-01-01T00:00:00.000000Z"
        tg.cancel_scope.cancel()


async def test_a_renewed_lease_is_never_taken_over() -> None:
    leases = FakeLeases()
    name = lease_name()
    clock = FrozenClock()
    a = LeaderElector(leases, config(name, "a"))
    b = LeaderElector(leases, config(name, "b"), clock=clock)
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.run)
        await a.elected.wait()
        tg.start_soon(b.run)
        await eventually(lambda: b.observed_holder == "a")
        for _ in range(6):
            # Time passes for b, but a keeps renewing: b sees a new record each time.
            seen = b.observed_record["renewTime"]
            await eventually(lambda s=seen: b.observed_record["renewTime"] != s)  # type: ignore[misc]
            clock.now += 0.5
        assert a.is_leader and not b.is_leader
        tg.cancel_scope.cancel()


class UnansweredRenewal(FakeLeases):
    """Once :attr:`armed`, the next PUT is stored and never answered: a renewal the
    shutdown cancels after the server applied it."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.unanswered = anyio.Event()

    async def replace(
        self, res: Resource, body: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        stored = await super().replace(res, body, subresource=subresource)
        if self.armed:
            self.armed = False
            self.unanswered.set()
            await anyio.sleep_forever()
        return stored


async def stopped_after_an_unanswered_renewal(
    leases: UnansweredRenewal, name: str, meanwhile: Callable[[], Awaitable[None]] | None = None
) -> None:
    """Elect "a", let its next renewal go unanswered, run *meanwhile*, then stop it."""
    elector = LeaderElector(leases, config(name, "a", lease_duration=3600, renew_deadline=50))
    async with anyio.create_task_group() as tg:
        tg.start_soon(elector.run)
        await elector.elected.wait()
        leases.armed = True
        await leases.unanswered.wait()
        if meanwhile is not None:
            await meanwhile()
        tg.cancel_scope.cancel()


async def test_a_release_after_a_renewal_whose_answer_never_came_still_releases() -> None:
    """The Lease held is one version behind the server's: the release reads it again and
    empties the holder, so the standby need not wait for the lease to expire."""
    leases = UnansweredRenewal()
    name = lease_name()
    await stopped_after_an_unanswered_renewal(leases, name)
    released = leases.spec(name)
    assert released["holderIdentity"] == ""
    assert released["leaseDurationSeconds"] == 1


async def test_a_release_leaves_a_lease_another_replica_took_meanwhile() -> None:
    leases = UnansweredRenewal()
    name = lease_name()

    async def taken_by_b() -> None:
        taken = copy.deepcopy(leases.objects[("ns", name)])
        taken["spec"]["holderIdentity"] = "b"
        await FakeLeases.replace(leases, LEASES, taken)

    await stopped_after_an_unanswered_renewal(leases, name, taken_by_b)
    assert leases.spec(name)["holderIdentity"] == "b"


async def test_leader_that_cannot_renew_loses_and_does_not_release() -> None:
    leases = FakeLeases()
    name = lease_name()
    elector = LeaderElector(leases, config(name, "a", renew_deadline=0.05))
    await_lost: list[BaseException] = []

    async def run() -> None:
        try:
            await elector.run()
        except LeaderElectionLost as err:
            await_lost.append(err)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await elector.elected.wait()
        leases.fail_reads = True
        await eventually(lambda: bool(await_lost), what="leadership to be lost")
    assert "could not renew" in str(await_lost[0])
    assert not elector.is_leader
    assert leases.spec(name)["holderIdentity"] == "a", "a lost leader must not write the lease"


async def test_leader_that_sees_another_holder_loses_at_once() -> None:
    leases = FakeLeases()
    name = lease_name()
    # A long renew deadline: only seeing the usurper can end leadership within the test.
    elector = LeaderElector(leases, config(name, "a", renew_deadline=50, lease_duration=60))
    lost: list[LeaderElectionLost] = []

    async def run() -> None:
        try:
            await elector.run()
        except LeaderElectionLost as err:
            lost.append(err)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await elector.elected.wait()
        stolen = copy.deepcopy(leases.objects[("ns", name)])
        stolen["spec"]["holderIdentity"] = "usurper"
        await leases.replace(LEASES, stolen)
        await eventually(lambda: bool(lost), what="leadership to be lost")
    assert "usurper" in str(lost[0])
    assert leases.spec(name)["holderIdentity"] == "usurper"


async def test_concurrent_creates_elect_one() -> None:
    leases = FakeLeases()
    name = lease_name()
    electors = [LeaderElector(leases, config(name, f"c{i}")) for i in range(5)]
    async with anyio.create_task_group() as tg:
        for elector in electors:
            tg.start_soon(elector.run)
        await eventually(lambda: any(e.is_leader for e in electors))
        await eventually(lambda: leases.gets >= 30)
        assert sum(e.is_leader for e in electors) == 1
        tg.cancel_scope.cancel()
