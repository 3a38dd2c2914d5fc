"""Model-based check of the coalescing core's promises (docs/runtime.md, "Coalescing").

Hypothesis drives events, deletes, hold changes and the passing of time over a few keys; the
machine advances time only up to the core's next due moment, as the timer does, and checks
after every step: a key is enqueued at most once per window (deletes that skip it aside),
never without an event since its last enqueue, never later than the longest delay after an
event, at once for the first event after a quiet window while no hold is active, and, for a
burst that waited on the hold, as soon as the hold is seen to have ended (a window after the
key's last enqueue at the earliest).
"""

from __future__ import annotations

import math

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gpustack_operator.runtime.coalesce import Coalesce, Coalescer

KEYS = st.sampled_from(["a", "b", "ns/c"])
WINDOW = 1.0
MAX_DELAY = 3.0
HOLD_MAX_DELAY = 7.0


class Switch:
    """A hold the machine turns on and off."""

    def __init__(self) -> None:
        self.on = False
        self.sources = ()

    def active(self) -> bool:
        return self.on


class CoalescerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.hold = Switch()
        spec = Coalesce(
            WINDOW, MAX_DELAY, hold=self.hold, hold_max_delay=HOLD_MAX_DELAY, deletes_at_once=True
        )
        self.core = Coalescer(spec)
        self.now = 0.0
        self.last_event: dict[str, float] = {}
        self.last_enqueue: dict[str, float] = {}
        self.last_windowed: dict[str, float] = {}  # enqueues that respect the window
        self.unserved_since: dict[str, float] = {}  # first event not yet enqueued
        self.held: set[str] = set()  # keys whose pending burst saw the hold active

    def _enqueued(self, key: str, *, windowed: bool) -> None:
        assert key in self.unserved_since, f"{key} enqueued without an event since the last"
        if windowed:
            previous = self.last_windowed.get(key, -math.inf)
            assert self.now - previous >= WINDOW - 1e-9, f"{key} enqueued twice in a window"
            self.last_windowed[key] = self.now
        self.last_enqueue[key] = self.now
        del self.unserved_since[key]
        self.held.discard(key)

    @rule(key=KEYS)
    def event(self, key: str) -> None:
        quiet = self.now - max(
            self.last_event.get(key, -math.inf), self.last_enqueue.get(key, -math.inf)
        )
        quiet_window = quiet >= WINDOW and key not in self.unserved_since
        self.unserved_since.setdefault(key, self.now)
        self.last_event[key] = self.now
        at_once = self.core.event(key, self.now)
        if quiet_window and not self.hold.on:
            assert at_once, "the first event after a quiet window is enqueued at once"
        if at_once:
            self._enqueued(key, windowed=True)
        elif self.hold.on:
            self.held.add(key)

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        self.unserved_since.setdefault(key, self.now)
        self.last_event[key] = self.now
        assert self.core.event(key, self.now, at_once=True)
        self._enqueued(key, windowed=False)
        self.last_windowed[key] = self.now  # the window restarts from a delete too

    @rule(on=st.booleans())
    def set_hold(self, on: bool) -> None:
        self.hold.on = on

    @rule(step=st.floats(min_value=0.0, max_value=4.0))
    def advance(self, step: float) -> None:
        due = self.core.next_due()
        target = self.now + step
        self.now = target if due is None else min(target, max(due, self.now))
        for key in self.core.pop_due(self.now):
            self._enqueued(key, windowed=True)
        if not self.hold.on:
            due = self.core.next_due()
            for key in self.held:
                since = self.now - self.last_windowed.get(key, -math.inf)
                if since >= WINDOW - 1e-9:  # due now, give or take rounding of the times
                    assert due is not None and due <= self.now + 1e-9, (
                        f"{key} still waits though its hold ended"
                    )

    @invariant()
    def no_event_waits_too_long(self) -> None:
        for key, since in self.unserved_since.items():
            assert self.now - since <= HOLD_MAX_DELAY + 1e-9, f"{key} waited too long"
            if self.core.next_due() is None:
                raise AssertionError(f"{key} has an event but nothing is scheduled")


TestCoalescerModel = CoalescerModel.TestCase
TestCoalescerModel.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
