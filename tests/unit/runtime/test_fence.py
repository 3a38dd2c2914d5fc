"""The write fence's rule (docs/runtime.md, "Write fence") on an injected clock."""

from __future__ import annotations

import pytest

from gpustack_operator.runtime.fence import LeaseFence, LeaseNotHeld, WriteFence


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_closed_until_the_first_renewal_and_open_for_less_than_the_deadline() -> None:
    clock = Clock()
    fence = LeaseFence(10.0, clock=clock)
    assert not fence.held()
    fence.renewed(clock.now)
    clock.now += 9.999
    assert fence.held()
    fence.check("an apply")  # does not raise
    clock.now += 0.001  # exactly the deadline since the renewal was sent
    assert not fence.held()
    with pytest.raises(LeaseNotHeld, match="refused to send an apply"):
        fence.check("an apply")
    assert fence.refused == 1


def test_an_older_renewal_never_moves_the_fence_back_and_close_shuts_it() -> None:
    clock = Clock()
    fence = LeaseFence(10.0, clock=clock)
    fence.renewed(55.0)
    fence.renewed(52.0)  # a slower attempt that finished later
    clock.now = 64.0
    assert fence.held()
    fence.close()
    assert not fence.held()


def test_without_election_the_fence_is_open() -> None:
    fence = WriteFence()
    assert fence.held()
    fence.check("a delete")


def test_the_deadline_must_be_positive() -> None:
    with pytest.raises(ValueError, match="renew_deadline"):
        LeaseFence(0.0)
