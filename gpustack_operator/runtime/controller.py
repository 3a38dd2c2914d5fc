"""Controllers: informer events -> predicates -> keys -> work queue -> reconcile workers.

A :class:`Controller` owns one :class:`~gpustack_operator.runtime.workqueue.WorkQueue` and runs
``max_concurrent_reconciles`` workers that take keys from it and call the reconciler. Event
handlers registered on informers are synchronous and O(1): they filter with predicates, map the
object to keys and enqueue them, nothing else.

The reconcile contract (controller-runtime's):

* return ``None`` or ``Result()`` -> success: the key's backoff is forgotten;
* ``Result(requeue_after=d)`` -> forget, then add the key again after *d* seconds;
* ``Result(requeue=True)`` -> a rate-limited retry without counting as an error;
* raise :class:`TerminalError` -> forget, log, count as an error, never retried;
* raise any other exception -> log, count, retry with per-key exponential backoff; after a
  transient API error (429, 5xx, no answer) that backoff is capped at
  ``transient_backoff_cap`` and never shorter than the server's ``Retry-After``;
* ``LeaseNotHeld`` (the write fence refused a write) -> a warning and a retry.

Every log line emitted during a reconcile carries ``controller``, ``key`` and ``reconcile_id``
(bound with structlog's contextvars, so the reconciler's own loggers get them too).

Most code builds controllers with :class:`ControllerBuilder` (``manager.controller(name)``):

    manager.controller("flavor").for_(NODES, GENERATION_CHANGED).owns(CONFIGMAPS).complete(fn)
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import anyio
import structlog

from gpustack_operator.runtime import metrics
from gpustack_operator.runtime.cache import object_key
from gpustack_operator.runtime.channel import Channel
from gpustack_operator.runtime.churn import KeyChurn
from gpustack_operator.runtime.client import ApiUnavailable, ServerError, TooManyRequests
from gpustack_operator.runtime.coalesce import Coalesce, CoalescingQueue
from gpustack_operator.runtime.fence import LeaseNotHeld
from gpustack_operator.runtime.predicates import Predicate, PredicateLike, and_, as_predicate
from gpustack_operator.runtime.resources import Resource
from gpustack_operator.runtime.workqueue import RateLimiter, ShutDown, WorkQueue

__all__ = [
    "CacheSyncTimeoutError",
    "Controller",
    "ControllerBuilder",
    "EventRecorderLike",
    "EventSource",
    "MapFunc",
    "Reconciler",
    "Request",
    "Result",
    "TerminalError",
    "enqueue_mapped",
    "enqueue_object",
    "enqueue_owner",
]

log = structlog.get_logger(__name__)

TRANSIENT_BACKOFF_CAP = 4.0
"""Seconds: the longest retry delay of a key after a 429, a 5xx or no answer (a
``Retry-After`` aside), so keys converge within seconds of the API server recovering
(docs/runtime.md, "Recovery after faults")."""

Obj = dict[str, Any]
T = TypeVar("T")


# --- the reconcile contract ------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Request:
    """What to reconcile: the key ``namespace/name`` (or ``name`` for cluster-scoped kinds)."""

    key: str

    @classmethod
    def of(cls, name: str, namespace: str | None = None) -> Request:
        return cls(f"{namespace}/{name}" if namespace else name)

    @classmethod
    def for_object(cls, obj: Obj) -> Request:
        return cls(object_key(obj))

    @property
    def namespace(self) -> str | None:
        ns, sep, _ = self.key.rpartition("/")
        return ns if sep else None

    @property
    def name(self) -> str:
        return self.key.rpartition("/")[2]

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next; the default means "done until something changes"."""

    requeue_after: float | None = None
    """Reconcile this key again after this many seconds (resets its backoff)."""
    requeue: bool = False
    """Retry with the key's backoff without counting an error (rarely needed)."""

    @classmethod
    def at(cls, deadline: float, now: float) -> Result:
        """Reconcile again once the clock that gave *now* reaches *deadline* (a timer that
        ends with no event to say so), a hair after it so the timer has run out."""
        return cls(requeue_after=max(deadline - now, 0.0) + 0.01)


