"""Exponential backoff with jitter, and a token-bucket rate limiter, with injectable clocks.

Both are pure bookkeeping: they compute delays and never sleep themselves (the limiter takes an
injectable sleep function), so their sequences are unit-tested without waiting.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

__all__ = ["Backoff", "BackoffPolicy", "TokenBucket"]

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class BackoffPolicy:
    """The shape of a backoff: client-go's reflector defaults (0.8 s doubling to 30 s).

    ``jitter`` adds a random ``[0, jitter)`` fraction of the current step on top of it, so that
    many clients failing together do not retry together. ``reset_after`` forgets the history
    when no failure happened for that long (client-go's backoff manager does the same), so a
    rare failure after hours of health starts again at ``initial``.
    """

    initial: float = 0.8
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 1.0
    reset_after: float = 120.0

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.cap < self.initial or self.factor < 1 or self.jitter < 0:
            raise ValueError(
                f"invalid backoff policy {self}: need 0 < initial <= cap, factor >= 1, jitter >= 0"
            )


class Backoff:
    """Successive delays of one retry loop under a :class:`BackoffPolicy`.

    The base step grows ``initial * factor**n`` up to ``cap``; each delay is the base step plus
    jitter. Call :meth:`reset` after a success.
    """

    def __init__(
        self,
        policy: BackoffPolicy | None = None,
        *,
        clock: Clock = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.policy = policy or BackoffPolicy()
        self._clock = clock
        self._rand = rand
        self._step: float | None = None
        self._last_failure: float | None = None
        self.failures = 0

    def next(self) -> float:
        """Record one failure and return how long to wait before the next attempt."""
        now = self._clock()
        p = self.policy
        if self._last_failure is not None and now - self._last_failure >= p.reset_after:
            self.reset()
        self._step = p.initial if self._step is None else min(self._step * p.factor, p.cap)
        self._last_failure = now
        self.failures += 1
        return self._step * (1.0 + p.jitter * self._rand()) if p.jitter else self._step

    def reset(self) -> None:
        """Forget past failures: the next delay starts again at ``initial``."""
        self._step = None
        self._last_failure = None
        self.failures = 0


class TokenBucket:
    """Client-side QPS/burst limiter (client-go's ``--kube-api-qps`` / ``--kube-api-burst``).

    Starts full with ``burst`` tokens refilled at ``qps`` per second. Waiters are served in
    arrival order: each reserves a token (possibly going into debt) and sleeps until it is paid,
    so no task polls or spins.
    """

    def __init__(
        self, qps: float, burst: int, *, clock: Clock = time.monotonic, sleep: Sleep = anyio.sleep
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"invalid rate limit qps={qps} burst={burst}: need qps > 0, burst > 0")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._updated = clock()

    def reserve(self) -> float:
        """Take one token now and return how long the caller must wait before using it."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.qps)
        self._updated = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        """Wait until one request may be sent."""
        delay = self.reserve()
        if delay > 0:
            await self._sleep(delay)
