"""Work queue semantics (docs/runtime.md): dedup, processing exclusion, delays, backoff,
shutdown."""

from __future__ import annotations

import anyio
import pytest
from prometheus_client import generate_latest

from gpustack_operator.runtime import metrics
from gpustack_operator.runtime.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    ShutDown,
    WorkQueue,
    default_controller_rate_limiter,
)

from .polling import eventually

pytestmark = pytest.mark.anyio


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def get_now(queue: WorkQueue) -> str:
    """get() for a key that must already be queued."""
    with anyio.fail_after(30):
        return await queue.get()


async def test_duplicate_adds_collapse() -> None:
    queue = WorkQueue()
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert await get_now(queue) == "a"
    assert await get_now(queue) == "b"
    assert len(queue) == 0


async def test_processing_key_is_not_handed_out_again_until_done() -> None:
    queue = WorkQueue()
    queue.add("a")
    assert await get_now(queue) == "a"
    queue.add("a")
    assert len(queue) == 0, "a processing key must not be queued for a second worker"
    assert queue.processing() == {"a"}
    queue.done("a")
    assert len(queue) == 1
    assert await get_now(queue) == "a"


async def test_thousand_adds_while_processing_give_exactly_one_more_run() -> None:
    queue = WorkQueue()
    queue.add("k")
    assert await get_now(queue) == "k"
    for _ in range(1000):
        queue.add("k")
    queue.done("k")
    assert len(queue) == 1
    assert await get_now(queue) == "k"
    queue.done("k")
    assert len(queue) == 0
    assert queue.processing() == frozenset()


async def test_done_of_unknown_key_is_ignored() -> None:
    queue = WorkQueue()
    queue.done("never-added")
    assert len(queue) == 0


async def test_fifo_order_of_distinct_keys() -> None:
    queue = WorkQueue()
    keys = [f"ns/k{i}" for i in range(50)]
    for key in keys:
        queue.add(key)
    assert [await get_now(queue) for _ in keys] == keys


async def test_getter_waits_for_an_add() -> None:
    queue = WorkQueue()
    got: list[str] = []

    async def getter() -> None:
        got.append(await queue.get())

    async with anyio.create_task_group() as tg:
        tg.start_soon(getter)
        await anyio.wait_all_tasks_blocked()
        assert got == []
        queue.add("x")
    assert got == ["x"]


def test_exponential_backoff_sequence_and_cap() -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [limiter.when("k") for _ in range(25)]
    expected = [min(0.005 * 2**n, 1000.0) for n in range(25)]
    assert delays == pytest.approx(expected)
    assert delays[:4] == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert delays[-1] == 1000.0
    assert limiter.num_requeues("k") == 25
    # Other keys have their own count.
    assert limiter.when("other") == pytest.approx(0.005)
    limiter.forget("k")
    assert limiter.num_requeues("k") == 0
    assert limiter.when("k") == pytest.approx(0.005)


def test_backoff_never_overflows() -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    for _ in range(3000):
        delay = limiter.when("k")
    assert delay == 1000.0


def test_backoff_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="base"):
        ItemExponentialFailureRateLimiter(0.0, 1.0)
    with pytest.raises(ValueError, match="qps"):
        BucketRateLimiter(0.0, 1)