class TerminalError(Exception):
    """A reconcile failure that retrying cannot fix (bad input): logged, counted, not retried."""


Reconciler = Callable[[Request], Awaitable[Result | None]]
MapFunc = Callable[[Obj], Iterable[Request | str]]
"""Maps a watched object to the requests (or keys) of the objects to reconcile."""
Mapper = Callable[[Obj], Iterable[str]]


class CacheSyncTimeoutError(RuntimeError):
    """The controller's informers did not sync in time; workers were not started."""


# --- event sources and handlers -------------------------------------------------------------


class _Getter(Protocol):
    def get(self, key: str) -> Obj | None: ...


class EventSource(Protocol):
    """What a controller watches: an informer, structurally."""

    @property
    def resource(self) -> Resource: ...

    @property
    def indexer(self) -> _Getter: ...

    @property
    def has_synced(self) -> bool: ...

    def add_event_handler(self, handler: Any) -> None: ...

    def remove_event_handler(self, handler: Any) -> None: ...

    async def wait_for_sync(self, timeout: float | None = None) -> bool: ...  # noqa: ASYNC109


class EventRecorderLike(Protocol):
    """The part of :class:`~gpustack_operator.runtime.events.EventRecorder` controllers use."""

    def event(
        self,
        obj: Mapping[str, Any],
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
        *,
        resource: Resource | None = None,
    ) -> None: ...


def enqueue_object() -> Mapper:
    """Maps an object to its own key (the ``for_`` watch)."""

    def mapper(obj: Obj) -> Iterable[str]:
        return (object_key(obj),)

    return mapper


def enqueue_owner(owner: Resource, *, controller_only: bool = True) -> Mapper:
    """Maps an object to the key of its owner of kind *owner* (the ``owns`` watch).

    Only the owner reference with ``controller: true`` counts unless *controller_only* is False.
    The owner's group must match; its version may differ (an owner keeps working across API
    versions). A cluster-scoped owner's key is its name; a namespaced owner lives in the
    child's namespace (owner references never cross namespaces).
    """

    def mapper(obj: Obj) -> Iterable[str]:
        meta = obj.get("metadata") or {}
        keys: list[str] = []
        for ref in meta.get("ownerReferences") or ():
            if ref.get("kind") != owner.kind or not ref.get("name"):
                continue
            group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            if group != owner.group:
                continue
            if controller_only and not ref.get("controller"):
                continue
            namespace = meta.get("namespace") if owner.namespaced else None
            keys.append(f"{namespace}/{ref['name']}" if namespace else str(ref["name"]))
        return keys

    return mapper


def enqueue_mapped(map_fn: MapFunc) -> Mapper:
    """Maps an object with *map_fn*, which returns requests or plain keys (``watches``)."""

    def mapper(obj: Obj) -> Iterable[str]:
        return [r.key if isinstance(r, Request) else str(r) for r in map_fn(obj)]

    return mapper


