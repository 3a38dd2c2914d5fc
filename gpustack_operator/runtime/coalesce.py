"""Coalescing: a watch that enqueues a burst of events for one key as one reconcile.

A watch opts in with ``coalesce=Coalesce(...)`` on the builder. Its events no longer add
keys to the work queue directly; they go through a :class:`CoalescingQueue` (one per
controller and :class:`Coalesce` value, so watches given the same value share one window per
key) that adds each key when its burst is due:

- **leading edge**: the first event for a key after a quiet ``window`` (no event and no
  enqueue of that key for ``window`` seconds) is enqueued at once;
- later events within the window open a burst, enqueued once the events pause for
  ``window`` seconds, at the latest ``max_delay`` seconds after the burst's first event;
- while the optional ``hold`` says so (a fleet is still settling), pauses do not count: the
  burst waits until the hold ends, at most ``hold_max_delay`` seconds after its first event;
  a burst that waited on the hold is enqueued as soon as the hold is seen to end (at the
  next event of the watch, or within ``window``), not a further quiet window later: what it
  waited for has arrived. Still at most once per ``window``;
- ``deletes_at_once``: delete events skip the window.

So a key is enqueued at most once per ``window`` under any event stream (deletes with
``deletes_at_once`` aside), and never later than ``max(max_delay, hold_max_delay)`` after
an event. A coalesced enqueue is a plain ``add``: it never touches the key's failure backoff,
and other watches of the controller (its own objects') keep enqueueing at once. The informers
a hold reads are sources its controller waits for. The timing core (:class:`Coalescer`) is
pure and takes the time as an argument; the queue runs its timer while the controller runs.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

__all__ = ["Coalesce", "CoalescePresets", "Coalescer", "CoalescingQueue", "Hold", "IndexHold"]


class Hold(Protocol):
    """While :meth:`active`, coalesced bursts wait for it to end (up to ``hold_max_delay``)."""

    @property
    def sources(self) -> Sequence[Any]:
        """Informers the hold reads: the controller waits for them to sync."""
        ...

    def active(self) -> bool: ...


@dataclass(frozen=True, eq=False)
class Coalesce:
    """How a watch coalesces the keys it enqueues; see the module docstring for the rules."""

    window: float
    """Quiet period in seconds: a burst ends once no event came for this long."""
    max_delay: float = 0.0
    """A burst is enqueued at the latest this many seconds after its first event (raised to
    ``window`` when smaller)."""
    hold: Hold | None = None
    hold_max_delay: float = 0.0
    """While ``hold`` is active, the latest enqueue after a burst's first event (raised to
    ``max_delay`` when smaller)."""
    leading: bool = True
    """Enqueue the first event after a quiet window at once."""
    deletes_at_once: bool = False

    def __post_init__(self) -> None:
        if self.window <= 0:
            raise ValueError(f"a coalescing window must be positive, got {self.window}")

    @property
    def latest(self) -> float:
        """The effective maximum delay without a hold."""
        return max(self.window, self.max_delay)

    @property
    def latest_held(self) -> float:
        """The effective maximum delay while the hold is active."""
        return max(self.latest, self.hold_max_delay)


@dataclass(frozen=True)
class CoalescePresets:
    """The coalescings a family of controllers uses, by name, from one set of timings: a
    controller builder takes one preset, not its parameters (docs/runtime.md, "Coalescing
    presets"). Each call returns a new :class:`Coalesce`: pass one value to every watch that
    should share a key's window."""

    window: float = 1.0
    max_delay: float = 10.0
    hold: Hold | None = None
    hold_max_delay: float = 60.0

    def per_key(self) -> Coalesce:
        """At most one enqueue per key and window, the state at the end of it: an object
        that flaps is reconciled once a window."""
        return Coalesce(self.window)

    def until_quiet(self) -> Coalesce:
        """Bursts end once the events pause for a window; while the hold is active they
        wait for it (up to ``hold_max_delay``)."""
        return Coalesce(self.window, hold=self.hold, hold_max_delay=self.hold_max_delay)

    def until_quiet_or_late(self) -> Coalesce:
        """As :meth:`until_quiet`, but a burst is enqueued ``max_delay`` after its first
        event even if the events never pause: for sums over many objects."""
        return Coalesce(
            self.window, self.max_delay, hold=self.hold, hold_max_delay=self.hold_max_delay
        )

    def deletes_at_once(self) -> Coalesce:
        """Bursts end after a quiet window, deletes are enqueued at once; no hold."""
        return Coalesce(self.window, deletes_at_once=True)


@dataclass
class _Key:
    last_event: float
    last_enqueue: float
    pending_since: float | None
    scheduled: float = math.inf
    held: bool = False
    """The pending burst waited on the hold (it is due once the hold ends)."""


class Coalescer:
    """The pure timing core: per-key bursts, with the current time passed in.

    :meth:`event` says whether a key is due at once; :meth:`pop_due` returns the keys whose
    bursts are due at a time; :meth:`next_due` is when to call it next.
    """

    def __init__(self, spec: Coalesce) -> None:
        self.spec = spec
        self._keys: dict[str, _Key] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._held_bursts: set[str] = set()

    def __len__(self) -> int:
        return len(self._keys)

    def pending(self) -> int:
        """Keys with a burst still to be enqueued (tracked quiet keys do not count)."""
        return sum(1 for state in self._keys.values() if state.pending_since is not None)

    def _held(self, now: float) -> bool:
        """Whether the hold is active; when it is not, the bursts it held fall due."""
        held = self.spec.hold is not None and self.spec.hold.active()
        if not held and self._held_bursts:
            released, self._held_bursts = self._held_bursts, set()
            for key in released:
                state = self._keys.get(key)
                if state is not None and state.pending_since is not None:
                    self._schedule(key, state, now, held=False)
        return held

    def event(self, key: str, now: float, *, at_once: bool = False) -> bool:
        """An event for *key* at *now*; True when the key is to be enqueued now."""
        spec = self.spec
        state = self._keys.get(key)
        if at_once:
            if state is None:
                state = self._keys[key] = _Key(now, now, None)
            state.last_event = state.last_enqueue = now
            state.pending_since = None
            state.held = False
            self._schedule(key, state, now, held=False)
            return True
        quiet = state is None or (
            state.pending_since is None
            and now - max(state.last_event, state.last_enqueue) >= spec.window
        )
        held = self._held(now)
        if quiet and spec.leading and not held:
            state = self._keys[key] = _Key(now, now, None)
            self._schedule(key, state, now, held=held)
            return True
        if state is None:
            state = self._keys[key] = _Key(now, -math.inf, now)
        state.last_event = now
        if state.pending_since is None:
            state.pending_since = now
        self._schedule(key, state, now, held=held)
        return False

    def _due(self, state: _Key, now: float, held: bool) -> float:
        spec = self.spec
        if state.pending_since is None:  # nothing to enqueue: forget the key once quiet
            return max(state.last_event, state.last_enqueue) + spec.window
        if held:
            return min(state.pending_since + spec.latest_held, now + spec.window)
        if state.held:  # the hold it waited on has ended: due, once a window after the last
            return max(now, state.last_enqueue + spec.window)
        return min(state.last_event + spec.window, state.pending_since + spec.latest)

    def _schedule(self, key: str, state: _Key, now: float, *, held: bool) -> None:
        if held and state.pending_since is not None:
            state.held = True  # released, and due, as soon as the hold is seen to end
            self._held_bursts.add(key)
        due = self._due(state, now, held)
        if due < state.scheduled:
            state.scheduled = due
            heapq.heappush(self._heap, (due, next(self._seq), key))

    def next_due(self) -> float | None:
        """When :meth:`pop_due` has something to do next (None: nothing scheduled)."""
        while self._heap:
            due, _, key = self._heap[0]
            state = self._keys.get(key)
            if state is not None and state.scheduled == due:
                return due
            heapq.heappop(self._heap)  # superseded
        return None

    def pop_due(self, now: float) -> list[str]:
        """The keys whose bursts are due at *now* (each then counts as enqueued)."""
        due_keys: list[str] = []
        held = self._held(now)
        while self._heap and self._heap[0][0] <= now:
            at, _, key = heapq.heappop(self._heap)
            state = self._keys.get(key)
            if state is None or state.scheduled != at:
                continue
            state.scheduled = math.inf
            due = self._due(state, now, held)
            if due > now:
                self._schedule(key, state, now, held=held)
            elif state.pending_since is not None:
                state.pending_since = None
                state.held = False
                state.last_enqueue = now
                due_keys.append(key)
                self._schedule(key, state, now, held=held)
            else:
                del self._keys[key]
        return due_keys


class CoalescingQueue:
    """A :class:`Coalescer` in front of a work queue's ``add``; :meth:`run` is its timer."""

    def __init__(
        self,
        spec: Coalesce,
        add: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        self.core = Coalescer(spec)
        self._add = add
        self._clock = clock
        self._wake: anyio.Event | None = None
        self._sleeping_until = math.inf

    def add(self, key: str) -> None:
        """An event for *key*: enqueue it now or when its burst is due."""
        if self.core.event(key, self._clock()):
            self._add(key)
        self._wake_if_sooner()

    def add_now(self, key: str) -> None:
        """Enqueue *key* at once; the burst it was in counts as enqueued."""
        self.core.event(key, self._clock(), at_once=True)
        self._add(key)

    def _wake_if_sooner(self) -> None:
        # Most events extend a burst that is already scheduled: the timer is woken only when
        # something falls due before the moment it sleeps until (a wake-up costs a new cancel
        # scope and timer, which at thousands of events a second is the runtime's own cost).
        due = self.core.next_due()
        if self._wake is not None and due is not None and due < self._sleeping_until:
            self._sleeping_until = due
            self._wake.set()

    async def run(self) -> None:
        """Enqueue keys as their bursts fall due, until cancelled."""
        while True:
            self._wake = anyio.Event()
            due = self.core.next_due()
            self._sleeping_until = math.inf if due is None else due
            wait = math.inf if due is None else max(0.0, due - self._clock())
            with anyio.move_on_after(wait):
                await self._wake.wait()
            for key in self.core.pop_due(self._clock()):
                self._add(key)


@dataclass
class IndexHold:
    """A :class:`Hold` derived from an informer index: active while the bucket *value* of
    index *index* holds objects and the index's membership changed within the last *stall*
    seconds (a member that never leaves, such as a node that is never labelled, cannot hold
    bursts for good). Sampled when asked, on every event of a coalescing watch, so it reads
    the index's count and change counter only, never the members themselves."""

    informer: Any
    index: str
    value: str
    stall: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _generation: int = field(default=-1, init=False)
    _moved: float = field(default=-math.inf, init=False)

    @property
    def sources(self) -> Sequence[Any]:
        return (self.informer,)

    def active(self) -> bool:
        indexer = self.informer.indexer
        count = indexer.index_count(self.index, self.value)
        generation = indexer.index_generation(self.index)
        now = self.clock()
        if generation != self._generation:
            self._generation = generation
            self._moved = now
        return count > 0 and now - self._moved < self.stall
