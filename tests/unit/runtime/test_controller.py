"""The reconcile contract, worker exclusion, watch mapping, and the builder (fake sources)."""

from __future__ import annotations

import random
import uuid
from collections import Counter, defaultdict
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import structlog

from gpustack_operator.runtime import metrics
from gpustack_operator.runtime.channel import Channel
from gpustack_operator.runtime.coalesce import Coalesce
from gpustack_operator.runtime.controller import (
    CacheSyncTimeoutError,
    Controller,
    ControllerBuilder,
    Request,
    Result,
    TerminalError,
    _reconcile_id,
    enqueue_mapped,
    enqueue_object,
    enqueue_owner,
)
from gpustack_operator.runtime.predicates import GENERATION_CHANGED
from gpustack_operator.runtime.resources import CONFIGMAPS, DEPLOYMENTS, NODES, PODS
from gpustack_operator.runtime.workqueue import ItemExponentialFailureRateLimiter

from .fakes import FakeRecorder, FakeSource, obj, owner_ref
from .polling import eventually

pytestmark = pytest.mark.anyio

_names = iter(range(10**6))


def unique(prefix: str) -> str:
    """Controller names label process-wide metrics: keep them unique per test."""
    return f"{prefix}-{next(_names)}"


def fast_limiter() -> ItemExponentialFailureRateLimiter:
    return ItemExponentialFailureRateLimiter(0.001, 0.004)


