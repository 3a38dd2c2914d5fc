"""Event fan-out: filtering, order, and the bound on a slow subscriber."""

from __future__ import annotations

import json

import pytest

from gpustack_operator.gateway.hub import Event, Hub

pytestmark = pytest.mark.anyio


def _event(n: int, cluster: str = "east", topic: str = "pools") -> Event:
    return Event("MODIFIED", topic, cluster, {"n": n})


async def test_subscribers_get_matching_events_in_order() -> None:
    hub = Hub(capacity=10)
    every = hub.subscribe("pools")
    west = hub.subscribe("pools", "west")
    other = hub.subscribe("clusters")
    for n in range(3):
        hub.publish(_event(n, "east"))
        hub.publish(_event(n, "west"))
    lines = [json.loads(line) for line in await every.next_batch()]
    assert [(e["cluster"], e["object"]["n"]) for e in lines] == [
        ("east", 0), ("west", 0), ("east", 1), ("west", 1), ("east", 2), ("west", 2),
    ]  # fmt: skip
    assert [json.loads(line)["object"]["n"] for line in await west.next_batch()] == [0, 1, 2]
    assert len(other) == 0


async def test_a_subscriber_over_its_bound_is_closed_and_others_continue() -> None:
    hub = Hub(capacity=3)
    slow, fast = hub.subscribe("pools"), hub.subscribe("pools")
    dropped: list[bool] = []
    slow.on_overflow = lambda: dropped.append(True)
    for n in range(3):
        hub.publish(_event(n))
        assert len(await fast.next_batch()) == 1
    assert len(slow) == 3 and not slow.overflowed
    hub.publish(_event(3))
    assert slow.overflowed and slow.closed and dropped == [True]
    assert len(slow) == 0  # its buffer is released at once
    assert await slow.next_batch() == []
    hub.publish(_event(4))
    assert dropped == [True]  # told once
    assert [json.loads(line)["object"]["n"] for line in await fast.next_batch()] == [3, 4]


async def test_closing_a_cluster_ends_only_its_own_streams() -> None:
    hub = Hub()
    west, every = hub.subscribe("pools", "west"), hub.subscribe("pools")
    hub.publish(_event(1, "west"))
    hub.close_cluster("west")
    assert len(await west.next_batch()) == 1  # what was queued is still delivered
    assert await west.next_batch() == []
    assert not every.closed
    hub.unsubscribe(west)
    hub.unsubscribe(every)
    assert len(hub) == 0


async def test_the_byte_bound_applies_too_but_one_big_event_always_fits() -> None:
    hub = Hub(capacity=100, max_bytes=400)  # a small event is 54 bytes
    sub = hub.subscribe("pools")
    hub.publish(Event("ADDED", "pools", "east", {"pad": "x" * 500}))
    assert len(sub) == 1 and not sub.overflowed  # an empty buffer takes any one event
    assert len(await sub.next_batch()) == 1
    for n in range(5):
        hub.publish(_event(n))
    assert len(sub) == 5 and not sub.overflowed  # 270 bytes
    hub.publish(Event("ADDED", "pools", "east", {"pad": "x" * 150}))  # 204 more
    assert sub.overflowed


def test_a_buffer_needs_room() -> None:
    with pytest.raises(ValueError, match="at least one event"):
        Hub(capacity=0).subscribe("pools")
