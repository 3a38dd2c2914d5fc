"""A lean keep-alive HTTP/1.1 transport for the client's one-shot requests.

Every write of the worker is one request (a server-side apply), thousands of them on a
large cluster. Through kr8s -> httpx -> httpcore each cost about 1.2-1.7 ms of CPU on the
client side (URL parsing and merging, per-read cancel scopes, the connection pool's scan of
every connection's state with a ``poll`` per connection and request, header validation),
more than the server took to answer. This transport sends the same request with a fraction
of that: one pre-split origin, one timeout per exchange, a stack of idle connections, and
the response read with ``asyncio.StreamReader`` (``Content-Length`` or chunked bodies).

Watches use :meth:`Http11Transport.stream`: a connection of their own, the body handed out
line by line as it arrives (a watch event is one JSON line), without httpx's per-read
cancel scopes and text decoding layers.

Scope, deliberately small: HTTP/1.1 only (what the API server speaks without ALPN h2), no
redirects (the API server sends none), no proxies (a kubeconfig ``proxy-url`` keeps the
httpx path). TLS and client certificates come from the same ``ssl.SSLContext`` kr8s builds
from the kubeconfig. What the transport raises
is :class:`TransportError` (connection refused, reset, truncated or malformed answer); the
client maps it to ``ApiUnavailable``, as it does httpx's transport errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

__all__ = ["Http11Transport", "RawResponse", "StreamedResponse", "TransportError"]

_MAX_HEAD: Final = 1 << 20
"""Largest status line + headers accepted (the API server sends a few hundred bytes)."""
_MAX_IDLE: Final = 32
"""Idle connections kept for reuse; more are closed when they come back."""
_RETRIED_METHODS: Final = frozenset({"GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"})


class TransportError(Exception):
    """No usable HTTP answer: the connection failed, broke or spoke something else."""


@dataclass(frozen=True, slots=True)
class RawResponse:
    """One complete answer: status, headers (names lower-cased, last value wins), body.

    The attribute names are httpx's, so the client decodes both kinds of answer alike."""

    status_code: int
    reason_phrase: str
    headers: Mapping[str, str]
    content: bytes


