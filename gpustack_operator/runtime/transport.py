"""HTTP/1.1 to the API server over aiohttp: one session, bounded answers, typed failures.

aiohttp parses the answers (its C parser, llhttp), keeps connections alive, verifies TLS and
speaks through a proxy; this module adds what the client needs on top (docs/runtime.md,
"Transport"):

- **bounds** (:class:`Limits`): the largest one-shot body, the largest watch line, the
  largest head line and the most headers. Exceeding one raises :class:`ResponseTooLarge`
  and closes the connection; nothing grows past the bound;
- **strict framing**: a status code that is no final answer (outside 200-599; 1xx other than
  101 are interim answers, skipped), a transfer coding other than ``chunked``, a content
  coding (none is asked for), a malformed chunk (raised when it arrives) or bytes after a
  complete answer (``runtime.aiohttpinternals``) end the exchange with
  :class:`ProtocolViolation`, and the connection is not reused;
- **header values checked before anything is sent** (:class:`UnsendableRequest`);
- **a last check per request** (*before_send*, the write fence): run once the connection is
  ready, after every wait, before any byte is written; raising refuses the request;
- **every failure typed**: aiohttp's exceptions become :class:`ApiUnavailable` subclasses.

Requests are never resent, with one exception aiohttp makes: an idempotent request (GET,
PUT, DELETE) whose kept-alive connection the server had closed while idle is sent once more
on a new connection; POST and PATCH never are.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, NoReturn

import aiohttp
import structlog
from aiohttp import http_exceptions
from yarl import URL

from .aiohttpinternals import BEFORE_SEND, guarded_connector
from .errors import (
    ApiUnavailable,
    ProtocolViolation,
    ResponseTooLarge,
    UnsendableRequest,
    WatchInterrupted,
)

__all__ = ["Answer", "Limits", "StreamedAnswer", "Transport"]

log = structlog.get_logger(__name__)

_MIB: Final = 1 << 20
_UNSAFE_HEADER_VALUE: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""Control characters (all but horizontal tab): a CR/LF would start a header of its own."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds on what the API server may send (docs/runtime.md, "Bounds")."""

    max_body_bytes: int = 256 * _MIB
    """Largest one-shot body (an unpaged LIST of tens of thousands of objects fits)."""
    max_watch_line_bytes: int = 16 * _MIB
    """Largest watch event (one object; etcd stores at most 1.5 MiB per object), and the
    most whitespace (blank lines) a watch may send between two events."""
    watch_loop_budget: float = 0.005
    """Longest a watch stream keeps the event loop before handing it back (seconds): a
    flood of blank lines or of tiny events shares the loop with Lease renewals."""
    max_head_line_bytes: int = 8190
    """Largest status line and header line (aiohttp's ``max_line_size``/``max_field_size``)."""
    max_headers: int = 128
    """Most header lines in one answer (the API server sends about ten)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One complete answer: status, headers (case-insensitive names) and the whole body."""

    status_code: int
    reason_phrase: str
    headers: Mapping[str, str]
    content: bytes