class _WatchHandler:
    """The informer event handler of one watch: filter, map, enqueue; synchronous and O(1).

    *add* enqueues a key (the work queue's, or a :class:`CoalescingQueue`'s); *add_deleted*,
    when given, enqueues the keys of delete events instead.
    """

    def __init__(
        self,
        controller: Controller,
        mapper: Mapper,
        predicate: Predicate,
        add: Callable[[str], None] | None = None,
        add_deleted: Callable[[str], None] | None = None,
    ) -> None:
        self._controller = controller
        self._mapper = mapper
        self._predicate = predicate
        self._add = add or controller.queue.add
        self._add_deleted = add_deleted or self._add

    def _enqueue(self, *objs: Obj, add: Callable[[str], None] | None = None) -> None:
        add = add or self._add
        for obj in objs:
            try:
                keys = self._mapper(obj)
                for key in keys:
                    add(key)
            except Exception:
                # A map function bug must not kill the informer that delivers to everyone.
                log.exception(
                    "event mapping failed; event dropped",
                    controller=self._controller.name,
                    object=object_key(obj),
                )

    def on_add(self, obj: Obj) -> None:
        if self._predicate.create(obj):
            self._enqueue(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        if not self._predicate.update(old, new):
            return
        # Both: a changed owner reference or label must reach the old parent too. A key both
        # versions map to is added once: one event is one event to a coalescing queue (a
        # second add at once would open a burst of its own, one more reconcile later).
        add = self._add
        before = self._keys(old)
        for key in before:
            add(key)
        after = self._keys(new)
        if after == before:
            return
        seen = before if len(before) < 16 else set(before)
        for key in after:
            if key not in seen:
                add(key)

    def _keys(self, obj: Obj) -> list[str] | tuple[str, ...]:
        try:
            keys = self._mapper(obj)
            return keys if isinstance(keys, list | tuple) else list(keys)
        except Exception:
            log.exception(
                "event mapping failed; event dropped",
                controller=self._controller.name,
                object=object_key(obj),
            )
            return ()

    def on_delete(self, obj: Obj) -> None:
        if self._predicate.delete(obj):
            self._enqueue(obj, add=self._add_deleted)

    def on_resync(self, obj: Obj) -> None:
        # The periodic safety net: predicates filter changes, and a resync is none. Nor is it
        # a burst: its keys go straight to the work queue (deduplicated there), so it opens
        # no coalescing window that a real change a moment later would have to wait out.
        self._enqueue(obj, add=self._controller.queue.add)


# --- the reconcile's log context -------------------------------------------------------------

_CONTEXT_VARS: tuple[ContextVar[Any], ContextVar[Any], ContextVar[Any]] | None = None


def _context_vars() -> tuple[ContextVar[Any], ContextVar[Any], ContextVar[Any]]:
    """structlog's context variables of ``controller``, ``key`` and ``reconcile_id``, which
    every reconcile binds (docs/runtime.md, "Controllers (`controller.py`)"). Taken from the
    tokens of one ``bind_contextvars`` and then set and reset directly per reconcile: what
    ``bound_contextvars`` does, without reading the whole context twice per call."""
    global _CONTEXT_VARS
    if _CONTEXT_VARS is None:
        tokens = structlog.contextvars.bind_contextvars(controller=..., key=..., reconcile_id=...)
        structlog.contextvars.reset_contextvars(**tokens)
        _CONTEXT_VARS = (tokens["controller"].var, tokens["key"].var, tokens["reconcile_id"].var)
    return _CONTEXT_VARS


_random_bits = random.getrandbits


def _reconcile_id() -> str:
    """A fresh random UUID (version 4, RFC 4122 variant) for one reconcile's log lines: the
    process's random generator rather than the system's, since it only tells reconciles
    apart and ``uuid4`` costs several times more per reconcile."""
    h = "%032x" % (_random_bits(128) & _UUID4_CLEAR | _UUID4_SET)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_UUID4_CLEAR = 0xFFFFFFFF_FFFF_0FFF_3FFF_FFFFFFFFFFFF
_UUID4_SET = 0x00000000_0000_4000_8000_000000000000


# --- the controller ------------------------------------------------------------------------


class Controller:
    """Runs reconcile workers over one work queue; see the module docstring for the contract.

    *cache_sync_timeout* bounds the wait for the watched informers before workers start;
    *drain_timeout* bounds how long in-flight reconciles may finish after cancellation.
    """

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        max_concurrent_reconciles: int = 1,
        rate_limiter: RateLimiter | None = None,
        cache_sync_timeout: float = 120.0,
        drain_timeout: float = 30.0,
        recorder: EventRecorderLike | None = None,
        transient_backoff_cap: float = TRANSIENT_BACKOFF_CAP,
        churn: KeyChurn | None = None,
    ) -> None:
        if max_concurrent_reconciles < 1:
            raise ValueError(
                f"controller {name!r}: max_concurrent_reconciles must be >= 1, "
                f"got {max_concurrent_reconciles}"
            )
        self.name = name
        self.reconciler = reconciler
        self.max_concurrent_reconciles = max_concurrent_reconciles
        self.cache_sync_timeout = cache_sync_timeout
        self.drain_timeout = drain_timeout
        self.recorder = recorder
        self.transient_backoff_cap = transient_backoff_cap
        """The longest retry delay after an answer the API server may not give again (429,
        5xx, no answer), a ``Retry-After`` aside (docs/runtime.md, "Recovery after faults")."""
        self.queue = WorkQueue(name, rate_limiter=rate_limiter)
        self.churn = churn or KeyChurn()
        """Keys reconciled again and again without end; the first time one churns, the
        sources are listed again (docs/runtime.md, "Keys that never settle")."""
        self._sources: list[EventSource] = []
        self._handlers: list[tuple[EventSource, Any]] = []
        self._coalescing: dict[int, CoalescingQueue] = {}
        self._deferred: dict[Resource, Callable[[], EventSource]] = {}
        self._channels: list[tuple[Channel[Any], Callable[[Any], None]]] = []
        self._watching = False
        self._primary: EventSource | None = None
        self._started = False
        self._log = log.bind(controller=name)
        self._context = _context_vars()
        metrics.MAX_CONCURRENT_RECONCILES.labels(name).set(max_concurrent_reconciles)
        # Label children resolved once: reconcile_key runs per key and must stay cheap.
        self._active = metrics.ACTIVE_WORKERS.labels(name)
        self._active.set(0)
        self._time = metrics.RECONCILE_TIME.labels(name)
        self._errors = metrics.RECONCILE_ERRORS.labels(name)
        self._terminal = metrics.TERMINAL_RECONCILE_ERRORS.labels(name)
        self._total = {
            result: metrics.RECONCILE_TOTAL.labels(name, result)
            for result in ("success", "error", "requeue", "requeue_after")
        }

    def watch(
        self,
        source: EventSource,
        mapper: Mapper,
        predicates: Sequence[PredicateLike] = (),
        *,
        primary: bool = False,
        coalesce: Coalesce | None = None,
    ) -> None:
        """Enqueue ``mapper(obj)`` for every event of *source* that passes all *predicates*.

        The *primary* source (the ``for_`` kind) is where failure Events are recorded. The
        handler is attached when the controller starts (:meth:`start_watches`), so a
        controller that never runs (a standby's leader-only one) never fills its queue. With
        *coalesce*, keys go through the controller's :class:`CoalescingQueue` for that value.
        """
        predicate = and_(*predicates)
        if coalesce is None:
            handler = _WatchHandler(self, mapper, predicate)
        else:
            coalescing = self.coalescing(coalesce)
            deleted = coalescing.add_now if coalesce.deletes_at_once else None
            handler = _WatchHandler(self, mapper, predicate, coalescing.add, deleted)
        self.watch_with(source, handler, primary=primary)

    def pending_bursts(self) -> int:
        """Keys waiting in a coalescing window: work not yet in the queue (tests and probes
        that wait for a controller to go idle look at this beside the queue)."""
        return sum(q.core.pending() for q in self._coalescing.values())

    def coalescing(self, spec: Coalesce) -> CoalescingQueue:
        """The controller's coalescing queue for *spec* (one per value: watches given the same
        :class:`Coalesce` share its per-key windows); its hold's informers become sources."""
        coalescing = self._coalescing.get(id(spec))
        if coalescing is None:
            coalescing = self._coalescing[id(spec)] = CoalescingQueue(spec, self.queue.add)
            for source in spec.hold.sources if spec.hold is not None else ():
                if source not in self._sources:
                    self._sources.append(source)
        return coalescing

    def defer_watch(self, resource: Resource, attach: Callable[[], EventSource]) -> None:
        """Keep a watch of *resource* to be attached by :meth:`start_deferred_watch` (the
        builder's ``watches(..., deferred=True)``)."""
        self._deferred[resource] = attach

    def start_deferred_watch(self, resource: Resource) -> EventSource:
        """Attach the deferred watch of *resource* now (once its kind is served: an informer
        of an unserved kind never syncs); later calls return the same source."""
        attach = self._deferred.get(resource)
        if attach is None:
            raise KeyError(
                f"controller {self.name!r} has no deferred watch of {resource.kind}: declare "
                "it with the builder's watches(..., deferred=True)"
            )
        source = attach()
        self._deferred[resource] = lambda: source
        return source

    def watch_with(self, source: EventSource, handler: Any, *, primary: bool = False) -> None:
        """Attach *handler* (any informer event handler) to *source* when the controller
        starts; *source* is then one the controller waits for before its workers start."""
        self._handlers.append((source, handler))
        if self._watching:
            source.add_event_handler(handler)
        if source not in self._sources:
            self._sources.append(source)
        if primary:
            self._primary = source

    def watch_channel(self, channel: Channel[Any], map_fn: Callable[[Any], Iterable[str]]) -> None:
        """Enqueue ``map_fn(value)`` for every value sent on *channel* while the controller
        runs (attached with the other watches; :mod:`gpustack_operator.runtime.channel`).
        A channel is not a source to wait for: it has no cache to sync."""

        def handler(value: Any) -> None:
            for key in map_fn(value):
                self.queue.add(key)

        self._channels.append((channel, handler))
        if self._watching:
            channel.attach(handler)

    @property
    def sources(self) -> list[EventSource]:
        """The informers this controller waits for before its workers start."""
        return list(self._sources)

    def start_watches(self) -> None:
        """Attach every watch's handler to its source (idempotent); :meth:`run` calls it.

        A source that has synced replays its cache as adds, so the queue starts with every
        cached key, as controller-runtime's ``startWatches`` does.
        """
        if self._watching:
            return
        self._watching = True
        for source, handler in self._handlers:
            source.add_event_handler(handler)
        for channel, on_value in self._channels:
            channel.attach(on_value)

    def stop_watches(self) -> None:
        """Detach the handlers again (the controller stopped; its queue takes no more keys)."""
        if not self._watching:
            return
        self._watching = False
        for source, handler in self._handlers:
            source.remove_event_handler(handler)
        for channel, on_value in self._channels:
            channel.detach(on_value)

    @property
    def started(self) -> bool:
        """Whether workers have started (caches synced)."""
        return self._started

    async def run(self) -> None:
        """Wait for the sources to sync, then run workers until cancelled.

        On cancellation the queue stops taking keys, in-flight reconciles get up to
        ``drain_timeout`` seconds to finish, and stragglers are then cancelled.
        Raises :class:`CacheSyncTimeoutError` when the sources do not sync in time.
        """
        self.start_watches()
        failed: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:
                for coalescing in self._coalescing.values():
                    tg.start_soon(coalescing.run)
                try:
                    await self._run()
                except Exception as err:  # raised as itself, not inside a group
                    failed = err
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self.stop_watches()
        if failed is not None:
            raise failed

    async def _run(self) -> None:
        with anyio.move_on_after(self.cache_sync_timeout) as sync_scope:
            for source in self._sources:
                await source.wait_for_sync(self.cache_sync_timeout)
        unsynced = [s.resource.kind for s in self._sources if not s.has_synced]
        if sync_scope.cancelled_caught or unsynced:
            self.queue.shut_down()
            raise CacheSyncTimeoutError(
                f"controller {self.name!r}: caches of {', '.join(unsynced) or 'its sources'} "
                f"did not sync within {self.cache_sync_timeout:g}s; check the API server's "
                "reachability and the operator's RBAC (list/watch) for these kinds"
            )
        self._started = True
        self._log.info("starting workers", workers=self.max_concurrent_reconciles)
        workers_done = anyio.Event()
        # Workers are shielded from the caller's cancellation so that it can drain them.
        workers_scope = anyio.CancelScope(shield=True)

        async def run_workers() -> None:
            try:
                with workers_scope:
                    async with anyio.create_task_group() as tg:
                        for _ in range(self.max_concurrent_reconciles):
                            tg.start_soon(self._worker)
            finally:
                workers_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_workers)
            try:
                await workers_done.wait()
            finally:
                with anyio.CancelScope(shield=True):
                    await self._drain(workers_done, workers_scope)

    async def _drain(self, workers_done: anyio.Event, workers_scope: anyio.CancelScope) -> None:
        in_flight = len(self.queue.processing())
        self.queue.shut_down()
        with anyio.move_on_after(self.drain_timeout):
            await workers_done.wait()
        if not workers_done.is_set():
            self._log.warning(
                "reconciles still running after the drain timeout; cancelling them",
                in_flight=sorted(self.queue.processing()),
                drain_timeout=self.drain_timeout,
            )
            workers_scope.cancel()
            await workers_done.wait()
        self._log.info("workers stopped", drained=in_flight)

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            try:
                await self.reconcile_key(key)
            finally:
                self.queue.done(key)

    async def reconcile_key(self, key: str) -> None:
        """Reconcile *key* once and apply the contract's outcome to the queue and metrics."""
        queue = self.queue
        controller_var, key_var, id_var = self._context
        tokens = (
            controller_var.set(self.name),
            key_var.set(key),
            id_var.set(_reconcile_id()),
        )
        try:
            self._active.inc()
            started = time.perf_counter()
            if self.churn.record(key):
                self._churning(key)
            try:
                result = await self.reconciler(Request(key))
            except TerminalError as err:
                queue.forget(key)
                self._errors.inc()
                self._terminal.inc()
                self._total["error"].inc()
                log.error("reconcile failed with a terminal error; not retrying", error=str(err))
                self._record_failure(key, "ReconcileFailed", err)
            except LeaseNotHeld as err:  # nothing was sent; the manager is stopping
                queue.add_rate_limited(key)
                self._errors.inc()
                self._total["error"].inc()
                log.warning(
                    "reconcile refused to write: the Lease is not known held", error=str(err)
                )
            except (TooManyRequests, ServerError, ApiUnavailable) as err:
                queue.add_rate_limited(
                    key, at_most=self.transient_backoff_cap, at_least=err.retry_after or 0.0
                )
                self._errors.inc()
                self._total["error"].inc()
                log.warning(
                    "reconcile failed on a transient API error; retrying",
                    error=str(err) or type(err).__name__,
                    status=err.status,
                    retries=queue.num_requeues(key),
                )
            except Exception as err:
                queue.add_rate_limited(key)
                self._errors.inc()
                self._total["error"].inc()
                log.error(
                    "reconcile failed; retrying with backoff",
                    error=str(err) or type(err).__name__,
                    retries=queue.num_requeues(key),
                    exc_info=err,
                )
                self._record_failure(key, "ReconcileError", err)
            else:
                if result is not None and result.requeue_after and result.requeue_after > 0:
                    queue.forget(key)
                    queue.add_after(key, result.requeue_after)
                    self._total["requeue_after"].inc()
                elif result is not None and result.requeue:
                    queue.add_rate_limited(key)
                    self._total["requeue"].inc()
                else:
                    queue.forget(key)
                    self._total["success"].inc()
            finally:
                self._active.dec()
                self._time.observe(time.perf_counter() - started)
        finally:
            id_var.reset(tokens[2])
            key_var.reset(tokens[1])
            controller_var.reset(tokens[0])

    def _churning(self, key: str) -> None:
        """*key* never settles: the usual cause is a cache that disagrees with the API server
        (an object it still holds that the server deleted), so every source LISTs again."""
        self._log.warning(
            "a key is reconciled again and again; listing the watched kinds again",
            churning_key=key,
            reconciles=self.churn.limit,
            window_seconds=self.churn.window,
            fix="if it goes on after the new LIST, the key's reconcile undoes itself: see its log",
        )
        for source in self._sources:
            relist = getattr(source, "request_relist", None)
            if callable(relist):
                relist()

    def _record_failure(self, key: str, reason: str, err: Exception) -> None:
        if self.recorder is None or self._primary is None:
            return
        obj = self._primary.indexer.get(key)
        if obj is None:
            return
        message = f"{self.name}: {err or type(err).__name__}"
        self.recorder.event(obj, "Warning", reason, message, resource=self._primary.resource)


