"""Model-based check of the work queue's core (add / get / done) against a plain reference.

Hypothesis drives random operation sequences over a few keys and compares the queue with a
simple model of client-go's semantics after every step.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gpustack_operator.runtime.workqueue import WorkQueue

KEYS = st.sampled_from(["a", "b", "c", "ns/d"])


def run_ready(coro: Coroutine[Any, Any, str]) -> str:
    """Finish a ``get()`` that cannot suspend (a key is queued) without an event loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return str(stop.value)
    coro.close()
    raise AssertionError("get() suspended although a key was queued")


class WorkQueueModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.queue = WorkQueue()
        self.order: list[str] = []  # keys ready to be handed out, in order
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.handed_out = 0

    @rule(key=KEYS)
    def add(self, key: str) -> None:
        self.queue.add(key)
        if key in self.dirty:
            return
        self.dirty.add(key)
        if key not in self.processing:
            self.order.append(key)

    @precondition(lambda self: bool(self.order))
    @rule()
    def get(self) -> None:
        key = run_ready(self.queue.get())
        expected = self.order.pop(0)
        assert key == expected, "keys are handed out in FIFO order"
        assert key not in self.processing, "a key was handed out twice"
        self.processing.add(key)
        self.dirty.discard(key)
        self.handed_out += 1

    @precondition(lambda self: bool(self.processing))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.processing)))
        self.queue.done(key)
        self.processing.discard(key)
        if key in self.dirty:
            self.order.append(key)

    @invariant()
    def matches_the_model(self) -> None:
        assert len(self.queue) == len(self.order)
        assert self.queue.processing() == self.processing
        assert len(set(self.order)) == len(self.order), "a key is queued at most once"


TestWorkQueueModel = WorkQueueModel.TestCase
TestWorkQueueModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
