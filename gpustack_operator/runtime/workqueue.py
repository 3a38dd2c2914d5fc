"""A deduplicating, delaying, rate-limited work queue (client-go's ``workqueue`` semantics).

Keys (strings) flow through three states:

* **dirty** — waiting to be handed out. Adding a key that is already dirty does nothing, so a
  burst of events for one object collapses into one reconcile.
* **processing** — handed out by :meth:`WorkQueue.get` and not yet :meth:`WorkQueue.done`.
  A key that is processing is never handed out again, so two workers never reconcile the same
  object at once. If it is added meanwhile it becomes dirty and is handed out once more after
  ``done``: exactly one more run, however many adds arrived.
* **waiting** — added with :meth:`WorkQueue.add_after`; it becomes dirty at its deadline. A key
  waits at most once: a second ``add_after`` keeps the earlier deadline.

:meth:`WorkQueue.add_rate_limited` delays a key by its rate limiter's backoff (per-key
exponential, 5 ms * 2^n capped at 1000 s, by default combined with an overall token bucket as
in controller-runtime); :meth:`WorkQueue.forget` resets that key's backoff.

After :meth:`WorkQueue.shut_down` adds are ignored and :meth:`WorkQueue.get` raises
:class:`ShutDown` (keys still dirty are dropped: the next start lists everything anew);
:meth:`WorkQueue.shut_down_with_drain` also waits for the keys in processing to be done.

The queue lives on one asyncio event loop and is not thread-safe; every method but ``get`` and
``shut_down_with_drain`` is synchronous and O(1) or O(log n), so informer event handlers may
call them directly.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from gpustack_operator.runtime import metrics

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "ShutDown",
    "WorkQueue",
    "default_controller_rate_limiter",
]

Clock = Callable[[], float]

# asyncio may run a timer this much before its deadline; count such keys as due.
_TIMER_SLACK = time.get_clock_info("monotonic").resolution


class ShutDown(Exception):
    """Raised by :meth:`WorkQueue.get` once the queue is shut down."""


# --- rate limiters ------------------------------------------------------------------------------


class RateLimiter(Protocol):
    """Decides how long a key waits before it is retried."""

    def when(self, key: str) -> float:
        """Record one more failure of *key* and return the delay in seconds before its retry."""
        ...

    def forget(self, key: str) -> None:
        """Stop tracking *key*: its next failure starts from the smallest delay again."""
        ...

    def num_requeues(self, key: str) -> int:
        """How many times *key* failed since it was last forgotten."""
        ...


class ItemExponentialFailureRateLimiter:
    """Per-key exponential backoff: ``base * 2**failures``, capped at ``cap`` seconds."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        if base <= 0 or cap < base:
            raise ValueError(f"backoff needs 0 < base <= cap, got base={base} cap={cap}")
        self.base = base
        self.cap = cap
        self._failures: dict[str, int] = {}

    def when(self, key: str) -> float:
        exp = self._failures.get(key, 0)
        self._failures[key] = exp + 1
        # Past 2**1023 the float overflows; the cap is reached long before that anyway.
        if exp > 1000:
            return self.cap
        return min(self.base * math.ldexp(1.0, exp), self.cap)

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: str) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """An overall token bucket (``qps`` refill, ``burst`` size) shared by every key.

    It bounds the retry rate of a whole controller when many keys fail at once; it does not
    track keys, so ``forget`` and ``num_requeues`` are no-ops.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"token bucket needs qps > 0 and burst >= 1, got {qps}, {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def when(self, key: str) -> float:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now
        # Reserve a token even when none is left: the caller waits until it would have been.
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, key: str) -> None:
        return None

    def num_requeues(self, key: str) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest delay of several limiters; requeue counts come from the largest one."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters = limiters

    def when(self, key: str) -> float:
        return max(limiter.when(key) for limiter in self.limiters)

    def forget(self, key: str) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def num_requeues(self, key: str) -> int:
        return max(limiter.num_requeues(key) for limiter in self.limiters)


def default_controller_rate_limiter() -> RateLimiter:
    """controller-runtime's default: per-key 5 ms .. 1000 s, overall 10 qps with burst 100."""
    return MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.005, 1000.0), BucketRateLimiter())


# --- the queue ----------------------------------------------------------------------------------


