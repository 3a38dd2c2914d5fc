"""Coalesced watches in a controller (docs/runtime.md, "Coalescing"): their informers and
their hold's are sources the controller waits for; a coalesced enqueue never resets a key's
failure backoff; the controller's own objects are never delayed; and the documented example
runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from gpustack_operator.runtime.coalesce import Coalesce, Coalescer, CoalescingQueue
from gpustack_operator.runtime.controller import Controller, ControllerBuilder, Request
from gpustack_operator.runtime.resources import CONFIGMAPS, NODES, PODS
from gpustack_operator.runtime.workqueue import WorkQueue

from .fakes import FakeSource, obj
from .polling import eventually
from .test_controller import FakeHost, fast_limiter, unique

DOC = Path(__file__).resolve().parents[3] / "docs" / "runtime.md"


def test_the_documented_coalescing_example_runs() -> None:
    text = DOC.read_text(encoding="utf-8")
    found = re.search(
        r"<!-- coalesce-example-start -->\s*```python\n(.*?)```\s*<!-- coalesce-example-end -->",
        text,
        re.S,
    )
    assert found, f"{DOC} lost its coalescing example markers"
    exec(compile(found.group(1), str(DOC), "exec"), {})


def test_a_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Coalesce(0.0)


class Hold:
    def __init__(self, source: FakeSource) -> None:
        self.sources = (source,)
        self.on = False

    def active(self) -> bool:
        return self.on


@pytest.mark.anyio
async def test_coalesced_watches_and_their_hold_are_sources_the_controller_waits_for() -> None:
    host = FakeHost()
    nodes = FakeSource(NODES, synced=False)
    host.sources[(NODES, None, None, None)] = nodes
    held_by = FakeSource(PODS, synced=False)
    reconciled: list[str] = []

    async def reconcile(request: Request) -> None:
        reconciled.append(request.key)

    coalesce = Coalesce(0.01, hold=Hold(held_by))
    controller = (
        ControllerBuilder(host, unique("coalesced"))
        .for_(CONFIGMAPS)
        .watches(NODES, lambda node: ["from-node"], coalesce=coalesce)
        .complete(reconcile)
    )
    assert nodes in controller.sources and held_by in controller.sources
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        nodes.add(obj("n1"))
        await anyio.lowlevel.checkpoint()
        assert not controller.started, "workers started before the coalesced source synced"
        nodes.mark_synced()
        await anyio.lowlevel.checkpoint()
        assert not controller.started, "workers started before the hold's source synced"
        held_by.mark_synced()
        await eventually(lambda: reconciled == ["from-node"], what="the coalesced key")
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_coalesced_enqueue_keeps_the_backoff_and_own_objects_are_not_delayed() -> None:
    source = FakeSource(NODES)
    own = FakeSource(CONFIGMAPS)
    failures = {"count": 0}

    async def reconcile(request: Request) -> None:
        failures["count"] += 1
        raise RuntimeError("still failing")

    controller = Controller(unique("backoff"), reconcile, rate_limiter=fast_limiter())
    # A long window: a coalesced key only comes back on its leading edge.
    coalesce = Coalesce(3600.0)
    controller.watch(source, lambda node: ["k"], coalesce=coalesce)
    controller.watch(own, lambda cm: ["k"], primary=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        source.add(obj("n1"))  # leading edge: at once
        await eventually(lambda: controller.queue.num_requeues("k") >= 2, what="retries")
        retries = controller.queue.num_requeues("k")
        source.update(obj("n1"), obj("n1", rv="2"))  # within the window: coalesced
        assert controller.queue.num_requeues("k") >= retries, "a coalesced add reset the backoff"
        assert len(controller.coalescing(coalesce).core) == 1
        before = failures["count"]
        own.add(obj("k"))  # the reconciled object itself: at once, not held by the window
        await eventually(lambda: failures["count"] > before, what="the own object's reconcile")
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_the_timer_enqueues_a_burst_once_when_it_pauses() -> None:
    queue = WorkQueue()
    now = [0.0]
    coalescing = CoalescingQueue(Coalesce(1.0, 5.0), queue.add, clock=lambda: now[0])
    added: list[str] = []
    coalescing_add: Any = coalescing.add
    async with anyio.create_task_group() as tg:
        tg.start_soon(coalescing.run)
        coalescing_add("q")
        assert len(queue) == 1  # leading edge
        added.append(await queue.get())
        queue.done("q")
        for _ in range(3):
            now[0] += 0.2
            coalescing_add("q")
        assert len(queue) == 0
        now[0] += 1.0  # a pause of a window: the timer finds the burst due
        coalescing_add("other")  # wakes the timer
        await eventually(lambda: len(queue) == 2, what="the burst and the other key")
        tg.cancel_scope.cancel()
    assert added == ["q"]


def test_pending_counts_bursts_not_quiet_keys() -> None:
    core = Coalescer(Coalesce(1.0))
    assert core.event("a", 0.0)  # leading edge: enqueued at once, nothing pending
    assert core.pending() == 0
    assert not core.event("a", 0.5)  # inside the window: a burst waits
    assert core.pending() == 1
    assert core.pop_due(2.0) == ["a"]
    assert core.pending() == 0


@pytest.mark.anyio
async def test_a_resync_goes_straight_to_the_queue_and_opens_no_burst() -> None:
    """A periodic resync is not a burst of changes (docs/runtime.md, "Coalescing")."""
    source = FakeSource(NODES)
    controller = Controller(unique("resync-coalesced"), lambda req: _noop())
    coalesce = Coalesce(3600.0)
    controller.watch(source, lambda node: ["k"], coalesce=coalesce)
    controller.start_watches()
    source.add(obj("n1"))  # leading edge: at once
    assert await controller.queue.get() == "k"
    controller.queue.done("k")
    source.resync()  # within the window, yet enqueued at once and without a burst
    assert len(controller.queue) == 1
    assert controller.coalescing(coalesce).core.pending() == 0
    controller.queue.shut_down()


async def _noop() -> None:
    return None