class StreamedAnswer:
    """A streamed answer: status and headers read, the body read as the caller iterates."""

    def __init__(self, response: aiohttp.ClientResponse, where: str, limits: Limits) -> None:
        self._response = response
        self._where = where
        self._limits = limits
        self.status_code = response.status
        self.reason_phrase = response.reason or ""
        self.headers: Mapping[str, str] = response.headers
        self.content = b""
        """Filled by :meth:`read` (an error answer's Status, read before mapping it)."""

    async def read(self) -> bytes:
        """Read the rest of the body (bounded like a one-shot body) into :attr:`content`."""
        self.content = await _read_body(self._response, self._where, self._limits)
        return self.content

    async def lines(self) -> AsyncIterator[bytes]:
        """The body's non-blank lines as they arrive (split at ``\\n``, without it); the
        last piece is handed out when the body ends. Bounded whatever the content
        (docs/runtime.md, "Bounds"):

        - a line longer than ``max_watch_line_bytes``, or more whitespace than that between
          two lines (blank lines are skipped, not handed out), raises
          :class:`ResponseTooLarge` and closes the stream;
        - the event loop is handed back whenever this stream (with the caller's work
          between lines) has run ``watch_loop_budget`` seconds since it last was, so a
          flood of blank lines or tiny events never holds it longer.

        A broken stream raises :class:`WatchInterrupted` (or :class:`ProtocolViolation`);
        a body that ends cleanly ends the iteration."""
        limit = self._limits.max_watch_line_bytes
        budget = self._limits.watch_loop_budget
        pending: list[bytes] = []
        pending_size = 0
        blank = 0  # whitespace read since the last line handed out
        content = self._response.content
        resumed = time.perf_counter()
        while True:
            if time.perf_counter() - resumed >= budget:
                await asyncio.sleep(0)
                resumed = time.perf_counter()
            try:
                chunk = await content.readany()
            except aiohttp.ClientError as exc:
                _raise_typed(exc, self._where, stream=True)
            if not chunk:
                break
            if not pending and chunk.isspace():  # blank lines only: one C-level test
                blank += len(chunk)
                if blank > limit:
                    self._too_long(blank, blank=True)
                continue
            if b"\n" not in chunk:
                pending.append(chunk)
                pending_size += len(chunk)
                if pending_size > limit:
                    self._too_long(pending_size)
                continue
            first, *middle, last = chunk.split(b"\n")
            if pending:
                pending.append(first)
                first = b"".join(pending)
                pending = []
                pending_size = 0
            for line in (first, *middle):
                if not line or line.isspace():
                    blank += len(line) + 1
                    if blank > limit:
                        self._too_long(blank, blank=True)
                else:
                    if len(line) > limit:
                        self._too_long(len(line))
                    blank = 0
                    yield line
                if time.perf_counter() - resumed >= budget:
                    await asyncio.sleep(0)
                    resumed = time.perf_counter()
            if last:
                pending.append(last)
                pending_size = len(last)
                if pending_size > limit:
                    self._too_long(pending_size)
        if pending:
            line = b"".join(pending)
            if not line.isspace():
                yield line

    def _too_long(self, size: int, *, blank: bool = False) -> NoReturn:
        self._response.close()
        what = "of blank lines without an event" if blank else "read without a line end"
        raise ResponseTooLarge(
            f"{self._where}: a watch event exceeds {self._limits.max_watch_line_bytes} bytes "
            f"({size} {what}); the stream is closed",
            reason="ResponseTooLarge",
        )


