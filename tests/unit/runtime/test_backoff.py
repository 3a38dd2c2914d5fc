"""Backoff sequences and the token bucket, computed with injected clocks (no sleeping)."""

from __future__ import annotations

import pytest

from gpustack_operator.runtime.backoff import Backoff, BackoffPolicy, TokenBucket


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_default_policy_is_client_go_reflector_backoff() -> None:
    policy = BackoffPolicy()
    assert (policy.initial, policy.cap, policy.factor) == (0.8, 30.0, 2.0)


def test_backoff_doubles_from_initial_to_cap_without_jitter() -> None:
    backoff = Backoff(BackoffPolicy(jitter=0.0), clock=FakeClock(), rand=lambda: 0.5)
    delays = [backoff.next() for _ in range(9)]
    assert delays == pytest.approx([0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0])
    assert backoff.failures == 9


def test_jitter_adds_up_to_jitter_times_the_step() -> None:
    low = Backoff(BackoffPolicy(jitter=1.0), clock=FakeClock(), rand=lambda: 0.0)
    high = Backoff(BackoffPolicy(jitter=1.0), clock=FakeClock(), rand=lambda: 0.999)
    assert [low.next() for _ in range(3)] == pytest.approx([0.8, 1.6, 3.2])
    assert [high.next() for _ in range(3)] == pytest.approx([1.5992, 3.1984, 6.3968])


def test_reset_starts_again_at_initial() -> None:
    backoff = Backoff(BackoffPolicy(jitter=0.0), clock=FakeClock())
    for _ in range(5):
        backoff.next()
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.next() == pytest.approx(0.8)


def test_quiet_period_resets_the_sequence() -> None:
    clock = FakeClock()
    backoff = Backoff(BackoffPolicy(jitter=0.0, reset_after=120.0), clock=clock)
    assert [backoff.next() for _ in range(3)] == pytest.approx([0.8, 1.6, 3.2])
    clock.now += 119.0
    assert backoff.next() == pytest.approx(6.4)
    clock.now += 120.0
    assert backoff.next() == pytest.approx(0.8)


@pytest.mark.parametrize(
    "kwargs",
    [{"initial": 0.0}, {"initial": 5.0, "cap": 1.0}, {"factor": 0.5}, {"jitter": -1.0}],
)
def test_invalid_policy_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="invalid backoff policy"):
        BackoffPolicy(**kwargs)


def test_token_bucket_allows_burst_then_paces_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10.0, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    # Debt accumulates: each further request waits one more 1/qps.
    assert [bucket.reserve() for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    clock.now += 10.0
    # Refilled, but never beyond the burst.
    assert [bucket.reserve() for _ in range(4)] == pytest.approx([0.0, 0.0, 0.0, 0.1])


@pytest.mark.anyio
async def test_token_bucket_acquire_sleeps_only_when_in_debt() -> None:
    slept: list[float] = []

    async def record(delay: float) -> None:
        slept.append(delay)

    bucket = TokenBucket(qps=2.0, burst=1, clock=FakeClock(), sleep=record)
    await bucket.acquire()
    await bucket.acquire()
    await bucket.acquire()
    assert slept == pytest.approx([0.5, 1.0])


def test_token_bucket_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="invalid rate limit"):
        TokenBucket(qps=0.0, burst=1)
