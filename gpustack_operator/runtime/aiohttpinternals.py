"""The one place the transport reaches into aiohttp's private API, kept in one module.

aiohttp keeps a kept-alive connection's parser running while the connection waits in the
pool: bytes a server sends after a complete answer (a stray or late second answer) are
parsed and queued, and the next request on that connection receives them as its answer.
:class:`OneAnswerHandler` closes such a connection instead (docs/runtime.md, "Transport").
It also marks a connection not reusable the moment an answer's head is refused (a status
code that is no final answer, a coding the transport does not accept): a short body is
read, and the connection back in the pool, before the caller sees the head.
It also hands a framing error in the middle of a body (a malformed chunk) to the body's
reader at once; aiohttp left the reader waiting for the deadline. It subclasses
``aiohttp.client_proto.ResponseHandler`` and is installed through the connector's
``_factory`` attribute, and it reads the handler's ``_payload`` (aiohttp 3.14);
``tests/unit/runtime/test_aiohttpinternals.py`` fails when an upgrade renames or changes
them, so such an upgrade is caught before release.

:class:`GuardedConnector` overrides the connector's public ``connect`` to run the request's
last check (:data:`BEFORE_SEND`, the write fence) once a connection is in hand: in aiohttp
3.14 nothing awaits between ``connect`` returning and the request's head being written, so
no wait (the rate limiter, a credential refresh, connection set-up) falls after the check
(docs/runtime.md, "Write fence").
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import structlog
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from aiohttp.http import RawResponseMessage
from aiohttp.streams import StreamReader
from aiohttp.tracing import Trace

__all__ = ["BEFORE_SEND", "GuardedConnector", "OneAnswerHandler", "guarded_connector"]

log = structlog.get_logger(__name__)


class OneAnswerHandler(ResponseHandler):
    """A connection's protocol that accepts one final answer per request.

    Between the end of that answer and the next request (:meth:`set_response_params`), any
    byte received means the server is out of step: the connection is closed, never handed
    to another request. An answer whose head *refuse* (given the status code and headers)
    names a reason for closes the connection once it is released.
    """

    _final_answer = False

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        refuse: Callable[[int, Mapping[str, str]], str | None],
    ) -> None:
        super().__init__(loop)
        self._refuse = refuse

    def set_response_params(self, **kwargs: Any) -> None:
        self._final_answer = False
        super().set_response_params(**kwargs)

    def feed_data(self, data: tuple[RawResponseMessage, StreamReader], size: int = 0) -> None:
        message = data[0]
        if message.code == 101 or not 100 <= message.code < 200:
            self._final_answer = True  # aiohttp skips the other 1xx: interim, the final follows
        if self._refuse(message.code, message.headers) is not None:
            self.force_close()  # the caller raises; the connection must not be reused
        super().feed_data(data, size)

    def data_received(self, data: bytes) -> None:
        if data and self._final_answer and (self._payload is None or self._payload.is_eof()):
            log.warning("api_bytes_after_answer_closing_connection", received=len(data))
            self.force_close()
            if self.transport is not None:
                self.transport.close()
            return
        super().data_received(data)
        self._fail_the_body_on_a_framing_error()

    def _fail_the_body_on_a_framing_error(self) -> None:
        """aiohttp records a parse error in the middle of a body (a malformed chunk) on the
        connection and closes it, but the body's reader learns of it only if the parser
        complains again at end of input, which llhttp, already failed, does not: the reader
        waited for the request's deadline. Hand the error to the reader now."""
        error = self.exception()
        payload = self._payload
        if (
            error is not None
            and payload is not None
            and not payload.is_eof()
            and payload.exception() is None
        ):
            broken = aiohttp.ClientPayloadError(f"the answer's body broke off: {error}")
            broken.__cause__ = error  # the transport finds the parser's complaint here
            payload.set_exception(broken, error)


BEFORE_SEND: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "before_send", default=None
)
"""The check of the request being made in this task (set by the transport around one
request): it runs once the connection is ready, before any byte of the request is written;
raising refuses the request."""


class GuardedConnector(aiohttp.TCPConnector):
    """A connector that runs :data:`BEFORE_SEND` once it holds the connection.

    The check comes after every wait of the request (the pool, DNS, TCP, TLS, a proxy's
    CONNECT) and before its head is written. A refused request hands the connection back to
    the pool unused: nothing was written on it.
    """

    async def connect(
        self,
        req: ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 - aiohttp's signature
    ) -> Connection:
        connection = await super().connect(req, traces, timeout)
        check = BEFORE_SEND.get()
        if check is not None:
            try:
                check()
            except BaseException:
                connection.release()
                raise
        return connection


def guarded_connector(
    refuse: Callable[[int, Mapping[str, str]], str | None], **kwargs: Any
) -> GuardedConnector:
    """A :class:`GuardedConnector` (*kwargs* as ``aiohttp.TCPConnector``'s) whose connections
    use :class:`OneAnswerHandler` with *refuse*. Call it inside the running event loop."""
    connector = GuardedConnector(**kwargs)
    handler = functools.partial(OneAnswerHandler, loop=asyncio.get_running_loop(), refuse=refuse)
    connector._factory = handler  # type: ignore[assignment]
    return connector