class Transport:
    """Keep-alive HTTP/1.1 to one API server (*server* is its URL, as in a kubeconfig).

    *ssl_context* is ``True`` for the default verification, or the kubeconfig's context (its
    CA, client certificate, or no verification where ``insecure-skip-tls-verify`` is set);
    *server_hostname* overrides the name checked in the server certificate (the kubeconfig's
    ``tls-server-name``); *proxy* is the kubeconfig's ``proxy-url`` (http or https). Build
    it inside the event loop that uses it.
    """

    def __init__(
        self,
        server: str,
        *,
        ssl_context: ssl.SSLContext | bool = True,
        server_hostname: str | None = None,
        proxy: str | None = None,
        limits: Limits | None = None,
    ) -> None:
        origin = URL(server)
        if origin.scheme not in ("http", "https") or not origin.host:
            raise ValueError(
                f"cannot use API server URL {server!r}: expected http(s)://host[:port]"
            )
        if proxy and URL(proxy).scheme not in ("http", "https"):
            raise ValueError(
                f"cannot use proxy-url {proxy!r}: only http:// and https:// proxies are "
                "supported; use an HTTP CONNECT proxy or remove proxy-url"
            )
        self._prefix = str(origin).rstrip("/")
        self._tls = origin.scheme == "https"
        self._server_hostname = server_hostname if self._tls and server_hostname else None
        self._proxy = proxy or None
        self.limits = limits or Limits()
        self._session = aiohttp.ClientSession(
            connector=guarded_connector(
                refused_answer,
                ssl=ssl_context if self._tls else False,
                limit=0,
                # The system's resolver in a worker thread: with aiodns installed aiohttp
                # would start a c-ares channel per client, with its own thread and an
                # inotify instance watching the resolver's configuration.
                resolver=aiohttp.ThreadedResolver(),
            ),
            skip_auto_headers=("Accept-Encoding",),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None),
            max_line_size=self.limits.max_head_line_bytes,
            max_field_size=self.limits.max_head_line_bytes,
            max_headers=self.limits.max_headers,
        )
        self._open_streams = 0
        self._closing = False

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        *,
        before_send: Callable[[], None] | None = None,
    ) -> Answer:
        """Send one request for *target* (``/api/v1/...?query``, already percent-encoded;
        the server's path prefix is added) and read the whole answer. *before_send* runs
        when the connection is ready, before anything is written (and again if aiohttp
        resends an idempotent request); what it raises refuses the request."""
        where = f"{method} {target.partition('?')[0]}"
        url = self._url(target, headers, where)
        try:
            with _checked_before_send(before_send):
                async with self._session.request(
                    method,
                    url,
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                    proxy=self._proxy,
                    server_hostname=self._server_hostname,
                ) as response:
                    _check_framing(response, where, self.limits)
                    content = await _read_body(response, where, self.limits)
                    return Answer(response.status, response.reason or "", response.headers, content)
        except aiohttp.ClientError as exc:
            _raise_typed(exc, where, stream=False)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        *,
        before_send: Callable[[], None] | None = None,
    ) -> AsyncIterator[StreamedAnswer]:
        """Send a request without a body and yield the answer once its head is read; the
        body is read as the caller iterates. The connection is the stream's until the block
        ends; a closed transport keeps it until then. *before_send* as for :meth:`request`."""
        where = f"{method} {target.partition('?')[0]}"
        url = self._url(target, headers, where)
        self._open_streams += 1
        try:
            try:
                with _checked_before_send(before_send):
                    response = await self._session.request(
                        method,
                        url,
                        headers=headers,
                        allow_redirects=False,
                        proxy=self._proxy,
                        server_hostname=self._server_hostname,
                    )
            except aiohttp.ClientError as exc:
                _raise_typed(exc, where, stream=False)
            try:
                _check_framing(response, where, self.limits)
                yield StreamedAnswer(response, where, self.limits)
            finally:
                response.close()  # a watch connection is not reused
        finally:
            self._open_streams -= 1
            if self._closing and not self._open_streams:
                await self._session.close()

    async def aclose(self) -> None:
        """No new requests; the session closes now, or when the last open stream ends (so
        closing at shutdown or after new credentials cuts no running watch)."""
        self._closing = True
        if not self._open_streams:
            await self._session.close()

    def _url(self, target: str, headers: Mapping[str, str], where: str) -> URL:
        if self._closing:
            raise ApiUnavailable(f"{where}: the client is closed", reason="ClientClosed")
        for name, value in headers.items():
            if _UNSAFE_HEADER_VALUE.search(value):
                raise UnsendableRequest(
                    f"{where}: header {name} holds a line break or control character; nothing "
                    "was sent. Check the credentials in the kubeconfig (token, exec plugin).",
                    reason="UnsendableRequest",
                )
        return URL(self._prefix + target, encoded=True)


@contextlib.contextmanager
def _checked_before_send(check: Callable[[], None] | None) -> Iterator[None]:
    """Hand *check* to the connector for the request made inside the block."""
    token = BEFORE_SEND.set(check)
    try:
        yield
    finally:
        BEFORE_SEND.reset(token)