def test_bucket_limiter_allows_a_burst_then_spaces_retries() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(qps=10.0, burst=3, clock=clock)
    assert [bucket.when("x") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.when("x") == pytest.approx(0.1)
    assert bucket.when("x") == pytest.approx(0.2)
    clock.now += 10.0  # refilled to the burst size
    assert bucket.when("x") == 0.0


def test_default_limiter_is_per_key_backoff_bounded_by_overall_bucket() -> None:
    limiter = default_controller_rate_limiter()
    assert isinstance(limiter, MaxOfRateLimiter)
    assert limiter.when("k") == pytest.approx(0.005)
    assert limiter.when("k") == pytest.approx(0.01)
    assert limiter.num_requeues("k") == 2
    limiter.forget("k")
    assert limiter.num_requeues("k") == 0


async def test_add_rate_limited_uses_the_backoff_and_forget_resets_it() -> None:
    queue = WorkQueue(rate_limiter=ItemExponentialFailureRateLimiter(0.001, 0.004))
    loop_time = anyio.current_time
    queue.add_rate_limited("k")
    deadline = queue.waiting_deadline("k")
    assert deadline is not None and deadline <= loop_time() + 0.001
    assert queue.num_requeues("k") == 1
    assert await get_now(queue) == "k"
    queue.done("k")
    queue.add_rate_limited("k")
    assert queue.num_requeues("k") == 2
    assert await get_now(queue) == "k"
    queue.done("k")
    queue.forget("k")
    assert queue.num_requeues("k") == 0


async def test_add_after_keeps_the_earliest_deadline() -> None:
    queue = WorkQueue()
    queue.add_after("k", 3600)
    late = queue.waiting_deadline("k")
    queue.add_after("k", 0.01)
    early = queue.waiting_deadline("k")
    assert late is not None and early is not None and early < late
    queue.add_after("k", 7200)  # a later deadline never replaces an earlier one
    assert queue.waiting_deadline("k") == early
    assert queue.num_waiting() == 1
    assert await get_now(queue) == "k"
    assert queue.waiting_deadline("k") is None
    queue.done("k")
    # The superseded one-hour entry does not fire a second time meanwhile.
    assert len(queue) == 0


async def test_add_after_zero_is_an_immediate_add() -> None:
    queue = WorkQueue()
    queue.add_after("k", 0)
    assert len(queue) == 1
    assert queue.num_waiting() == 0


async def test_delayed_key_that_is_already_dirty_collapses() -> None:
    queue = WorkQueue()
    queue.add("k")
    queue.add_after("k", 0.001)
    await eventually(lambda: queue.num_waiting() == 0, what="the delayed add to fire")
    assert len(queue) == 1


async def test_many_delays_fire_in_deadline_order() -> None:
    queue = WorkQueue()
    for i, delay in enumerate([0.03, 0.01, 0.02]):
        queue.add_after(f"k{i}", delay)
    got = [await get_now(queue) for _ in range(3)]
    assert got == ["k1", "k2", "k0"]


async def test_shutdown_wakes_waiting_getters_and_ignores_adds() -> None:
    queue = WorkQueue()
    outcomes: list[str] = []

    async def getter() -> None:
        try:
            await queue.get()
        except ShutDown:
            outcomes.append("shutdown")

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(getter)
        await anyio.wait_all_tasks_blocked()
        queue.shut_down()
    assert outcomes == ["shutdown"] * 3
    queue.add("late")
    queue.add_after("late", 0.001)
    queue.add_rate_limited("late")
    assert len(queue) == 0 and queue.num_waiting() == 0
    with pytest.raises(ShutDown):
        await queue.get()


async def test_shutdown_with_drain_waits_for_processing_keys() -> None:
    queue = WorkQueue()
    queue.add("a")
    queue.add("b")
    key = await get_now(queue)
    drained: list[bool] = []

    async def drain() -> None:
        drained.append(await queue.shut_down_with_drain(timeout=10))

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain)
        await anyio.wait_all_tasks_blocked()
        assert drained == [], "drain returned while a key was still processing"
        queue.add(key)  # ignored: shutting down
        queue.done(key)
    assert drained == [True]
    assert queue.processing() == frozenset()
    assert len(queue) == 0, "queued keys are dropped at shutdown"


async def test_shutdown_with_drain_times_out() -> None:
    queue = WorkQueue()
    queue.add("stuck")
    await get_now(queue)
    assert await queue.shut_down_with_drain(timeout=0.001) is False
    assert await WorkQueue().shut_down_with_drain(timeout=0.001) is True


async def test_cancelled_getter_passes_its_wake_up_on() -> None:
    queue = WorkQueue()
    got: list[str] = []

    async def getter(scope_holder: list[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            scope_holder.append(scope)
            got.append(await queue.get())

    first: list[anyio.CancelScope] = []
    second: list[anyio.CancelScope] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(getter, first)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(getter, second)
        await anyio.wait_all_tasks_blocked()
        queue.add("k")  # wakes the first getter...
        first[0].cancel()  # ...which is cancelled before it runs
        await eventually(lambda: got == ["k"], what="the second getter to get the key")
        second[0].cancel()


async def test_named_queue_records_metrics() -> None:
    name = "test-wq-metrics"
    queue = WorkQueue(name, rate_limiter=ItemExponentialFailureRateLimiter(0.001, 0.001))

    def sample(metric: str) -> float:
        value = metrics.REGISTRY.get_sample_value(metric, {"name": name})
        return value or 0.0

    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert sample("workqueue_adds_total") == 2
    assert sample("workqueue_depth") == 2
    await get_now(queue)
    assert sample("workqueue_depth") == 1
    assert sample("workqueue_queue_duration_seconds_count") == 1
    text = generate_latest(metrics.REGISTRY).decode()
    assert f'workqueue_unfinished_work_seconds{{name="{name}"}}' in text
    assert f'workqueue_longest_running_processor_seconds{{name="{name}"}}' in text
    queue.done("a")
    assert sample("workqueue_work_duration_seconds_count") == 1
    queue.add_rate_limited("c")
    assert sample("workqueue_retries_total") == 1
    await queue.shut_down_with_drain(1)
    assert f'workqueue_unfinished_work_seconds{{name="{name}"}}' not in (
        generate_latest(metrics.REGISTRY).decode()
    )


async def test_progress_gauges_measure_in_flight_work() -> None:
    clock = FakeClock()
    queue = WorkQueue(clock=clock)
    queue.add("a")
    queue.add("b")
    await get_now(queue)
    clock.now += 3
    await get_now(queue)
    clock.now += 1
    assert queue.longest_running_processor_seconds() == pytest.approx(4)
    assert queue.unfinished_work_seconds() == pytest.approx(5)
    queue.done("a")
    queue.done("b")
    assert queue.longest_running_processor_seconds() == 0.0