@dataclass(slots=True)
class StreamedResponse:
    """A streamed answer: status and headers read, the body still on the connection."""

    status_code: int
    reason_phrase: str
    headers: Mapping[str, str]
    _body: AsyncIterator[bytes] = field(repr=False)
    content: bytes = b""
    """Filled by :meth:`aread` (an error answer's Status, read before mapping it)."""

    async def aread(self) -> bytes:
        """Read the rest of the body into :attr:`content` (error answers are short)."""
        self.content = b"".join([chunk async for chunk in self._body])
        return self.content

    async def lines(self) -> AsyncIterator[bytes]:
        """The body split at ``\n`` as it arrives (without the newline); the last piece
        is handed out when the body ends. A connection that breaks raises
        :class:`TransportError`; a body that ends cleanly ends the iteration."""
        pending: list[bytes] = []
        async for chunk in self._body:
            if b"\n" not in chunk:
                pending.append(chunk)
                continue
            first, *middle, last = chunk.split(b"\n")
            if pending:
                pending.append(first)
                first = b"".join(pending)
                pending = []
            yield first
            for line in middle:
                yield line
            if last:
                pending.append(last)
        if pending:
            yield b"".join(pending)


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    reused: bool = False

    def usable(self) -> bool:
        """Still open on both sides (a server that closed an idle connection sent EOF)."""
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class Http11Transport:
    """Keep-alive HTTP/1.1 to one API server (*server* is its URL, as in a kubeconfig).

    *ssl_context* is used for ``https`` servers (``None`` there means the default
    verification); *server_hostname* overrides the name checked in the server certificate
    (the kubeconfig's ``tls-server-name``). Not thread-safe; one event loop.
    """

    def __init__(
        self,
        server: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        max_idle: int = _MAX_IDLE,
    ) -> None:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"cannot use API server URL {server!r}: expected http(s)://host[:port]"
            )
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._prefix = parts.path.rstrip("/")
        self._host_header = parts.netloc.rpartition("@")[2]
        if self._tls and ssl_context is None:
            ssl_context = ssl.create_default_context()
        self._ssl = ssl_context if self._tls else None
        self._server_hostname = (server_hostname or self._host) if self._tls else None
        self._idle: list[_Connection] = []
        self._max_idle = max_idle
        self._closed = False

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
    ) -> RawResponse:
        """Send one request for *target* (``/api/v1/...?query``, the server's path prefix is
        added) and read the whole answer. A reused connection that turns out closed before
        any answer byte is replaced and the request sent once more (not for POST)."""
        if self._closed:
            raise TransportError("the transport is closed")
        head = self._head(method, target, headers, body)
        while True:
            connection = await self._connection()
            try:
                response, keep = await self._exchange(connection, head, body, method)
            except _StaleConnection as exc:
                connection.close()
                if connection.reused and method in _RETRIED_METHODS:
                    continue  # the server closed it while idle: a fresh one
                raise TransportError(
                    f"{method} {target}: the server closed the connection without answering"
                ) from exc
            except BaseException:
                connection.close()  # half-read or cancelled: never reuse it
                raise
            if keep and not self._closed and len(self._idle) < self._max_idle:
                connection.reused = True
                self._idle.append(connection)
            else:
                connection.close()
            return response

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, target: str, headers: Mapping[str, str]
    ) -> AsyncIterator[StreamedResponse]:
        """Send a request without a body and yield the answer once its headers are read;
        the body is read as the caller iterates. The connection is the stream's alone and
        is closed when the block ends (a watch is not reused)."""
        if self._closed:
            raise TransportError("the transport is closed")
        connection = await self._connect()
        try:
            reader, writer = connection.reader, connection.writer
            try:
                writer.write(self._head(method, target, headers, None))
                await writer.drain()
                status, reason, answer_headers, _ = _parse_head(await reader.readuntil(b"\r\n\r\n"))
            except asyncio.IncompleteReadError as exc:
                raise TransportError("the server closed the connection without answering") from exc
            except asyncio.LimitOverrunError as exc:
                raise TransportError("the answer's status line or headers are too long") from exc
            except (OSError, ssl.SSLError) as exc:
                raise TransportError(f"connection failed: {exc!r}") from exc
            yield StreamedResponse(status, reason, answer_headers, _body(reader, answer_headers))
        finally:
            connection.close()

    async def aclose(self) -> None:
        """Close the idle connections; requests in flight close theirs when they end."""
        self._closed = True
        self.drop_idle()

    def drop_idle(self) -> None:
        """Close the idle connections (new credentials: the next requests connect anew)."""
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    # --- plumbing -------------------------------------------------------------------------

    def _head(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> bytes:
        lines = [f"{method} {self._prefix}{target} HTTP/1.1", f"Host: {self._host_header}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        text = "\r\n".join(lines) + "\r\n\r\n"
        if "\n" in target or "\r" in target:
            raise ValueError(f"line break in request target {target!r}")
        return text.encode("latin-1")

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if connection.usable():
                return connection
            connection.close()
        return await self._connect()

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._server_hostname,
                limit=_MAX_HEAD,
            )
        except (OSError, ssl.SSLError) as exc:
            raise TransportError(f"cannot connect to {self._host}:{self._port}: {exc!r}") from exc
        return _Connection(reader, writer)

    async def _exchange(
        self, connection: _Connection, head: bytes, body: bytes | None, method: str
    ) -> tuple[RawResponse, bool]:
        reader, writer = connection.reader, connection.writer
        try:
            writer.write(head + body if body else head)
            await writer.drain()
            try:
                raw_head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if not exc.partial:
                    raise _StaleConnection from exc
                raise
            status, reason, headers, http10 = _parse_head(raw_head)
            if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                content, complete = b"", True
            elif "chunked" in headers.get("transfer-encoding", "").lower():
                content, complete = b"".join([c async for c in _buffered_chunks(reader)]), True
            elif "content-length" in headers:
                length = _content_length(headers["content-length"])
                content, complete = await reader.readexactly(length), True
            else:
                content, complete = await reader.read(), False  # delimited by the close
        except (ConnectionResetError, BrokenPipeError) as exc:
            if connection.reused:
                raise _StaleConnection from exc
            raise TransportError(f"connection broke: {exc!r}") from exc
        except asyncio.IncompleteReadError as exc:
            raise TransportError(
                f"the answer ended early ({len(exc.partial)} of its bytes read)"
            ) from exc
        except asyncio.LimitOverrunError as exc:
            raise TransportError("the answer's status line or headers are too long") from exc
        except (OSError, ssl.SSLError) as exc:
            raise TransportError(f"connection failed: {exc!r}") from exc
        keep = complete and not http10 and "close" not in headers.get("connection", "").lower()
        return RawResponse(status, reason, headers, content), keep


class _StaleConnection(Exception):
    """A reused connection was closed by the server before it answered."""


def _parse_head(raw: bytes) -> tuple[int, str, dict[str, str], bool]:
    """Status code, reason, headers (lower-cased names) and whether it is HTTP/1.0."""
    try:
        text = raw.decode("latin-1")
        status_line, _, rest = text.partition("\r\n")
        version, code, reason = [*status_line.split(" ", 2), ""][:3]
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise ValueError(status_line)
        headers: dict[str, str] = {}
        for line in rest.split("\r\n"):
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise ValueError(line)
            headers[name.lower()] = value.strip()
    except ValueError as exc:
        raise TransportError(f"not an HTTP/1.1 answer: {raw[:200]!r}") from exc
    return int(code), reason, headers, version == "HTTP/1.0"


def _content_length(value: str) -> int:
    if not value.isdigit():
        raise TransportError(f"bad Content-Length {value!r}")
    return int(value)


_STREAM_READ: Final = 1 << 16


async def _body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
    """A streamed body's pieces as they arrive: chunked, ``Content-Length`` or to the close."""
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            async for data in _buffered_chunks(reader):
                yield data
        elif "content-length" in headers:
            remaining = _content_length(headers["content-length"])
            while remaining:
                piece = await reader.read(min(remaining, _STREAM_READ))
                if not piece:
                    raise asyncio.IncompleteReadError(b"", remaining)
                remaining -= len(piece)
                yield piece
        else:
            while piece := await reader.read(_STREAM_READ):
                yield piece
    except asyncio.IncompleteReadError as exc:
        raise TransportError("the stream ended in the middle of a message") from exc
    except asyncio.LimitOverrunError as exc:
        raise TransportError("a chunk size line is too long") from exc
    except (OSError, ssl.SSLError) as exc:
        raise TransportError(f"the stream broke: {exc!r}") from exc


_MAX_SIZE_LINE: Final = 4096


async def _buffered_chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A chunked body's data (RFC 9112 section 7.1), read 64 KiB at a time: every complete
    chunk in the buffer is handed out at once (joined), so a backlog of watch events, one
    chunk each, costs one read and one hand-over rather than two awaits per event. Trailers
    are read and dropped. Serves one-shot answers too: nothing follows an answer on a
    connection before the next request (no pipelining), so reading ahead loses nothing."""
    buffer = bytearray()
    position = 0
    while True:
        ready: list[bytes] = []
        done = False
        while True:
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                if len(buffer) - position > _MAX_SIZE_LINE:
                    raise TransportError("a chunk size line is too long")
                break
            size = _parse_chunk_size(bytes(buffer[position:line_end]))
            start = line_end + 2
            if size == 0:
                if buffer[start : start + 2] == b"\r\n":
                    done = True  # no trailers
                elif buffer.find(b"\r\n\r\n", line_end) >= 0:
                    done = True  # trailers, read and dropped
                break
            if len(buffer) - start < size + 2:
                break
            if buffer[start + size : start + size + 2] != b"\r\n":
                raise TransportError("a chunk does not end with CRLF")
            ready.append(bytes(buffer[start : start + size]))
            position = start + size + 2
        if ready:
            yield b"".join(ready)
        if done:
            return
        if position:
            del buffer[:position]
            position = 0
        data = await reader.read(_STREAM_READ)
        if not data:
            raise asyncio.IncompleteReadError(bytes(buffer), None)
        buffer += data


def _parse_chunk_size(size_line: bytes) -> int:
    try:
        size = int(size_line.split(b";", 1)[0].strip(), 16)
    except ValueError as exc:
        raise TransportError(f"bad chunk size {size_line[:40]!r}") from exc
    if size < 0:
        raise TransportError(f"bad chunk size {size_line[:40]!r}")
    return size