FINAL_STATUS_CODES: Final = range(200, 600)
"""The status codes of a final answer. 1xx other than 101 are interim (aiohttp skips them);
101 switches protocols, which no request asks for; codes below 100 and from 600 are not
HTTP's."""


def refused_answer(code: int, headers: Mapping[str, str]) -> str | None:
    """Why an answer's head is refused, or None: its status code is no final answer (an
    interim 1xx passes), or a coding it uses is not accepted (only ``chunked`` framing is
    decoded, and no content coding was asked for: no ``Accept-Encoding`` is sent)."""
    if code not in FINAL_STATUS_CODES and (code == 101 or not 100 <= code < 200):
        return f"status code {code:03d}, which is no final answer (200-599)"
    coding = headers.get("Transfer-Encoding")
    if coding is not None and coding.strip().lower() != "chunked":
        return f"transfer coding {coding!r} (only chunked is accepted)"
    content_coding = headers.get("Content-Encoding")
    if content_coding is not None and content_coding.strip().lower() != "identity":
        return f"content coding {content_coding!r} (none was asked for)"
    return None


def _check_framing(response: aiohttp.ClientResponse, where: str, limits: Limits) -> None:
    """Refuse a status code that is no final answer, codings that were not asked for and a
    declared body beyond the bound."""
    refusal = refused_answer(response.status, response.headers)
    if refusal is not None:
        response.close()
        raise ProtocolViolation(f"{where}: the answer uses {refusal}", reason="ProtocolViolation")
    length = response.content_length
    if length is not None and length > limits.max_body_bytes:
        response.close()
        raise ResponseTooLarge(
            f"{where}: the answer announces {length} bytes, more than the "
            f"{limits.max_body_bytes} accepted",
            reason="ResponseTooLarge",
        )


async def _read_body(response: aiohttp.ClientResponse, where: str, limits: Limits) -> bytes:
    """The whole body, stopping with :class:`ResponseTooLarge` past ``max_body_bytes``."""
    if response.content_length is not None:  # at most max_body_bytes (_check_framing)
        return await response.read()
    pieces: list[bytes] = []
    size = 0
    while piece := await response.content.readany():
        size += len(piece)
        if size > limits.max_body_bytes:
            response.close()
            raise ResponseTooLarge(
                f"{where}: the answer's body exceeds {limits.max_body_bytes} bytes",
                reason="ResponseTooLarge",
            )
        pieces.append(piece)
    return b"".join(pieces)


def _raise_typed(exc: aiohttp.ClientError, where: str, *, stream: bool) -> NoReturn:
    """Map an aiohttp failure to the client's typed errors (docs/runtime.md, "Failure types")."""
    cause = _parser_error(exc)
    if isinstance(cause, http_exceptions.LineTooLong) or "Too many headers" in str(cause):
        raise ResponseTooLarge(
            f"{where}: the answer's head exceeds the bounds ({_first_line(cause)})",
            reason="ResponseTooLarge",
        ) from exc
    if cause is not None and "Not enough data" not in str(cause):
        raise ProtocolViolation(
            f"{where}: not a valid HTTP/1.1 answer ({_first_line(cause)})",
            reason="ProtocolViolation",
        ) from exc
    if stream:
        raise WatchInterrupted(
            f"{where}: the watch stream broke: {_first_line(exc)}", reason="WatchInterrupted"
        ) from exc
    raise ApiUnavailable(f"{where}: {_first_line(exc)}", reason="ConnectionFailed") from exc


def _parser_error(exc: BaseException) -> BaseException | None:
    """The parser's complaint behind *exc*, if it was one (aiohttp chains it as a cause)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, http_exceptions.HttpProcessingError) and not isinstance(
            seen, aiohttp.ClientResponseError
        ):
            inner = seen.__cause__
            if isinstance(inner, http_exceptions.HttpProcessingError):
                return inner
            return seen
        seen = seen.__cause__
    return None


def _first_line(exc: BaseException | None) -> str:
    """*exc*'s message on one line (aiohttp's parser errors span several), cut at 300."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]