# --- the builder -------------------------------------------------------------------------------


class ControllerHost(Protocol):
    """What a builder needs from its manager (implemented by ``Manager``)."""

    def source_for(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> EventSource:
        """The shared informer of *resource* with this scope."""
        ...

    def add_controller(self, controller: Controller) -> None: ...

    @property
    def recorder(self) -> EventRecorderLike | None: ...


@dataclass
class _WatchSpec:
    resource: Resource
    mapper: Callable[[Resource], Mapper]
    predicates: tuple[PredicateLike, ...]
    namespace: str | None
    label_selector: str | None
    field_selector: str | None
    coalesce: Coalesce | None = None
    handler: Callable[[Controller], Any] | None = None
    deferred: bool = False


class ControllerBuilder:
    """Declares what a controller watches and how; :meth:`complete` creates and registers it."""

    def __init__(self, host: ControllerHost, name: str) -> None:
        if not name:
            raise ValueError("a controller needs a name (it labels logs and metrics)")
        self._host = host
        self._name = name
        self._for: _WatchSpec | None = None
        self._watches: list[_WatchSpec] = []
        self._channels: list[tuple[Channel[Any], Callable[[Any], Iterable[str]]]] = []
        self._filters: list[PredicateLike] = []
        self._options: dict[str, Any] = {}

    def for_(
        self,
        resource: Resource,
        *predicates: PredicateLike,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        coalesce: Coalesce | None = None,
    ) -> ControllerBuilder:
        """Reconcile objects of *resource*: each event enqueues the object's own key (at once,
        unless *coalesce* is given: an explicit choice to rate-limit a flapping object)."""
        if self._for is not None:
            raise ValueError(f"controller {self._name!r}: for_() was already called")
        self._for = _WatchSpec(
            resource,
            lambda _: enqueue_object(),
            predicates,
            namespace,
            label_selector,
            field_selector,
            coalesce,
        )
        return self

    def owns(
        self,
        resource: Resource,
        *predicates: PredicateLike,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        coalesce: Coalesce | None = None,
    ) -> ControllerBuilder:
        """Watch children of *resource*; each enqueues its controlling owner of the for_ kind."""
        self._watches.append(
            _WatchSpec(
                resource,
                enqueue_owner,
                predicates,
                namespace,
                label_selector,
                field_selector,
                coalesce,
            )
        )
        return self

    def watches(
        self,
        resource: Resource,
        map_fn: MapFunc,
        *predicates: PredicateLike,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        coalesce: Coalesce | None = None,
        deferred: bool = False,
    ) -> ControllerBuilder:
        """Watch *resource*; each event enqueues ``map_fn(obj)`` (old and new of an update),
        through a coalescing window when *coalesce* is given. *deferred*: attached only when
        the reconciler calls ``controller.start_deferred_watch(resource)``, for a kind that
        may not be served yet (docs/runtime.md, "Controllers")."""
        mapper = enqueue_mapped(map_fn)
        self._watches.append(
            _WatchSpec(
                resource,
                lambda _: mapper,
                predicates,
                namespace,
                label_selector,
                field_selector,
                coalesce,
                deferred=deferred,
            )
        )
        return self

    def watches_with(
        self,
        resource: Resource,
        handler: Callable[[Controller], Any],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ControllerBuilder:
        """Watch *resource* with any event handler: ``handler(controller)`` builds it (it
        usually adds keys to ``controller.queue``); the informer is one the controller waits
        for, and the handler is attached when the controller starts."""
        self._watches.append(
            _WatchSpec(
                resource,
                lambda _: enqueue_object(),
                (),
                namespace,
                label_selector,
                field_selector,
                handler=handler,
            )
        )
        return self

    def watches_channel(
        self, channel: Channel[T], map_fn: Callable[[T], Iterable[str]]
    ) -> ControllerBuilder:
        """Watch *channel* (a typed event source the program's wiring owns): each value sent
        enqueues ``map_fn(value)`` (docs/runtime.md, "Controllers")."""
        self._channels.append((channel, map_fn))
        return self

    def with_event_filter(self, *predicates: PredicateLike) -> ControllerBuilder:
        """Predicates applied to every watch of this controller."""
        self._filters.extend(predicates)
        return self

    def with_options(
        self,
        *,
        max_concurrent_reconciles: int | None = None,
        rate_limiter: RateLimiter | None = None,
        cache_sync_timeout: float | None = None,
        drain_timeout: float | None = None,
        transient_backoff_cap: float | None = None,
    ) -> ControllerBuilder:
        """Worker count, retry backoff, cache-sync and drain timeouts (None keeps the default)."""
        given = {
            "max_concurrent_reconciles": max_concurrent_reconciles,
            "rate_limiter": rate_limiter,
            "cache_sync_timeout": cache_sync_timeout,
            "drain_timeout": drain_timeout,
            "transient_backoff_cap": transient_backoff_cap,
        }
        self._options.update({k: v for k, v in given.items() if v is not None})
        return self

    def complete(self, reconciler: Reconciler) -> Controller:
        """Create the controller, register its watches and add it to the manager.

        A controller without ``for_`` is allowed when it only ``watches`` (its keys come from
        map functions, such as one fixed key for a singleton); ``owns`` needs the ``for_``
        kind as the owner.
        """
        owns = any(spec.mapper is enqueue_owner for spec in self._watches)
        if self._for is None and (owns or not (self._watches or self._channels)):
            raise ValueError(f"controller {self._name!r}: call for_(resource) before complete()")
        controller = Controller(
            self._name, reconciler, recorder=self._host.recorder, **self._options
        )
        specs = [self._for, *self._watches] if self._for is not None else self._watches
        for spec in specs:
            if spec.deferred:
                controller.defer_watch(
                    spec.resource, functools.partial(self._attach, controller, spec)
                )
            else:
                self._attach(controller, spec)
        for channel, map_fn in self._channels:
            controller.watch_channel(channel, map_fn)
        self._host.add_controller(controller)
        return controller

    def _attach(self, controller: Controller, spec: _WatchSpec) -> EventSource:
        source = self._host.source_for(
            spec.resource,
            namespace=spec.namespace,
            label_selector=spec.label_selector,
            field_selector=spec.field_selector,
        )
        if spec.handler is not None:
            controller.watch_with(source, spec.handler(controller))
            return source
        preds = [as_predicate(p) for p in (*self._filters, *spec.predicates)]
        owner = self._for.resource if self._for is not None else spec.resource
        controller.watch(
            source,
            spec.mapper(owner),
            preds,
            primary=spec is self._for,
            coalesce=spec.coalesce,
        )
        return source