def sample(metric: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(metric, labels) or 0.0


def idle(controller: Controller) -> bool:
    queue = controller.queue
    return len(queue) == 0 and not queue.processing() and queue.num_waiting() == 0


# --- Request ----------------------------------------------------------------------------------


def test_request_key_helpers() -> None:
    assert Request.of("n", "ns") == Request("ns/n")
    assert Request("ns/n").namespace == "ns"
    assert Request("ns/n").name == "n"
    assert Request("node-1").namespace is None
    assert Request("node-1").name == "node-1"
    assert Request.for_object(obj("x", "y")).key == "y/x"
    assert str(Request("a/b")) == "a/b"


# --- exclusion and collapse under many workers -----------------------------------------------


async def test_a_key_is_never_reconciled_concurrently_under_bursts() -> None:
    in_flight: Counter[str] = Counter()
    max_per_key: Counter[str] = Counter()
    peak_total = 0
    calls: Counter[str] = Counter()
    source = FakeSource(NODES)
    rng = random.Random(7)

    async def reconcile(req: Request) -> None:
        nonlocal peak_total
        in_flight[req.key] += 1
        max_per_key[req.key] = max(max_per_key[req.key], in_flight[req.key])
        peak_total = max(peak_total, sum(in_flight.values()))
        calls[req.key] += 1
        for _ in range(rng.randint(1, 4)):
            await anyio.lowlevel.checkpoint()  # yield so other workers and bursts interleave
        in_flight[req.key] -= 1

    controller = Controller(unique("excl"), reconcile, max_concurrent_reconciles=16)
    controller.watch(source, enqueue_object())
    controller.start_watches()
    keys = [f"node-{i}" for i in range(8)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        await eventually(lambda: controller.started, what="workers to start")
        for _burst in range(50):
            for _ in range(40):
                source.add(obj(rng.choice(keys)))
            await anyio.lowlevel.checkpoint()
        await eventually(lambda: idle(controller), what="the queue to settle")
        tg.cancel_scope.cancel()
    assert set(max_per_key.values()) == {1}, f"concurrent reconciles of one key: {max_per_key}"
    assert peak_total > 1, "workers never overlapped; the test proves nothing"
    assert set(calls) == set(keys)


async def test_thousand_adds_during_a_reconcile_cause_exactly_one_more() -> None:
    release = anyio.Event()
    calls: list[str] = []
    source = FakeSource(NODES)

    async def reconcile(req: Request) -> None:
        calls.append(req.key)
        if len(calls) == 1:
            await release.wait()

    controller = Controller(unique("thousand"), reconcile, max_concurrent_reconciles=4)
    controller.watch(source, enqueue_object())
    controller.start_watches()
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        source.add(obj("n1"))
        await eventually(lambda: len(calls) == 1, what="the first reconcile")
        for i in range(1000):
            source.update(obj("n1", rv=str(i)), obj("n1", rv=str(i + 1)))
        release.set()
        await eventually(lambda: len(calls) == 2, what="the second reconcile")
        await eventually(lambda: idle(controller), what="the queue to settle")
        tg.cancel_scope.cancel()
    assert calls == ["n1", "n1"]


# --- the reconcile contract ------------------------------------------------------------------


async def test_exception_is_retried_with_backoff_then_forgotten_on_success() -> None:
    attempts: list[int] = []
    name = unique("retry")
    source = FakeSource(NODES)
    controller: Controller

    async def reconcile(req: Request) -> None:
        attempts.append(controller.queue.num_requeues(req.key))
        if len(attempts) <= 3:
            raise RuntimeError("transient")

    controller = Controller(name, reconcile, rate_limiter=fast_limiter())
    controller.watch(source, enqueue_object())
    controller.start_watches()
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        source.add(obj("n1"))
        await eventually(lambda: len(attempts) == 4 and idle(controller), what="4 attempts")
        tg.cancel_scope.cancel()
    assert attempts == [0, 1, 2, 3], "each failure is one more rate-limited requeue"
    assert controller.queue.num_requeues("n1") == 0, "success forgets the backoff"
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 3
    assert sample("controller_runtime_reconcile_total", controller=name, result="error") == 3
    assert sample("controller_runtime_reconcile_total", controller=name, result="success") == 1
    assert sample("workqueue_retries_total", name=name) == 3


async def test_requeue_after_forgets_the_backoff_and_adds_later() -> None:
    requeues_seen: list[int] = []
    name = unique("after")
    source = FakeSource(NODES)
    controller: Controller

    async def reconcile(req: Request) -> Result | None:
        requeues_seen.append(controller.queue.num_requeues(req.key))
        if len(requeues_seen) == 1:
            raise RuntimeError("first attempt fails")  # leaves one requeue of backoff
        if len(requeues_seen) == 2:
            return Result(requeue_after=0.01)
        return None

    controller = Controller(name, reconcile, rate_limiter=fast_limiter())
    controller.watch(source, enqueue_object())
    controller.start_watches()
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        source.add(obj("n1"))
        await eventually(lambda: len(requeues_seen) == 3 and idle(controller), what="3 runs")
        tg.cancel_scope.cancel()
    assert requeues_seen == [0, 1, 0], "requeue_after must forget the key's backoff"
    assert (
        sample("controller_runtime_reconcile_total", controller=name, result="requeue_after") == 1
    )


async def test_requeue_after_schedules_the_key() -> None:
    name = unique("after2")
    source = FakeSource(NODES)
    seen = anyio.Event()

    async def reconcile(req: Request) -> Result:
        seen.set()
        return Result(requeue_after=3600)

    controller = Controller(name, reconcile)
    controller.watch(source, enqueue_object())
    controller.start_watches()
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        source.add(obj("n1"))
        await seen.wait()
        await eventually(lambda: controller.queue.waiting_deadline("n1") is not None)
        deadline = controller.queue.waiting_deadline("n1")
        assert deadline is not None and deadline > anyio.current_time() + 3000
        tg.cancel_scope.cancel()


async def test_requeue_true_is_rate_limited_without_an_error() -> None:
    name = unique("requeue")
    source = FakeSource(NODES)
    calls: list[str] = []

    async def reconcile(req: Request) -> Result | None:
        calls.append(req.key)
        return Result(requeue=True) if len(calls) == 1 else None

    controller = Controller(name, reconcile, rate_limiter=fast_limiter())
    controller.watch(source, enqueue_object())
    controller.start_watches()
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        source.add(obj("n1"))
        await eventually(lambda: len(calls) == 2 and idle(controller))
        tg.cancel_scope.cancel()
    assert sample("controller_runtime_reconcile_total", controller=name, result="requeue") == 1
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 0


async def test_terminal_error_is_counted_recorded_and_not_retried() -> None:
    name = unique("terminal")
    source = FakeSource(NODES)
    recorder = FakeRecorder()
    calls: list[str] = []

    async def reconcile(req: Request) -> None:
        calls.append(req.key)
        raise TerminalError("spec.size must be positive")

    controller = Controller(name, reconcile, rate_limiter=fast_limiter(), recorder=recorder)
    controller.watch(source, enqueue_object(), primary=True)
    controller.start_watches()
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        source.add(obj("n1"))
        await eventually(lambda: len(calls) == 1 and idle(controller))
        tg.cancel_scope.cancel()
    assert calls == ["n1"]
    assert controller.queue.num_requeues("n1") == 0
    assert sample("controller_runtime_terminal_reconcile_errors_total", controller=name) == 1
    assert sample("controller_runtime_reconcile_errors_total", controller=name) == 1
    assert recorder.events == [
        ("n1", "Warning", "ReconcileFailed", f"{name}: spec.size must be positive")
    ]


async def test_failure_event_skipped_when_object_is_gone() -> None:
    source = FakeSource(NODES)
    recorder = FakeRecorder()
    done = anyio.Event()

    async def reconcile(req: Request) -> None:
        done.set()
        raise TerminalError("gone")

    controller = Controller(unique("gone"), reconcile, recorder=recorder)
    controller.watch(source, enqueue_object(), primary=True)
    controller.start_watches()
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        controller.queue.add("not-in-cache")
        await done.wait()
        await eventually(lambda: idle(controller))
        tg.cancel_scope.cancel()
    assert recorder.events == []


async def test_reconcile_runs_with_controller_key_and_unique_reconcile_id_bound() -> None:
    name = unique("ctx")
    source = FakeSource(NODES)
    seen: list[dict[str, Any]] = []

    async def reconcile(req: Request) -> None:
        seen.append(dict(structlog.contextvars.get_contextvars()))

    controller = Controller(name, reconcile)
    controller.watch(source, enqueue_object())
    controller.start_watches()
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        source.add(obj("a"))
        await eventually(lambda: len(seen) == 1)
        source.add(obj("b", "ns"))
        await eventually(lambda: len(seen) == 2)
        tg.cancel_scope.cancel()
    assert [(s["controller"], s["key"]) for s in seen] == [(name, "a"), (name, "ns/b")]
    assert seen[0]["reconcile_id"] != seen[1]["reconcile_id"]
    assert "reconcile_id" not in structlog.contextvars.get_contextvars()


def test_a_reconcile_id_is_a_fresh_version_4_uuid() -> None:
    ids = [_reconcile_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids[:200]:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


async def test_metrics_gauges_for_workers() -> None:
    name = unique("gauges")
    controller = Controller(name, lambda req: _none(), max_concurrent_reconciles=7)
    assert sample("controller_runtime_max_concurrent_reconciles", controller=name) == 7
    assert sample("controller_runtime_active_workers", controller=name) == 0
    controller.queue.shut_down()


async def _none() -> None:
    return None


def test_max_concurrent_reconciles_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_concurrent_reconciles"):
        Controller(unique("bad"), lambda req: _none(), max_concurrent_reconciles=0)


# --- cache sync and shutdown --------------------------------------------------------------------


async def test_workers_wait_for_cache_sync() -> None:
    source = FakeSource(NODES, synced=False)
    calls: list[str] = []

    async def reconcile(req: Request) -> None:
        calls.append(req.key)

    controller = Controller(unique("sync"), reconcile)
    controller.watch(source, enqueue_object())
    controller.start_watches()
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        source.add(obj("n1"))
        await anyio.wait_all_tasks_blocked()
        assert not controller.started and calls == []
        source.mark_synced()
        await eventually(lambda: calls == ["n1"])
        tg.cancel_scope.cancel()


async def test_cache_sync_timeout_raises() -> None:
    source = FakeSource(PODS, synced=False)
    controller = Controller(unique("nosync"), lambda req: _none(), cache_sync_timeout=0.01)
    controller.watch(source, enqueue_object())
    controller.start_watches()
    with pytest.raises(CacheSyncTimeoutError, match="Pod"):
        await controller.run()


async def test_cancellation_drains_in_flight_reconciles() -> None:
    source = FakeSource(NODES)
    started = anyio.Event()
    release = anyio.Event()
    finished: list[str] = []

    async def reconcile(req: Request) -> None:
        started.set()
        await release.wait()
        finished.append(req.key)

    controller = Controller(unique("drain"), reconcile, drain_timeout=30)
    controller.watch(source, enqueue_object())
    controller.start_watches()
    stopped = anyio.Event()

    async def run_then_mark() -> None:
        try:
            await controller.run()
        finally:
            stopped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_then_mark)
        source.add(obj("n1"))
        await started.wait()
        source.add(obj("n2"))  # queued, never started: dropped at shutdown
        tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            await anyio.wait_all_tasks_blocked()
            assert not stopped.is_set(), "run() returned before the in-flight reconcile ended"
            release.set()
            await stopped.wait()
    assert finished == ["n1"]


async def test_drain_timeout_cancels_stuck_reconciles() -> None:
    source = FakeSource(NODES)
    started = anyio.Event()
    cancelled: list[bool] = []

    async def reconcile(req: Request) -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(True)
            raise

    controller = Controller(unique("stuck"), reconcile, drain_timeout=0.01)
    controller.watch(source, enqueue_object())
    controller.start_watches()
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        source.add(obj("n1"))
        await started.wait()
        tg.cancel_scope.cancel()
    assert cancelled == [True]
    assert controller.queue.processing() == frozenset()


# --- watch mapping -------------------------------------------------------------------------------


def test_enqueue_owner_maps_only_the_controller_reference_of_the_owner_kind() -> None:
    mapper = enqueue_owner(DEPLOYMENTS)
    child = obj(
        "p",
        "ns",
        owners=[
            owner_ref("Deployment", "web", api_version="apps/v1"),
            owner_ref("Deployment", "other", api_version="apps/v1", controller=False),
            owner_ref("ReplicaSet", "rs", api_version="apps/v1"),
            owner_ref("Deployment", "wrong-group", api_version="example.com/v1"),
        ],
    )
    assert list(mapper(child)) == ["ns/web"]
    assert list(enqueue_owner(DEPLOYMENTS, controller_only=False)(child)) == [
        "ns/web",
        "ns/other",
    ]
    assert list(mapper(obj("orphan", "ns"))) == []


def test_enqueue_owner_of_a_cluster_scoped_owner_is_its_name() -> None:
    child = obj("cm", "kube-system", owners=[owner_ref("Node", "node-1")])
    assert list(enqueue_owner(NODES)(child)) == ["node-1"]


async def test_owns_maps_old_and_new_owner_on_update() -> None:
    source = FakeSource(PODS)
    controller = Controller(unique("owns"), lambda req: _none())
    controller.watch(source, enqueue_owner(DEPLOYMENTS))
    controller.start_watches()
    old = obj("p", "ns", owners=[owner_ref("Deployment", "a", api_version="apps/v1")])
    new = obj("p", "ns", owners=[owner_ref("Deployment", "b", api_version="apps/v1")], rv="2")
    source.update(old, new)
    assert [await controller.queue.get() for _ in range(2)] == ["ns/a", "ns/b"]
    source.delete(new)
    controller.queue.done("ns/a")
    controller.queue.done("ns/b")
    assert await controller.queue.get() == "ns/b"
    controller.queue.shut_down()


async def test_watches_runs_map_fn_on_old_and_new() -> None:
    source = FakeSource(CONFIGMAPS)
    mapped: list[str] = []

    def map_fn(o: dict[str, Any]) -> list[Request | str]:
        mapped.append(o["metadata"]["resourceVersion"])
        target = (o["metadata"].get("labels") or {}).get("target")
        return [Request(target), "always"] if target else []

    controller = Controller(unique("watches"), lambda req: _none())
    controller.watch(source, enqueue_mapped(map_fn))
    controller.start_watches()
    source.update(
        obj("cm", "ns", labels={"target": "node-a"}, rv="1"),
        obj("cm", "ns", labels={"target": "node-b"}, rv="2"),
    )
    assert mapped == ["1", "2"]
    assert [await controller.queue.get() for _ in range(3)] == ["node-a", "always", "node-b"]
    controller.queue.shut_down()


async def test_an_update_adds_a_key_both_versions_map_to_once() -> None:
    # One event, one add per key: a second add of the same key at once would open a burst
    # in a coalescing queue (one more reconcile a window later) that no event asked for.
    source = FakeSource(NODES)
    controller = Controller(unique("once"), lambda req: _none())
    controller.watch(source, enqueue_object(), coalesce=Coalesce(60.0))
    controller.start_watches()
    source.update(obj("n", rv="1"), obj("n", rv="2"))
    assert await controller.queue.get() == "n"
    assert controller.pending_bursts() == 0
    source.update(obj("n", rv="2"), obj("n", rv="3"))  # a later event within the window
    assert controller.pending_bursts() == 1
    controller.queue.shut_down()


async def test_an_update_still_adds_every_key_of_either_version() -> None:
    source = FakeSource(CONFIGMAPS)
    added: list[str] = []

    def map_fn(o: dict[str, Any]) -> list[str]:
        if o["metadata"]["resourceVersion"] == "0":
            raise KeyError("labels")
        return list((o["metadata"].get("labels") or {}).values())

    controller = Controller(unique("keys"), lambda req: _none())
    controller.watch(source, enqueue_mapped(map_fn))
    controller.start_watches()
    controller.queue.add = added.append  # type: ignore[method-assign]
    for watch in source.handlers:  # the handler took the queue's add when it was made
        watch._add = added.append
    source.update(
        obj("cm", "ns", labels={"a": "x", "b": "y"}, rv="1"),
        obj("cm", "ns", labels={"a": "y", "b": "z"}, rv="2"),
    )
    assert added == ["x", "y", "z"]
    added.clear()
    # a mapping that fails on one version drops that version's keys only
    source.update(obj("cm", "ns", rv="0"), obj("cm", "ns", labels={"a": "w"}, rv="3"))
    assert added == ["w"]
    controller.queue.shut_down()


async def test_predicates_filter_before_enqueue() -> None:
    source = FakeSource(NODES)
    controller = Controller(unique("preds"), lambda req: _none())
    controller.watch(source, enqueue_object(), [GENERATION_CHANGED])
    controller.start_watches()
    source.update(obj("same", generation=1), obj("same", generation=1, rv="2"))
    assert len(controller.queue) == 0
    source.update(obj("bumped", generation=1), obj("bumped", generation=2))
    assert len(controller.queue) == 1
    source.add(obj("created"))
    source.delete(obj("deleted"))
    assert len(controller.queue) == 3
    controller.queue.shut_down()


async def test_a_resync_bypasses_the_update_predicates() -> None:
    source = FakeSource(NODES)
    controller = Controller(unique("resync"), lambda req: _none())
    controller.watch(source, enqueue_object(), [GENERATION_CHANGED])
    controller.start_watches()
    source.add(obj("a", generation=1))
    source.add(obj("b", generation=1))
    await controller.queue.get(), await controller.queue.get()
    controller.queue.done("a"), controller.queue.done("b")
    source.update(obj("a", generation=1), obj("a", generation=1, rv="2"))
    assert len(controller.queue) == 0
    source.resync()
    assert sorted([await controller.queue.get(), await controller.queue.get()]) == ["a", "b"]
    controller.queue.shut_down()


async def test_failing_map_fn_drops_the_event_without_raising() -> None:
    source = FakeSource(CONFIGMAPS)

    def boom(o: dict[str, Any]) -> list[str]:
        raise KeyError("labels")

    controller = Controller(unique("boom"), lambda req: _none())
    controller.watch(source, enqueue_mapped(boom))
    controller.start_watches()
    source.add(obj("cm", "ns"))
    assert len(controller.queue) == 0
    controller.queue.shut_down()


# --- builder --------------------------------------------------------------------------------


class FakeHost:
    def __init__(self) -> None:
        self.sources: dict[tuple[Any, ...], FakeSource] = {}
        self.controllers: list[Controller] = []
        self.recorder = FakeRecorder()

    def source_for(
        self,
        resource: Any,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> FakeSource:
        key = (resource, namespace, label_selector, field_selector)
        if key not in self.sources:
            self.sources[key] = FakeSource(resource)
        return self.sources[key]

    def add_controller(self, controller: Controller) -> None:
        self.controllers.append(controller)


async def test_builder_wires_for_owns_watches_filters_and_options() -> None:
    host = FakeHost()
    reconciled: list[str] = []

    async def reconcile(req: Request) -> None:
        reconciled.append(req.key)

    def by_label(o: dict[str, Any]) -> list[str]:
        node = (o["metadata"].get("labels") or {}).get("node")
        return [node] if node else []

    controller = (
        ControllerBuilder(host, unique("built"))
        .for_(NODES, GENERATION_CHANGED)
        .owns(CONFIGMAPS)
        .watches(PODS, by_label, lambda o: o["metadata"].get("namespace") != "ignored")
        .with_event_filter(lambda o: not o["metadata"]["name"].startswith("skip"))
        .with_options(max_concurrent_reconciles=3, rate_limiter=fast_limiter())
        .complete(reconcile)
    )
    assert host.controllers == [controller]
    assert controller.max_concurrent_reconciles == 3
    assert controller.recorder is host.recorder
    nodes = host.source_for(NODES)
    cms = host.source_for(CONFIGMAPS)
    pods = host.source_for(PODS)
    nodes.add(obj("n1"))
    nodes.add(obj("skip-me"))
    nodes.update(obj("n1"), obj("n1", rv="9"))  # same generation: filtered
    cms.add(obj("cm", "kube-system", owners=[owner_ref("Node", "n2")]))
    pods.add(obj("p", "default", labels={"node": "n3"}))
    pods.add(obj("p", "ignored", labels={"node": "n4"}))
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        await eventually(lambda: len(reconciled) == 3 and idle(controller))
        tg.cancel_scope.cancel()
    assert sorted(reconciled) == ["n1", "n2", "n3"]


def test_builder_needs_for_and_a_name() -> None:
    host = FakeHost()
    with pytest.raises(ValueError, match="for_"):
        ControllerBuilder(host, unique("nofor")).owns(PODS).complete(lambda req: _none())
    with pytest.raises(ValueError, match="name"):
        ControllerBuilder(host, "")
    builder = ControllerBuilder(host, unique("twice")).for_(NODES)
    with pytest.raises(ValueError, match="already"):
        builder.for_(PODS)


async def test_a_controller_may_only_watch_with_map_functions() -> None:
    host = FakeHost()
    controller = (
        ControllerBuilder(host, unique("singleton"))
        .watches(NODES, lambda o: ["the-key"])
        .watches(PODS, lambda o: ["the-key"])
        .complete(lambda req: _none())
    )
    controller.start_watches()
    host.source_for(NODES).add(obj("n1"))
    host.source_for(PODS).add(obj("p", "ns"))
    assert len(controller.queue) == 1
    controller.queue.shut_down()


async def test_requests_from_many_sources_share_one_queue_per_controller() -> None:
    per_key: defaultdict[str, int] = defaultdict(int)
    host = FakeHost()

    async def reconcile(req: Request) -> None:
        per_key[req.key] += 1

    controller = (
        ControllerBuilder(host, unique("shared")).for_(NODES).owns(PODS).complete(reconcile)
    )
    controller.start_watches()
    host.source_for(NODES).add(obj("n1"))
    host.source_for(PODS).add(obj("p", "ns", owners=[owner_ref("Node", "n1")]))
    assert len(controller.queue) == 1, "the same key from two watches collapses"
    controller.queue.shut_down()


async def test_builder_passes_the_informer_scope_to_the_host() -> None:
    host = FakeHost()
    controller = (
        ControllerBuilder(host, unique("scoped"))
        .for_(NODES, field_selector="metadata.name=n1")
        .owns(CONFIGMAPS, namespace="kube-system", label_selector="app=x")
        .complete(lambda req: _none())
    )
    assert set(host.sources) == {
        (NODES, None, None, "metadata.name=n1"),
        (CONFIGMAPS, "kube-system", "app=x", None),
    }
    controller.queue.shut_down()


async def test_a_channel_is_watched_while_the_controller_runs() -> None:
    """docs/runtime.md, "Controllers": a typed channel the wiring owns; each value maps to
    keys of the watching controllers' own queues, from the start on (a controller that
    starts later gets the channel's replay first), and none after they stop."""
    state = ["a"]
    channel: Channel[tuple[str, ...]] = Channel("names", replay=lambda: [tuple(state)])
    host = FakeHost()
    controllers = [
        ControllerBuilder(host, unique(name))
        .for_(NODES)
        .watches_channel(channel, lambda names, suffix=name: [f"{n}-{suffix}" for n in names])
        .complete(lambda req: _none())
        for name in ("one", "two")
    ]
    channel.send(("lost",))  # no controller runs yet
    assert all(len(c.queue) == 0 for c in controllers)
    controllers[0].start_watches()
    assert await controllers[0].queue.get() == "a-one"  # the replay
    controllers[0].queue.done("a-one")
    state.append("b")
    channel.send(("b", "c"))
    controllers[1].start_watches()
    assert len(controllers[0].queue) == 2
    assert len(controllers[1].queue) == 2  # its replay: a and b
    controllers[0].stop_watches()
    channel.send(("d",))
    assert len(controllers[0].queue) == 2
    assert len(controllers[1].queue) == 3
    assert channel.handlers == 1
    for controller in controllers:
        controller.queue.shut_down()


def test_a_failing_channel_handler_neither_stops_the_sender_nor_the_others() -> None:
    channel: Channel[int] = Channel("numbers")
    got: list[int] = []

    def broken(value: int) -> None:
        raise ValueError(value)

    channel.attach(broken)
    channel.attach(got.append)
    channel.send(1)
    assert got == [1]


async def test_a_deferred_watch_is_attached_only_when_started() -> None:
    """docs/runtime.md, "Controllers": a kind not served yet is declared, not watched."""
    host = FakeHost()
    controller = (
        ControllerBuilder(host, unique("deferred"))
        .for_(NODES)
        .watches(PODS, lambda o: ["late"], label_selector="app=x", deferred=True)
        .complete(lambda req: _none())
    )
    assert set(host.sources) == {(NODES, None, None, None)}
    assert len(controller.sources) == 1
    controller.start_watches()
    source = controller.start_deferred_watch(PODS)
    assert controller.start_deferred_watch(PODS) is source  # once
    assert source is host.source_for(PODS, label_selector="app=x")
    assert source in controller.sources
    source.add(obj("p", "ns"))
    assert len(controller.queue) == 1
    with pytest.raises(KeyError, match="ConfigMap"):
        controller.start_deferred_watch(CONFIGMAPS)
    controller.queue.shut_down()
