"""Kubernetes Events (core/v1) recorded without ever blocking a reconcile.

:meth:`EventRecorder.event` only puts the event on a bounded in-memory queue (dropping it, and
counting the drop, when the queue is full); :meth:`EventRecorder.run` writes them. Repeats of
the same event (same object, type, reason, message and source) are aggregated in-process, as
client-go's ``EventCorrelator`` does: the first one is created, later ones bump ``count``,
``lastTimestamp`` and ``series`` (count and last observed time) on the existing Event
instead of creating new objects. A spam filter limits each object to a burst of 25 events,
refilled at one per five minutes (client-go's defaults in ``tools/record/events_cache.go``);
events beyond it are dropped and counted (``gpustack_events_dropped_total{reason=
"rate_limited"}``), so a reconcile failing in a loop cannot flood the API server.
"""

from __future__ import annotations

import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import anyio
import structlog

from gpustack_operator.runtime import metrics
from gpustack_operator.runtime.client import ApiError, NotFound
from gpustack_operator.runtime.fence import LeaseNotHeld, WriteFence
from gpustack_operator.runtime.resources import EVENTS, Resource

__all__ = ["EventClient", "EventRecorder", "EventType"]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
EventType = Literal["Normal", "Warning"]
_MAX_MESSAGE = 1024  # the API server rejects longer event messages
SPAM_BURST = 25
"""Events one object may get at once (client-go's ``defaultSpamBurst``)."""
SPAM_QPS = 1.0 / 300.0
"""Refill rate of an object's event budget per second (client-go's ``defaultSpamQPS``)."""


class EventClient(Protocol):
    """The verbs the recorder needs (``Client`` provides them); *fence* is checked at the
    last moment before the request is sent (docs/runtime.md, "Write fence")."""

    async def create(
        self,
        res: Resource,
        body: JSON,
        namespace: str | None = None,
        *,
        fence: WriteFence | None = None,
    ) -> JSON: ...

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: JSON | list[Any],
        *,
        namespace: str | None = None,
        fence: WriteFence | None = None,
    ) -> JSON: ...


@dataclass
class _Pending:
    involved: JSON
    type: EventType
    reason: str
    message: str
    at: datetime


@dataclass
class _Seen:
    name: str
    namespace: str
    count: int


