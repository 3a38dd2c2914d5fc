"""Informers: a local, always-current copy of one kind, and events when it changes.

An :class:`Informer` is client-go's reflector + shared informer in one: it LISTs (paged), then
WATCHes from the list's resourceVersion, keeps an :class:`~.cache.Indexer` current and calls
event handlers synchronously on the event loop. The rules it follows (each covered by a test):

- ``has_synced`` turns true only once the first LIST is in the cache and its handlers ran;
  until then nothing is "missing", so nothing is reported deleted.
- The watch asks for bookmarks and a random ``timeoutSeconds`` in [300, 600). When it ends
  cleanly, breaks mid-stream or stalls (no byte within the inactivity timeout), it resumes
  from the last resourceVersion seen, bookmarks included, without a new LIST.
- 410 Gone (HTTP or an in-stream ERROR) triggers a re-LIST, first at the last resourceVersion
  (unpaged, which the API server answers from its watch cache), then at ``""`` (a paged,
  consistent read) if that is gone too. A re-LIST replaces the cache: objects absent from it
  produce delete events with their last known state.
- An answer beyond the client's bounds (``ResponseTooLarge``: a LIST body or a watch event
  too large, a header bomb) triggers a re-LIST after backoff: the event that was cut off
  may be missing from the cache, and resuming the watch would meet it again
  (docs/runtime.md, "Bounds").
- Errors back off 0.8 s -> 30 s with jitter (reset after progress); a ``Retry-After`` from
  the server is honoured when longer. ``run`` never returns on errors.
- :meth:`Informer.request_relist` ends the watch and LISTs at ``""`` (a consistent read, not
  the server's watch cache) at once, replacing the cache: what a controller asks for when one
  of its keys never settles, the sign of a cache that disagrees with the API server
  (``churn.py``; docs/runtime.md, "Keys that never settle").
- :meth:`Informer.failing_for` says how long the informer has been unable to list or watch
  (0 while it works): from the first failed LIST or WATCH until a LIST succeeds or a watch
  delivers an event. The manager's ``/readyz`` and ``gpustack_informer_failing_seconds``
  read it, so a cache that silently stopped following the cluster is visible.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import structlog
from anyio.abc import TaskGroup

from . import metrics
from .backoff import Backoff, BackoffPolicy
from .cache import Indexer, IndexFunc, object_key, strip_managed_fields
from .client import (
    ApiError,
    Client,
    Gone,
    ListResult,
    ResponseTooLarge,
    WatchEvent,
    WatchInterrupted,
    WatchStalled,
)
from .resources import Resource

__all__ = [
    "EventHandler",
    "HandlerFuncs",
    "Informer",
    "InformerFactory",
    "ReflectorSettings",
    "Released",
    "ResyncHandler",
    "Transform",
    "object_key",
    "strip_managed_fields",
]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
Transform = Callable[[JSON], JSON]
Released = Callable[[JSON, JSON | None], None]
"""Told that an object left the cache once every handler has seen it: ``(old, new)`` for a
replaced object, ``(old, None)`` for a removed one."""


class EventHandler(Protocol):
    """Receives cache changes. Runs on the event loop: must be quick and must not block
    (controllers only enqueue keys)."""

    def on_add(self, obj: JSON) -> None:
        """*obj* entered the cache (first LIST, a watch ADDED, or a re-LIST found it new)."""

    def on_update(self, old: JSON, new: JSON) -> None:
        """*old* was replaced by *new* (also on resync and re-LIST, where they may be equal)."""

    def on_delete(self, obj: JSON) -> None:
        """*obj* left the cache; after a re-LIST it is the last state this cache knew."""


class ResyncHandler(Protocol):
    """A handler that tells periodic resyncs apart from updates (controllers' watches do:
    a resync is a safety net and must reach the reconciler whatever the update filters say).
    Handlers without ``on_resync`` get ``on_update(obj, obj)``."""

    def on_resync(self, obj: JSON) -> None:
        """*obj* is still in the cache, unchanged: a periodic resync."""


@dataclass
class HandlerFuncs:
    """An :class:`EventHandler` from optional functions (client-go's ResourceEventHandlerFuncs)."""

    add: Callable[[JSON], None] | None = None
    update: Callable[[JSON, JSON], None] | None = None
    delete: Callable[[JSON], None] | None = None

    def on_add(self, obj: JSON) -> None:
        """Call ``add`` if set."""
        if self.add is not None:
            self.add(obj)

    def on_update(self, old: JSON, new: JSON) -> None:
        """Call ``update`` if set."""
        if self.update is not None:
            self.update(old, new)

    def on_delete(self, obj: JSON) -> None:
        """Call ``delete`` if set."""
        if self.delete is not None:
            self.delete(obj)


@dataclass(frozen=True)
class ReflectorSettings:
    """Tunables of the list/watch loop; the defaults are client-go's. Tests shrink them."""

    page_size: int = 500
    watch_timeout_range: tuple[int, int] = (300, 600)
    inactivity_timeout: float | None = 70.0
    # A watch that ends this fast with no event counts as a failure (client-go: "very short
    # watch"), so a server that accepts and drops every watch is not hammered.
    min_watch_duration: float = 1.0
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep
    clock: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random


class Informer:
    """List + watch one resource (optionally one namespace / selector) into an Indexer."""

    def __init__(
        self,
        client: Client,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = strip_managed_fields,
        resync_period: float | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        settings: ReflectorSettings | None = None,
    ) -> None:
        if namespace and not resource.namespaced:
            raise ValueError(f"{resource.kind} is cluster-scoped: an informer takes no namespace")
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.indexer = Indexer()
        for name, fn in (indexers or {}).items():
            self.indexer.add_index(name, fn)
        self.settings = settings or ReflectorSettings()
        self._transform = transform
        self._resync_period = resync_period
        self._handlers: list[EventHandler] = []
        self._released: list[Released] = []
        self._synced = False
        self._sync_event: anyio.Event | None = None
        self._running = False
        self._last_rv = ""
        self._watch_events = 0
        self._failing_since: float | None = None
        self._relist_requested = False
        self._watch_scope: anyio.CancelScope | None = None
        # Observability (and proof in tests): how many LISTs and WATCHes this informer made.
        self.list_count = 0
        self.watch_count = 0
        self.log = log.bind(
            resource=str(resource),
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )

    # --- public API -------------------------------------------------------------------------

    @property
    def has_synced(self) -> bool:
        """True once the first LIST is in the cache and its events were delivered."""
        return self._synced

    @property
    def scope(self) -> str:
        """The resource and its scope, as logs and the failing-seconds gauge name it."""
        parts = [
            f"{k}={v}"
            for k, v in (
                ("namespace", self.namespace),
                ("labels", self.label_selector),
                ("fields", self.field_selector),
            )
            if v
        ]
        return f"{self.resource}[{','.join(parts)}]" if parts else str(self.resource)

    def failing_for(self) -> float:
        """Seconds since listing or watching started failing; 0 while it works."""
        if self._failing_since is None:
            return 0.0
        return max(0.0, self.settings.clock() - self._failing_since)

    def request_relist(self) -> None:
        """End the watch and LIST again at once at ``""``, replacing the cache (objects it
        holds that the API server no longer has are reported deleted)."""
        self._relist_requested = True
        self.log.warning("relist_requested", resource_version=self._last_rv)
        if self._watch_scope is not None:
            self._watch_scope.cancel()

    def _failing(self) -> None:
        if self._failing_since is None:
            self._failing_since = self.settings.clock()

    @property
    def last_resource_version(self) -> str:
        """The resourceVersion a re-watch would start from."""
        return self._last_rv

    def add_event_handler(self, handler: EventHandler) -> None:
        """Register *handler*; once synced, it first gets ``on_add`` for every cached object."""
        self._handlers.append(handler)
        if self._synced:
            for obj in self.indexer.list():
                self._call(handler, "on_add", obj)

    def remove_event_handler(self, handler: EventHandler) -> None:
        """Stop delivering events to *handler* (a stopped controller's); others are kept."""
        self._handlers = [h for h in self._handlers if h is not handler]

    def on_released(self, callback: Released) -> None:
        """Call *callback* with every object that leaves the cache, once every handler has
        seen it: ``(old, new)`` when *new* replaced it, ``(old, None)`` when it was removed.

        For a store that keeps something per cached object (the worker's node models): what
        it keeps for *old* is needed no more, since handlers run synchronously and reconcilers
        read the cache, so holding it would keep a second version of every object alive.
        Not called on resync, where nothing leaves.
        """
        self._released.append(callback)

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Add a named index to the cache (existing objects are indexed at once)."""
        self.indexer.add_index(name, fn)

    async def wait_for_sync(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - mirrors client-go's WaitForCacheSync
        """Wait until synced or *timeout* seconds pass; return whether synced."""
        if self._synced:
            return True
        event = self._event()
        with anyio.move_on_after(timeout):
            await event.wait()
        return self._synced

    def resync(self) -> None:
        """Deliver every cached object again (periodic re-reconcile): ``on_resync(obj)`` to
        handlers that have it, ``on_update(obj, obj)`` to the others."""
        for obj in self.indexer.list():
            for handler in list(self._handlers):
                if hasattr(handler, "on_resync"):
                    self._call(handler, "on_resync", obj)
                else:
                    self._call(handler, "on_update", obj, obj)

    async def run(self) -> None:
        """List and watch until cancelled. Errors are logged and retried with backoff."""
        if self._running:
            raise RuntimeError(f"informer for {self.resource} is already running")
        self._running = True
        metrics.register_informer(self)
        try:
            async with anyio.create_task_group() as tg:
                if self._resync_period:
                    tg.start_soon(self._resync_loop, self._resync_period)
                await self._list_and_watch()
        finally:
            self._running = False
            metrics.unregister_informer(self)

    # --- the reflector loop -----------------------------------------------------------------

    async def _list_and_watch(self) -> None:
        s = self.settings
        backoff = Backoff(s.backoff, clock=s.clock, rand=s.rand)
        need_list = True
        gone_in_a_row = 0
        while True:
            delay = 0.0
            self._watch_events = 0
            try:
                if need_list:
                    await self._relist()
                    self._failing_since = None
                    need_list = False
                    if not gone_in_a_row:
                        # Progress; but a LIST squeezed between two 410s is not (see below).
                        backoff.reset()
                started = s.clock()
                await self._watch()
                if self._relist_requested:
                    need_list = True
                    continue
                if self._watch_events:
                    backoff.reset()
                    gone_in_a_row = 0
                elif s.clock() - started < s.min_watch_duration:
                    self._failing()
                    delay = backoff.next()
                    self.log.warning("watch_closed_at_once", delay=round(delay, 3))
                else:
                    self.log.debug("watch_closed", resource_version=self._last_rv)
            except Gone as exc:
                if need_list:
                    delay = self._failed(backoff, exc, "list")
                else:
                    need_list = True
                    gone_in_a_row = 0 if self._watch_events else gone_in_a_row + 1
                    # The usual cure is one immediate re-LIST; a server that keeps answering
                    # 410 right after a LIST gets backoff instead of a LIST loop.
                    delay = backoff.next() if gone_in_a_row > 1 else 0.0
                    self.log.info(
                        "watch_expired_relisting",
                        resource_version=self._last_rv,
                        message=str(exc),
                        delay=round(delay, 3),
                    )
            except (WatchInterrupted, WatchStalled) as exc:
                if self._watch_events:
                    backoff.reset()
                    gone_in_a_row = 0
                if isinstance(exc, WatchInterrupted) and not self._watch_events:
                    self._failing()
                    delay = backoff.next()
                self.log.info(
                    "watch_restarting",
                    reason=exc.reason,
                    message=str(exc),
                    resource_version=self._last_rv,
                    delay=round(delay, 3),
                )
            except ResponseTooLarge as exc:
                delay = self._failed(backoff, exc, "list" if need_list else "watch")
                need_list = True
            except ApiError as exc:
                delay = self._failed(backoff, exc, "list" if need_list else "watch")
            except Exception as exc:
                self._failing()
                delay = backoff.next()
                self.log.exception(
                    "informer_unexpected_error", error=repr(exc), delay=round(delay, 3)
                )
            if delay > 0:
                await s.sleep(delay)

    def _failed(self, backoff: Backoff, exc: ApiError, verb: str) -> float:
        self._failing()
        delay = backoff.next()
        if exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        self.log.warning(
            f"{verb}_failed",
            status=exc.status,
            reason=exc.reason,
            message=str(exc),
            delay=round(delay, 3),
            failures=backoff.failures,
        )
        return delay

    async def _relist(self) -> None:
        """LIST into the cache; at the last RV first (cheap), at "" (paged) if it is gone."""
        result: ListResult | None = None
        if self._last_rv and not self._relist_requested:
            try:
                self.list_count += 1
                result = await self._list(self._last_rv, page_size=None)
            except Gone as exc:
                self.log.info("relist_rv_expired", resource_version=self._last_rv, message=str(exc))
        if result is None:
            self.list_count += 1
            result = await self._list(None, page_size=self.settings.page_size)
        self._relist_requested = False
        self._replace(result)

    async def _list(self, resource_version: str | None, page_size: int | None) -> ListResult:
        """The LIST with the transform applied page by page: a cold start of thousands of
        Nodes never holds them all untrimmed (managedFields, images) at once."""
        return await self.client.list_all(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            resource_version=resource_version,
            page_size=page_size,
            transform=self._transformed,
        )

    async def _watch(self) -> None:
        lo, hi = self.settings.watch_timeout_range
        timeout_seconds = min(hi - 1, lo + int(self.settings.rand() * (hi - lo))) if hi > lo else lo
        if self._relist_requested:
            return
        self.watch_count += 1
        with anyio.CancelScope() as scope:
            self._watch_scope = scope
            try:
                await self._follow(timeout_seconds)
            finally:
                self._watch_scope = None

    async def _follow(self, timeout_seconds: int) -> None:
        async with self.client.watch(
            self.resource,
            self.namespace,
            resource_version=self._last_rv,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=timeout_seconds,
            allow_bookmarks=True,
            inactivity_timeout=self.settings.inactivity_timeout,
        ) as stream:
            async for event in stream:
                self._watch_events += 1
                self._failing_since = None
                self._apply(event)

    # --- cache updates ----------------------------------------------------------------------

    def _replace(self, result: ListResult) -> None:
        """Make the cache equal *result*: adds, updates, and deletes for what vanished."""
        fresh: dict[str, JSON] = {}
        for obj in result.items:  # transformed as each page arrived (_list)
            fresh[object_key(obj)] = obj
        for obj in fresh.values():
            old = self.indexer.upsert(obj)
            if old is None:
                self._dispatch("on_add", obj)
            else:
                self._dispatch("on_update", old, obj)
                self._release(old, obj)
        for key in set(self.indexer.keys()) - fresh.keys():
            gone = self.indexer.delete(key)
            if gone is not None:
                self._dispatch("on_delete", gone)
                self._release(gone, None)
        self._last_rv = result.resource_version
        self.log.debug("listed", count=len(fresh), resource_version=self._last_rv)
        if not self._synced:
            self._synced = True
            self._event().set()
            self.log.info("informer_synced", count=len(fresh), resource_version=self._last_rv)

    def _apply(self, event: WatchEvent) -> None:
        rv = event.resource_version
        if event.type == "BOOKMARK":
            if rv:
                self._last_rv = rv
            return
        obj = self._transformed(event.object)
        if event.type == "DELETED":
            gone = self.indexer.delete(object_key(obj))
            self._dispatch("on_delete", obj)
            if gone is not None:
                self._release(gone, None)
            if gone is not obj:
                self._release(obj, None)
        else:
            old = self.indexer.upsert(obj)
            if old is None:
                self._dispatch("on_add", obj)
            else:
                self._dispatch("on_update", old, obj)
                self._release(old, obj)
        if rv:
            self._last_rv = rv

    def _transformed(self, obj: JSON) -> JSON:
        if self._transform is None:
            return obj
        try:
            return self._transform(obj)
        except Exception:
            self.log.exception("transform_failed", key=object_key(obj))
            return obj

    def _dispatch(self, method: str, *objs: JSON) -> None:
        for handler in list(self._handlers):
            self._call(handler, method, *objs)

    def _release(self, old: JSON, new: JSON | None) -> None:
        for callback in self._released:
            try:
                callback(old, new)
            except Exception:
                self.log.exception("release_callback_failed", key=object_key(old))

    def _call(self, handler: EventHandler, method: str, *objs: JSON) -> None:
        """Run one handler; its failure is logged and never stops the informer."""
        try:
            getattr(handler, method)(*objs)
        except Exception:
            self.log.exception("event_handler_failed", handler=repr(handler), callback=method)

    def _event(self) -> anyio.Event:
        # Created lazily: anyio.Event needs a running event loop, __init__ may have none.
        if self._sync_event is None:
            self._sync_event = anyio.Event()
            if self._synced:
                self._sync_event.set()
        return self._sync_event

    async def _resync_loop(self, period: float) -> None:
        while True:
            await anyio.sleep(period)
            if self._synced:
                self.resync()


InformerKey = tuple[Resource, str | None, str | None, str | None]


class InformerFactory:
    """Shared informers: one per (resource, namespace, label selector, field selector).

    Controllers that watch the same kind share one cache and one watch. :meth:`run` runs every
    informer created so far and starts those created later.
    """

    def __init__(
        self,
        client: Client,
        *,
        default_transform: Transform | None = strip_managed_fields,
        resync_period: float | None = None,
        settings: ReflectorSettings | None = None,
    ) -> None:
        self.client = client
        self._default_transform = default_transform
        self._resync_period = resync_period
        self._settings = settings
        self._informers: dict[InformerKey, Informer] = {}
        self._task_group: TaskGroup | None = None

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Informer:
        """The shared informer for this scope, created (and started, if running) on first use."""
        key: InformerKey = (resource, namespace or None, label_selector, field_selector)
        informer = self._informers.get(key)
        if informer is None:
            informer = Informer(
                self.client,
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                transform=self._default_transform,
                resync_period=self._resync_period,
                settings=self._settings,
            )
            self._informers[key] = informer
            if self._task_group is not None:
                self._task_group.start_soon(informer.run, name=f"informer {resource}")
        return informer

    @property
    def informers(self) -> list[Informer]:
        """Every informer created so far."""
        return list(self._informers.values())

    async def run(self) -> None:
        """Run all informers until cancelled (new ones start as they are created)."""
        if self._task_group is not None:
            raise RuntimeError("the informer factory is already running")
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            try:
                for informer in self._informers.values():
                    tg.start_soon(informer.run, name=f"informer {informer.resource}")
                await anyio.sleep_forever()
            finally:
                self._task_group = None

    async def wait_for_sync(self, timeout: float) -> bool:  # noqa: ASYNC109 - WaitForCacheSync
        """Wait until every informer created so far has synced, or *timeout* seconds pass."""
        with anyio.move_on_after(timeout):
            for informer in self.informers:
                await informer.wait_for_sync()
        return all(informer.has_synced for informer in self.informers)
