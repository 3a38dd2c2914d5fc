"""Fan-out of change events to watch streams, with a bounded buffer per client.

Publishing is synchronous and O(watchers): informer handlers call :meth:`Hub.publish` on the
event loop, so every watcher sees the events of a cluster in the order its informers delivered
them. Each :class:`Subscription` holds at most ``capacity`` encoded lines and ``max_bytes``
bytes (an empty buffer always takes one line, however big). A client that falls further
behind is marked overflowed and its stream is ended with an error line
(:data:`OVERFLOW_REASON`) instead of letting memory grow. Nobody else waits for it.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from gpustack_operator.gateway.metrics import EVENTS, WATCH_DROPPED, WATCHERS

__all__ = [
    "DEFAULT_MAX_BYTES",
    "OVERFLOW_REASON",
    "Event",
    "EventType",
    "Hub",
    "Subscription",
    "encode",
]

JSON = dict[str, Any]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
OVERFLOW_REASON: Final = "WatcherTooSlow"
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024


def encode(payload: JSON) -> bytes:
    """One newline-delimited JSON line."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=False).encode() + b"\n"


@dataclass(frozen=True)
class Event:
    """A change of one object of one topic (``clusters``, ``pools`` or a Kueue kind plural)."""

    type: EventType
    topic: str
    cluster: str
    object: JSON

    def payload(self) -> JSON:
        return {"type": self.type, "cluster": self.cluster, "object": self.object}


class Subscription:
    """One watcher's view: a topic, optionally one cluster, and a bounded line buffer."""

    def __init__(
        self, topic: str, cluster: str | None, capacity: int, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        if capacity < 1:
            raise ValueError(f"a watch buffer needs room for at least one event, not {capacity}")
        self.topic = topic
        self.cluster = cluster
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._bytes = 0
        self.overflowed = False
        self.closed = False
        self.on_overflow: Callable[[], None] | None = None
        """Called once when the buffer overflows (the stream writer cancels its write)."""
        self._buffer: deque[bytes] = deque()
        self._wakeup = asyncio.Event()

    def matches(self, event: Event) -> bool:
        return event.topic == self.topic and self.cluster in (None, event.cluster)

    def __len__(self) -> int:
        return len(self._buffer)

    def offer(self, line: bytes) -> None:
        """Queue *line*; past ``capacity`` the subscription overflows and takes no more."""
        if self.closed:
            return
        over_bytes = bool(self._buffer) and self._bytes + len(line) > self.max_bytes
        if len(self._buffer) >= self.capacity or over_bytes:
            self.overflowed = True
            self._buffer.clear()
            self._bytes = 0
            WATCH_DROPPED.inc()
            self.close()
            if self.on_overflow is not None:
                self.on_overflow()
            return
        self._buffer.append(line)
        self._bytes += len(line)
        self._wakeup.set()

    def close(self) -> None:
        """End the stream: :meth:`next_batch` returns what is left, then an empty list."""
        self.closed = True
        self._wakeup.set()

    async def next_batch(self) -> list[bytes]:
        """Wait for lines and take all of them; ``[]`` once closed and drained."""
        while not self._buffer and not self.closed:
            self._wakeup.clear()
            await self._wakeup.wait()
        batch = list(self._buffer)
        self._buffer.clear()
        self._bytes = 0
        return batch


class Hub:
    """The registry of subscriptions; see the module docstring."""

    def __init__(self, capacity: int = 1024, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._subscriptions: set[Subscription] = set()

    def subscribe(self, topic: str, cluster: str | None = None) -> Subscription:
        sub = Subscription(topic, cluster, self.capacity, self.max_bytes)
        self._subscriptions.add(sub)
        WATCHERS.set(len(self._subscriptions))
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        sub.close()
        self._subscriptions.discard(sub)
        WATCHERS.set(len(self._subscriptions))

    def publish(self, event: Event) -> None:
        """Hand *event* to every matching subscription (encoded once)."""
        line: bytes | None = None
        for sub in list(self._subscriptions):
            if not sub.matches(event):
                continue
            if line is None:
                line = encode(event.payload())
                EVENTS.labels(topic=event.topic).inc()
            sub.offer(line)

    def close_cluster(self, cluster: str) -> None:
        """End the streams watching only *cluster* (it was removed: nothing more will come)."""
        for sub in list(self._subscriptions):
            if sub.cluster == cluster:
                sub.close()

    def close(self) -> None:
        """End every stream (gateway shutdown)."""
        for sub in list(self._subscriptions):
            sub.close()

    def __len__(self) -> int:
        return len(self._subscriptions)