def _timestamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_timestamp(at: datetime) -> str:
    """An RFC 3339 time with microseconds (the API's ``MicroTime``, used by ``series``)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _SpamFilter:
    """A token bucket per involved object; bounded (least recently used objects forgotten)."""

    def __init__(self, burst: int, qps: float, size: int, clock: Callable[[], float]) -> None:
        self._burst = burst
        self._qps = qps
        self._size = size
        self._clock = clock
        self._buckets: OrderedDict[tuple[str, ...], tuple[float, float]] = OrderedDict()

    def allow(self, key: tuple[str, ...]) -> bool:
        now = self._clock()
        tokens, updated = self._buckets.pop(key, (float(self._burst), now))
        tokens = min(float(self._burst), tokens + (now - updated) * self._qps)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self._size:
            self._buckets.popitem(last=False)
        return allowed


class EventRecorder:
    """Records Events about objects on behalf of *component* (``source.component``)."""

    def __init__(
        self,
        client: EventClient,
        component: str,
        *,
        host: str | None = None,
        queue_size: int = 1000,
        cache_size: int = 4096,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        spam_burst: int = SPAM_BURST,
        spam_qps: float = SPAM_QPS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.component = component
        self.host = host or socket.gethostname()
        self._wall_clock = wall_clock
        self._send, self._receive = anyio.create_memory_object_stream[_Pending](queue_size)
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._cache_size = cache_size
        self._spam = _SpamFilter(spam_burst, spam_qps, cache_size, clock)
        self._accepted = 0  # events queued so far
        self._finished = 0  # events written or failed so far
        self._idle: anyio.Event | None = None
        self.written = 0
        """Events created or updated so far (for tests and diagnostics)."""
        self.fence: WriteFence = WriteFence()
        """Events pass it before they are sent (the manager sets its own): a replica whose
        Lease is not known held drops them (docs/runtime.md, "Write fence")."""

    def event(
        self,
        obj: Mapping[str, Any],
        type_: EventType,
        reason: str,
        message: str,
        *,
        resource: Resource | None = None,
    ) -> None:
        """Queue an event about *obj*; never blocks, never raises.

        List items from the API server carry no ``kind``/``apiVersion``: pass *resource*
        so the event's ``involvedObject`` names the kind.
        """
        meta = obj.get("metadata") or {}
        involved: JSON = {
            "apiVersion": obj.get("apiVersion") or (resource.api_version if resource else ""),
            "kind": obj.get("kind") or (resource.kind if resource else ""),
            "name": meta.get("name", ""),
        }
        for field, source in (
            ("namespace", "namespace"),
            ("uid", "uid"),
            ("resourceVersion", "resourceVersion"),
        ):
            if meta.get(source):
                involved[field] = meta[source]
        subject = tuple(str(involved.get(k) or "") for k in ("uid", "kind", "namespace", "name"))
        if not self._spam.allow(subject):
            metrics.EVENTS_DROPPED.labels("rate_limited").inc()
            log.debug("event dropped: too many events for this object", reason=reason)
            return
        pending = _Pending(involved, type_, reason, message[:_MAX_MESSAGE], self._wall_clock())
        try:
            self._send.send_nowait(pending)
            self._accepted += 1
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            metrics.EVENTS_DROPPED.labels("queue_full").inc()
            log.debug("event dropped: the recorder's queue is full", reason=reason)

    def normal(self, obj: Mapping[str, Any], reason: str, message: str, **kw: Any) -> None:
        self.event(obj, "Normal", reason, message, **kw)

    def warning(self, obj: Mapping[str, Any], reason: str, message: str, **kw: Any) -> None:
        self.event(obj, "Warning", reason, message, **kw)

    def pending(self) -> int:
        """Events queued or being written."""
        return self._accepted - self._finished

    async def flush(self, timeout: float) -> bool:  # noqa: ASYNC109 - a bound, not a deadline API
        """Wait up to *timeout* seconds for queued events to be written; True when done.

        Used at shutdown so the last failures' Events are not lost; needs :meth:`run`.
        """
        with anyio.move_on_after(timeout):
            while self.pending():
                self._idle = anyio.Event()
                await self._idle.wait()
        return self.pending() == 0

    async def run(self) -> None:
        """Write queued events until cancelled; a failed write is logged and dropped."""
        async for pending in self._receive:
            try:
                await self._write(pending)
            except LeaseNotHeld:  # the fence closed while the event waited to be sent
                metrics.EVENTS_DROPPED.labels("not_leader").inc()
                log.debug("event dropped: the Lease is not known held", reason=pending.reason)
            except Exception as err:  # an Event is best-effort: never stop the manager for one
                metrics.EVENTS_DROPPED.labels("write_failed").inc()
                log.warning(
                    "could not write an event",
                    reason=pending.reason,
                    object=pending.involved.get("name"),
                    error=str(err) or type(err).__name__,
                    exc_info=not isinstance(err, ApiError),
                )
            finally:
                self._finished += 1
                if self._idle is not None and not self.pending():
                    self._idle.set()

    async def _write(self, pending: _Pending) -> None:
        involved = pending.involved
        if not self.fence.held():
            metrics.EVENTS_DROPPED.labels("not_leader").inc()
            log.debug("event dropped: the Lease is not known held", reason=pending.reason)
            return
        # Events of cluster-scoped objects live in "default", as kubectl expects.
        namespace = str(involved.get("namespace") or "default")
        identity = (
            str(involved.get("uid") or ""),
            str(involved.get("kind")),
            namespace,
            str(involved.get("name")),
            pending.type,
            pending.reason,
            pending.message,
        )
        stamp = _timestamp(pending.at)
        seen = self._seen.get(identity)
        if seen is not None:
            seen.count += 1
            try:
                await self.client.patch(
                    EVENTS,
                    seen.name,
                    {
                        "count": seen.count,
                        "lastTimestamp": stamp,
                        "series": {
                            "count": seen.count,
                            "lastObservedTime": _micro_timestamp(pending.at),
                        },
                    },
                    namespace=seen.namespace,
                    fence=self.fence,
                )
                self._seen.move_to_end(identity)
                self.written += 1
                return
            except NotFound:
                del self._seen[identity]  # expired on the server (event TTL): start anew
        name = f"{involved.get('name')}.{time.time_ns():x}"
        body: JSON = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": pending.reason,
            "message": pending.message,
            "type": pending.type,
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        await self.client.create(EVENTS, body, namespace, fence=self.fence)
        self.written += 1
        self._seen[identity] = _Seen(name, namespace, 1)
        while len(self._seen) > self._cache_size:
            self._seen.popitem(last=False)
