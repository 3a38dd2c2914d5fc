"""One WATCH response of the simulated API server: filtering, framing and stream life.

Events arrive from the store through a queue (registered together with the initial events,
so none is lost or repeated) and go out as newline-delimited JSON in chunked HTTP, flushed
per batch. The stream ends cleanly at ``timeoutSeconds`` or server shutdown, sends
BOOKMARKs when asked, marks the end of the initial events for WatchList clients, converts
objects to one-row Tables for ``kubectl get -w``, and can be cut abruptly by a fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gpustack_sim.apiserver import discovery
from gpustack_sim.apiserver.kinds import KindInfo
from gpustack_sim.apiserver.selectors import Matcher
from gpustack_sim.apiserver.store import ADDED, DELETED, MODIFIED, Event, key_of

# None in the queue ends the stream (server shutdown, or a watch too far behind).
WatchQueue = asyncio.Queue[Event | None]


def _dump(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode() + b"\n"


def bookmark_line(info: KindInfo, rv: int, *, initial_events_end: bool = False) -> bytes:
    """A BOOKMARK event: only the kind and the resourceVersion the client has caught up to."""
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_events_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": info.kind, "apiVersion": info.api_version, "metadata": meta}
    return _dump({"type": "BOOKMARK", "object": obj})


def error_line(status: dict[str, Any]) -> bytes:
    """An in-stream ERROR event carrying a ``Status`` (410 Expired for a too-old RV)."""
    return _dump({"type": "ERROR", "object": status})


def event_line(
    event: Event, info: KindInfo, namespace: str | None, matcher: Matcher | None
) -> bytes | None:
    """The line one watcher sees for ``event``, or None when it is filtered out.

    With a selector, an update that makes an object stop matching is sent as DELETED and one
    that makes it start matching as ADDED, as the real server does.
    """
    obj = event.obj
    if namespace and key_of(obj)[0] != namespace:
        return None
    event_type = event.type
    if matcher is not None:
        now = matcher(obj)
        if event_type == MODIFIED:
            before = event.prev is not None and matcher(event.prev)
            if now and not before:
                event_type = ADDED
            elif before and not now:
                event_type = DELETED
            elif not now:
                return None
        elif not now:
            return None
    if event_type == event.type:
        return event.line(info.api_version)
    return _dump({"type": event_type, "object": {**obj, "apiVersion": info.api_version}})


class WatchCut(ConnectionResetError):
    """Raised after a fault closed the connection mid-stream."""


@dataclass
class WatchStream:
    """The state of one watch response; :meth:`run` writes it until it ends."""

    request: web.Request
    response: web.StreamResponse
    info: KindInfo
    namespace: str | None
    matcher: Matcher | None
    queue: WatchQueue
    current_rv: Callable[[], int]
    closing: Callable[[], bool]
    bookmarks: bool = False
    bookmark_interval: float = 1.0
    timeout: float | None = None
    end_of_initial: int | None = None  # WatchList: RV for the initial-events-end bookmark
    cut: bool = False  # a fault: cut the connection ...
    cut_after: int | None = None  # ... after this many events (None: after the initial ones)
    write_delay: float = 0.0  # a fault: each write waits this long first (a slow connection)
    sent: int = 0
    _table_headers_sent: bool = field(default=False, init=False)

    async def run(self, initial: list[Event]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout if self.timeout is not None else None
        await self._send(initial)
        if self.end_of_initial is not None and self.bookmarks:
            await self._write(
                bookmark_line(self.info, self.end_of_initial, initial_events_end=True)
            )
        if self.cut and self.cut_after is None:
            self._cut()
        last_bookmark = loop.time()
        while not self.closing():
            now = loop.time()
            if deadline is not None and now >= deadline:
                break
            wait = 30.0
            if self.bookmarks:
                wait = max(0.0, last_bookmark + self.bookmark_interval - now)
            if deadline is not None:
                wait = min(wait, deadline - now)
            if self.queue.empty():
                try:
                    first = await asyncio.wait_for(self.queue.get(), timeout=wait)
                except TimeoutError:
                    # A bookmark says every event up to its resourceVersion was sent, so it
                    # goes out only with nothing queued: sent ahead of queued events (a wait
                    # of 0 times out whatever the queue holds), a stream that then ended lost
                    # them for good, the client resuming after them.
                    if (
                        self.bookmarks
                        and self.queue.empty()
                        and loop.time() >= last_bookmark + self.bookmark_interval
                    ):
                        await self._write(bookmark_line(self.info, self.current_rv()))
                        last_bookmark = loop.time()
                    continue
            else:
                first = self.queue.get_nowait()
            if first is None:
                break
            batch = [first]
            ended = False
            while not self.queue.empty():
                nxt = self.queue.get_nowait()
                if nxt is None:  # shutdown, or the watch fell too far behind
                    ended = True
                    break
                batch.append(nxt)
            await self._send(batch)
            if ended:
                break
        with contextlib.suppress(ConnectionError):
            await self.response.write_eof()

    async def _write(self, data: bytes) -> None:
        if self.write_delay:
            await asyncio.sleep(self.write_delay)
        await self.response.write(data)

    async def _send(self, events: list[Event]) -> None:
        """Write the lines this watcher sees, in one chunk; cut when a fault says so."""
        chunk = bytearray()
        cut_now = False
        for event in events:
            line = event_line(event, self.info, self.namespace, self.matcher)
            if line is None:
                continue
            chunk += self._as_table(line) if self._wants_table else line
            self.sent += 1
            if self.cut and self.cut_after is not None and self.sent >= self.cut_after:
                cut_now = True
                break
        if chunk:
            await self._write(bytes(chunk))
        if cut_now:
            self._cut()

    @property
    def _wants_table(self) -> bool:
        return "as=Table" in self.request.headers.get("Accept", "")

    def _as_table(self, line: bytes) -> bytes:
        """``kubectl get -w`` asks for Tables: one row per event, headers in the first only."""
        event = json.loads(line)
        table = discovery.maybe_table(self.request, self.info, event["object"])
        if table is None:
            return line
        if self._table_headers_sent:
            table.pop("columnDefinitions", None)
        self._table_headers_sent = True
        return _dump({"type": event["type"], "object": table})

    def _cut(self) -> None:
        """Close the connection without ending the chunked body (an abrupt watch drop)."""
        transport = self.request.transport
        if transport is not None:
            transport.abort()
        raise WatchCut("watch cut by an injected fault")
