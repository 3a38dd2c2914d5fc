"""The one place the transport reaches into aiohttp's private API, kept in one module.

aiohttp keeps a kept-alive connection's parser running while the connection waits in the
pool: bytes a server sends after a complete answer (a stray or late second answer) are
parsed and queued, and the next request on that connection receives them as its answer.
:class:`OneAnswerHandler` closes such a connection instead (docs/runtime.md, "Transport").
It also marks a connection not reusable the moment an answer's head is refused: a short
body is read, and the connection back in the pool, before the caller sees the head.
It subclasses ``aiohttp.client_proto.ResponseHandler`` and is installed through the
connector's ``_factory`` attribute, and it reads the handler's ``_payload`` (aiohttp 3.14);
``tests/unit/runtime/test_aiohttpinternals.py`` fails when an upgrade renames or changes
them, so such an upgrade is caught before release.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import structlog
from aiohttp.client_proto import ResponseHandler
from aiohttp.http import RawResponseMessage
from aiohttp.streams import StreamReader

__all__ = ["OneAnswerHandler", "guarded_connector"]

log = structlog.get_logger(__name__)


class OneAnswerHandler(ResponseHandler):
    """A connection's protocol that accepts one final answer per request.

    Between the end of that answer and the next request (:meth:`set_response_params`), any
    byte received means the server is out of step: the connection is closed, never handed
    to another request. An answer whose head *refuse* names a reason for (a coding the
    transport does not accept) closes the connection once it is released.
    """

    _final_answer = False

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        refuse: Callable[[Mapping[str, str]], str | None],
    ) -> None:
        super().__init__(loop)
        self._refuse = refuse

    def set_response_params(self, **kwargs: Any) -> None:
        self._final_answer = False
        super().set_response_params(**kwargs)

    def feed_data(self, data: tuple[RawResponseMessage, StreamReader], size: int = 0) -> None:
        message = data[0]
        if message.code >= 200:  # 1xx answers are interim; the final one follows
            self._final_answer = True
        if self._refuse(message.headers) is not None:
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


def guarded_connector(
    refuse: Callable[[Mapping[str, str]], str | None], **kwargs: Any
) -> aiohttp.TCPConnector:
    """An ``aiohttp.TCPConnector`` (*kwargs* as its own) whose connections use
    :class:`OneAnswerHandler` with *refuse*. Call it inside the running event loop."""
    connector = aiohttp.TCPConnector(**kwargs)
    handler = functools.partial(OneAnswerHandler, loop=asyncio.get_running_loop(), refuse=refuse)
    connector._factory = handler  # type: ignore[assignment]
    return connector
