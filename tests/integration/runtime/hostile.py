"""A scripted HTTP/1.1 server on 127.0.0.1 for the client's hostile-server tests.

``GET /version`` always gets a valid answer (``Client.connect`` asks for it); every other
request gets the next scripted reply: bytes written as they are, ``None`` to close the
connection after reading the request, or a coroutine function that writes what it likes.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

VERSION_BODY = b'{"major":"1","minor":"31","gitVersion":"v1.31.0"}'

Writer = Callable[[asyncio.StreamWriter], Awaitable[None]]
Reply = bytes | Writer | None


def answer(body: bytes = b"{}", *headers: str, status: str = "200 OK") -> bytes:
    """A well-formed answer with a ``Content-Length``."""
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", *headers]
    head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(*chunks: bytes, headers: tuple[str, ...] = ()) -> bytes:
    """A well-formed chunked answer carrying *chunks*."""
    head = ["HTTP/1.1 200 OK", "Content-Type: application/json", *headers]
    head.append("Transfer-Encoding: chunked")
    wire = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
    return ("\r\n".join(head) + "\r\n\r\n").encode() + wire + b"0\r\n\r\n"


@dataclass
class Received:
    """One request as the server read it."""

    connection: int
    request_line: str
    head: bytes
    body: bytes


@dataclass
class HostileServer:
    """Serves :attr:`replies` in order; records every request in :attr:`received`."""

    replies: list[Reply] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    connections: int = 0
    closed_by_client: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the client closes a connection the server still held open."""
    port: int = 0
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def targets(self) -> list[str]:
        """The request lines, ``/version`` left out."""
        return [r.request_line for r in self.received if not _is_version(r.request_line)]

    async def start(self, context: ssl.SSLContext | None = None) -> HostileServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=context)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed_by_client.set()
                    return
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
                self.received.append(Received(connection, request_line, head, body))
                if _is_version(request_line):
                    writer.write(answer(VERSION_BODY))
                    await writer.drain()
                    continue
                reply = self.replies.pop(0) if self.replies else answer(b"{}")
                if reply is None:
                    return
                if isinstance(reply, bytes):
                    writer.write(reply)
                    await writer.drain()
                else:
                    await reply(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_by_client.set()
        finally:
            writer.close()

    def write_kubeconfig(
        self, path: Path, *, server: str | None = None, token: str = "t0k", **cluster: object
    ) -> Path:
        """A kubeconfig for this server (or *server*), with *cluster* entries added."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "hostile",
            "clusters": [{"name": "hostile", "cluster": {"server": server or self.url, **cluster}}],
            "users": [{"name": "hostile", "user": {"token": token}}],
            "contexts": [{"name": "hostile", "context": {"cluster": "hostile", "user": "hostile"}}],
        }
        path.write_text(yaml.safe_dump(config))
        return path


def _is_version(request_line: str) -> bool:
    """``GET /version`` (kr8s asks for ``/version/``, through a proxy with the origin)."""
    parts = request_line.split(" ")
    return len(parts) == 3 and urlsplit(parts[1]).path.rstrip("/") == "/version"


async def hostile_server(context: ssl.SSLContext | None = None) -> AsyncIterator[HostileServer]:
    """Start a :class:`HostileServer`; the fixture body of the tests that use one."""
    server = await HostileServer().start(context)
    try:
        yield server
    finally:
        await server.stop()