class WorkQueue:
    """The work queue; see the module docstring for its semantics.

    *name* labels the ``workqueue_*`` metrics; an unnamed queue records none.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        rate_limiter: RateLimiter | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._name = name
        self._rate_limiter = rate_limiter or default_controller_rate_limiter()
        self._clock = clock
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: dict[str, float] = {}  # key -> clock() when handed out
        self._added_at: dict[str, float] = {}  # dirty key -> clock() when it became dirty
        self._getters: deque[asyncio.Future[None]] = deque()
        self._drained: asyncio.Event | None = None
        self._shutting_down = False
        # Delayed adds: key -> deadline (loop time), a heap with lazy deletion, one timer.
        self._waiting: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._loop: asyncio.AbstractEventLoop | None = None
        if name is not None:
            self._adds = metrics.WORKQUEUE_ADDS.labels(name)
            self._retries = metrics.WORKQUEUE_RETRIES.labels(name)
            self._queue_duration = metrics.WORKQUEUE_QUEUE_DURATION.labels(name)
            self._work_duration = metrics.WORKQUEUE_WORK_DURATION.labels(name)
            metrics.register_queue_progress(self)

    # -- introspection ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The metrics name (empty for an unnamed queue)."""
        return self._name or ""

    def __len__(self) -> int:
        """Keys dirty and ready to be handed out (not those processing or waiting)."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def processing(self) -> frozenset[str]:
        """Keys handed out and not yet done."""
        return frozenset(self._processing)

    def waiting_deadline(self, key: str) -> float | None:
        """The loop-time deadline of a delayed *key*, or None when it is not waiting."""
        return self._waiting.get(key)

    def num_waiting(self) -> int:
        return len(self._waiting)

    def unfinished_work_seconds(self) -> float:
        now = self._clock()
        return sum(now - started for started in self._processing.values())

    def longest_running_processor_seconds(self) -> float:
        if not self._processing:
            return 0.0
        return self._clock() - min(self._processing.values())

    # -- adding ------------------------------------------------------------------------------

    def add(self, key: str) -> None:
        """Mark *key* dirty; it is handed out once, after ``done`` if it is processing now."""
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        self._added_at[key] = self._clock()
        if self._name is not None:
            self._adds.inc()
        if key in self._processing:
            return
        self._push(key)

    def add_after(self, key: str, delay: float) -> None:
        """Add *key* after *delay* seconds; if it is already waiting the earlier deadline wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = self._bind_loop()
        deadline = loop.time() + delay
        current = self._waiting.get(key)
        if current is not None and current <= deadline:
            return
        self._waiting[key] = deadline
        heapq.heappush(self._heap, (deadline, key))
        self._arm_timer(loop)

    def add_rate_limited(
        self, key: str, *, at_most: float | None = None, at_least: float = 0.0
    ) -> None:
        """Add *key* after its rate limiter's backoff (a retry), capped at *at_most* seconds
        when given, but no sooner than *at_least* (a server's ``Retry-After``)."""
        if self._shutting_down:
            return
        if self._name is not None:
            self._retries.inc()
        delay = self._rate_limiter.when(key)
        if at_most is not None:
            delay = min(delay, at_most)
        self.add_after(key, max(delay, at_least))

    def forget(self, key: str) -> None:
        """Reset *key*'s backoff (after a success); it does not remove a queued key."""
        self._rate_limiter.forget(key)

    def num_requeues(self, key: str) -> int:
        """How many rate-limited retries *key* had since it was last forgotten."""
        return self._rate_limiter.num_requeues(key)

    # -- handing out -------------------------------------------------------------------------

    async def get(self) -> str:
        """Wait for a dirty key, mark it processing and return it.

        Raises :class:`ShutDown` once the queue is shut down (also to getters already waiting).
        """
        while True:
            if self._shutting_down:
                raise ShutDown
            if self._queue:
                return self._take()
            waiter: asyncio.Future[None] = self._bind_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # Woken and cancelled at once: pass the wake-up on so the key is not stranded.
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()
                raise
            finally:
                if not waiter.done():
                    waiter.cancel()

    def done(self, key: str) -> None:
        """Finish processing *key*; if it was added meanwhile it is queued again."""
        started = self._processing.pop(key, None)
        if started is None:
            return
        if self._name is not None:
            self._work_duration.observe(max(0.0, self._clock() - started))
        if key in self._dirty and not self._shutting_down:
            self._push(key)
        if self._drained is not None and not self._processing:
            self._drained.set()

    # -- shutting down -----------------------------------------------------------------------

    def shut_down(self) -> None:
        """Stop intake, cancel delayed adds, and make every ``get`` raise :class:`ShutDown`."""
        if self._shutting_down:
            return
        self._shutting_down = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiting.clear()
        self._heap.clear()
        self._queue.clear()
        self._dirty.clear()
        self._added_at.clear()
        if self._name is not None and not self._processing:
            metrics.unregister_queue_progress(self)
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def shut_down_with_drain(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Shut down, then wait until every processing key is done (at most *timeout* s).

        Returns True when drained, False when the timeout passed first.
        """
        self.shut_down()
        if self._processing:
            if self._drained is None:
                self._drained = asyncio.Event()
            try:
                await asyncio.wait_for(self._drained.wait(), timeout)
            except TimeoutError:
                return False
        if self._name is not None:
            metrics.unregister_queue_progress(self)
        return True

    # -- internals ---------------------------------------------------------------------------

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError(
                f"work queue {self.name!r} is used from two event loops; create one per loop"
            )
        return loop

    def _push(self, key: str) -> None:
        self._queue.append(key)
        self._wake_one()

    def _take(self) -> str:
        key = self._queue.popleft()
        now = self._clock()
        self._processing[key] = now
        self._dirty.discard(key)
        added = self._added_at.pop(key, now)
        if self._name is not None:
            self._queue_duration.observe(max(0.0, now - added))
        return key

    def _wake_one(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _arm_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._heap:
            return
        first = self._heap[0][0]
        if first >= self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = first
        self._timer = loop.call_at(first, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        if self._shutting_down or self._loop is None:
            return
        now = self._loop.time() + _TIMER_SLACK
        while self._heap and self._heap[0][0] <= now:
            deadline, key = heapq.heappop(self._heap)
            if self._waiting.get(key) != deadline:
                continue  # superseded by an earlier deadline, already handled
            del self._waiting[key]
            self.add(key)
        self._arm_timer(self._loop)
