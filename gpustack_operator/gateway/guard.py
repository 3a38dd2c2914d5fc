"""Connection limits of the gateway's HTTP server: header-read and idle timeouts, and a cap on
open connections (docs/worker-gateway.md, "Security").

aiohttp has one keep-alive timer and no bound on connections, so a client that opens many
sockets and sends its headers slowly (or not at all) holds them until the open-files limit.
:class:`ConnectionGuard` wraps the server's protocol factory. Each connection is in one of three
states:

- *waiting for headers* (a new connection, or bytes of a next request arrived): closed after
  ``header_timeout`` seconds unless a request starts;
- *idle* (a response was sent, no byte since): closed after ``idle_timeout`` seconds;
- *in a request* (the request middleware entered): no deadline; watch streams live here.

A connection over ``max_connections`` gets ``503`` and is closed before it is read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, cast

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from gpustack_operator.gateway.metrics import (
    CONNECTIONS,
    CONNECTIONS_REFUSED,
    CONNECTIONS_TIMED_OUT,
)

__all__ = ["ConnectionGuard", "ConnectionLimits", "GuardedRunner"]

log = structlog.get_logger(__name__)

_BUSY: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 52\r\n\r\nworker-gateway: too many connections; retry shortly\n"
)


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float = 10.0
    """Seconds a connection may take to send a request's headers."""
    idle_timeout: float = 120.0
    """Seconds a kept-alive connection may wait for its next request."""
    max_connections: int = 1024
    """Open connections at most; more are answered 503 and closed."""


class _Connection(asyncio.Protocol):
    """Forwards to aiohttp's handler and enforces the deadlines of the module docstring."""

    def __init__(self, guard: ConnectionGuard, inner: RequestHandler) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.in_request = 0
        self.waiting_for_headers = False
        self._timer: asyncio.TimerHandle | None = None
        self._admitted = False

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio subclass
        self.transport = transport
        if len(self.guard.connections) >= self.guard.limits.max_connections:
            CONNECTIONS_REFUSED.inc()
            log.warning("too_many_connections", limit=self.guard.limits.max_connections)
            transport.write(_BUSY)
            transport.close()
            return
        self._admitted = True
        self.guard.connections[self.inner] = self
        CONNECTIONS.set(len(self.guard.connections))
        self._expect_headers()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._admitted:
            return
        if not self.in_request and not self.waiting_for_headers:
            self._expect_headers()
        self.inner.data_received(data)

    def eof_received(self) -> None:
        if self._admitted:
            self.inner.eof_received()

    def pause_writing(self) -> None:
        if self._admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self._admitted:
            self.inner.resume_writing()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_timer()
        if not self._admitted:
            return
        self.guard.connections.pop(self.inner, None)
        CONNECTIONS.set(len(self.guard.connections))
        self.inner.connection_lost(exc)

    # --- request tracking -------------------------------------------------------------------

    def request_started(self) -> None:
        self.in_request += 1
        self.waiting_for_headers = False
        self._cancel_timer()

    def request_ended(self) -> None:
        self.in_request -= 1
        if not self.in_request:
            self._arm(self.guard.limits.idle_timeout, "idle")

    def _expect_headers(self) -> None:
        self.waiting_for_headers = True
        self._arm(self.guard.limits.header_timeout, "header")

    def _arm(self, seconds: float, what: str) -> None:
        self._cancel_timer()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(seconds, self._expire, what)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, what: str) -> None:
        self._timer = None
        if self.in_request or self.transport is None or self.transport.is_closing():
            return
        CONNECTIONS_TIMED_OUT.labels(timeout=what).inc()
        log.debug("connection_timed_out", timeout=what)
        self.transport.close()


class ConnectionGuard:
    """The protocol factory handed to the event loop; see the module docstring."""

    def __init__(self, server: web.Server, limits: ConnectionLimits) -> None:
        self.server = server
        self.limits = limits
        self.connections: dict[RequestHandler, _Connection] = {}

    def __call__(self) -> _Connection:
        return _Connection(self, self.server())


class GuardedRunner(web.AppRunner):
    """An AppRunner whose sites accept connections through a :class:`ConnectionGuard`."""

    def __init__(self, app: web.Application, limits: ConnectionLimits, **kwargs: object) -> None:
        self.guard: ConnectionGuard | None = None
        self._limits = limits
        app.middlewares.insert(0, self._track)
        super().__init__(app, **kwargs)  # type: ignore[arg-type]

    @web.middleware
    async def _track(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        connection = self.guard.connections.get(request.protocol) if self.guard else None
        if connection is None:
            return await handler(request)
        connection.request_started()
        try:
            return await handler(request)
        finally:
            connection.request_ended()

    @property
    def server(self) -> ConnectionGuard | None:  # type: ignore[override]
        inner = super().server
        if inner is None:
            return None
        if self.guard is None or self.guard.server is not inner:
            self.guard = ConnectionGuard(inner, self._limits)
        return self.guard
