"""The keep-alive HTTP/1.1 transport against a scripted server on 127.0.0.1 (and over TLS)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpustack_operator.runtime.http11 import Http11Transport, TransportError

from ...certs import self_signed

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def ok(body: bytes = b"{}", *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@dataclass
class Scripted:
    """Answers each request with the next scripted bytes; ``None`` closes the connection
    without answering; ``close_after`` closes it right after that many answers."""

    answers: list[bytes | None]
    close_after: int | None = None
    requests: list[tuple[int, bytes, bytes]] = field(default_factory=list)
    connections: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection, served = self.connections, 0
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append((connection, head, body))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                served += 1
                if self.close_after is not None and served >= self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


Serve = Callable[..., Awaitable[int]]
"""Starts a :class:`Scripted` server (optionally over TLS) and gives its port."""


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[asyncio.Server] = []

    async def start(script: Scripted, context: ssl.SSLContext | None = None) -> int:
        server = await asyncio.start_server(script.handle, "127.0.0.1", 0, ssl=context)
        servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def test_keeps_the_connection_alive_and_sends_the_request_as_given(serve: Serve) -> None:
    script = Scripted([ok(b'{"a":1}'), ok(b"[]")])
    port = await serve(script)
    transport = Http11Transport(f"http://127.0.0.1:{port}/prefix/")
    first = await transport.request(
        "PATCH", "/api/v1/x?fieldManager=m", {"Content-Type": "t/y"}, b'{"k":"v"}'
    )
    second = await transport.request("GET", "/api/v1/y", {})
    await transport.aclose()
    assert (first.status_code, first.content, second.content) == (200, b'{"a":1}', b"[]")
    assert script.connections == 1
    (_, head, body), (_, second_head, _) = script.requests
    assert head.startswith(b"PATCH /prefix/api/v1/x?fieldManager=m HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{port}".encode() in head
    assert b"Content-Type: t/y\r\n" in head and b"Content-Length: 9\r\n" in head
    assert body == b'{"k":"v"}'
    assert second_head.startswith(b"GET /prefix/api/v1/y HTTP/1.1\r\n")
    assert b"Content-Length" not in second_head


async def test_reads_chunked_bodies_with_extensions_and_trailers(serve: Serve) -> None:
    chunked = (
        b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\nRetry-After: 3\r\n\r\n"
        b'4;ext=1\r\n{"a"\r\n3\r\n:1}\r\n0\r\nX-Trailer: t\r\n\r\n'
    )
    script = Scripted([chunked, ok()])
    port = await serve(script)
    transport = Http11Transport(f"http://127.0.0.1:{port}")
    answer = await transport.request("GET", "/x", {})
    assert (answer.status_code, answer.reason_phrase, answer.content) == (
        404,
        "Not Found",
        b'{"a":1}',
    )
    assert answer.headers["retry-after"] == "3"
    await transport.request("GET", "/y", {})
    assert script.connections == 1  # the trailers were consumed: the connection stayed usable
    await transport.aclose()


async def test_connection_close_and_unframed_bodies_are_not_reused(serve: Serve) -> None:
    script = Scripted(
        [ok(b"1", "Connection: close"), b"HTTP/1.1 200 OK\r\n\r\nto the end", ok(b"3")],
        close_after=1,
    )
    port = await serve(script)
    transport = Http11Transport(f"http://127.0.0.1:{port}")
    assert (await transport.request("GET", "/1", {})).content == b"1"
    assert (await transport.request("GET", "/2", {})).content == b"to the end"
    assert (await transport.request("GET", "/3", {})).content == b"3"
    assert script.connections == 3
    await transport.aclose()


async def test_an_idle_connection_the_server_closed_is_replaced_except_for_post(
    serve: Serve,
) -> None:
    # ``None``: the server closes the kept-alive connection instead of answering, as one
    # that timed it out while idle does.
    script = Scripted([ok(b"1"), None, ok(b"2"), ok(b"p"), None])
    port = await serve(script)
    transport = Http11Transport(f"http://127.0.0.1:{port}")
    await transport.request("GET", "/1", {})
    assert (await transport.request("DELETE", "/2", {})).content == b"2"
    assert [(c, head.split(b" ")[1]) for c, head, _ in script.requests] == [
        (1, b"/1"),
        (1, b"/2"),
        (2, b"/2"),
    ]
    await transport.request("GET", "/3", {})
    # A POST is not sent twice: the server may have acted on it; the caller decides.
    with pytest.raises(TransportError, match="closed the connection without answering"):
        await transport.request("POST", "/4", {}, b"{}")
    assert script.connections == 2
    await transport.aclose()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.1 answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "ended early"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", "not an HTTP/1.1 answer"),
    ],
)
async def test_malformed_answers_are_transport_errors(
    serve: Serve, answer: bytes, message: str
) -> None:
    script = Scripted([answer], close_after=1)
    port = await serve(script)
    transport = Http11Transport(f"http://127.0.0.1:{port}")
    with pytest.raises(TransportError, match=message):
        await transport.request("GET", "/x", {})
    assert transport._idle == []  # a broken connection is never kept
    await transport.aclose()


async def test_refused_connections_and_bad_urls_say_what_is_wrong(serve: Serve) -> None:
    port = await serve(Scripted([]))
    transport = Http11Transport(f"http://127.0.0.1:{port}")
    await transport.aclose()
    with pytest.raises(TransportError, match="closed"):
        await transport.request("GET", "/x", {})
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    free = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(TransportError, match="cannot connect"):
        await Http11Transport(f"http://127.0.0.1:{free}").request("GET", "/x", {})
    with pytest.raises(ValueError, match="expected http"):
        Http11Transport("unix:///var/run/k8s.sock")


async def test_tls_verifies_the_server_against_the_given_ca_and_name(
    serve: Serve, tmp_path: Path
) -> None:
    cert_file, key_file = self_signed(tmp_path, "api.test", dns_names=("api.test",))
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_file, key_file)
    script = Scripted([ok(b"secure"), ok(b"named")])
    port = await serve(script, server_context)
    trusting = ssl.create_default_context(cafile=str(cert_file))

    transport = Http11Transport(f"https://127.0.0.1:{port}", ssl_context=trusting)
    assert (await transport.request("GET", "/x", {})).content == b"secure"
    await transport.aclose()
    named = Http11Transport(
        f"https://127.0.0.1:{port}", ssl_context=trusting, server_hostname="api.test"
    )
    assert (await named.request("GET", "/x", {})).content == b"named"
    await named.aclose()

    wrong_name = Http11Transport(
        f"https://127.0.0.1:{port}", ssl_context=trusting, server_hostname="other.test"
    )
    with pytest.raises(TransportError, match="cannot connect"):
        await wrong_name.request("GET", "/x", {})
    untrusted = Http11Transport(f"https://127.0.0.1:{port}")  # default CAs: not this one
    with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
        await untrusted.request("GET", "/x", {})


async def test_a_stream_hands_out_lines_across_chunk_boundaries(serve: Serve) -> None:
    body = b'{"a":1}\n{"b"' + b":2}\n\n" + b'{"c":3}'
    chunks = [body[:3], body[3:9], body[9:16], body[16:]]  # lines split anywhere
    wire = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    script = Scripted([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + wire])
    port = await serve(script)
    transport = Http11Transport(f"http://127.0.0.1:{port}")
    async with transport.stream("GET", "/w?watch=true", {"Accept": "application/json"}) as answer:
        assert answer.status_code == 200
        lines = [line async for line in answer.lines()]
    assert lines == [b'{"a":1}', b'{"b":2}', b"", b'{"c":3}']
    assert script.requests[0][1].startswith(b"GET /w?watch=true HTTP/1.1\r\n")
    await transport.aclose()


async def test_a_stream_reads_length_and_close_delimited_bodies_and_error_answers(
    serve: Serve,
) -> None:
    script = Scripted(
        [
            b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nx\ny\nzzz",
            b"HTTP/1.1 410 Gone\r\n\r\n" + b'{"reason":"Expired"}',
        ],
        close_after=1,
    )
    port = await serve(script)
    transport = Http11Transport(f"http://127.0.0.1:{port}")
    async with transport.stream("GET", "/1", {}) as answer:
        assert [line async for line in answer.lines()] == [b"x", b"y", b"zzz"]
    async with transport.stream("GET", "/2", {}) as answer:
        assert answer.status_code == 410
        assert await answer.aread() == b'{"reason":"Expired"}'
    assert script.connections == 2  # a stream's connection is its own
    await transport.aclose()


async def test_a_stream_that_breaks_mid_message_raises(serve: Serve) -> None:
    script = Scripted(
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab\ncd\r\n8\r\nef"],
        close_after=1,
    )
    port = await serve(script)
    transport = Http11Transport(f"http://127.0.0.1:{port}")
    received: list[bytes] = []
    async with transport.stream("GET", "/w", {}) as answer:
        with pytest.raises(TransportError, match="ended in the middle"):
            async for line in answer.lines():
                received.append(line)
    assert received == [b"ab"]
    await transport.aclose()
