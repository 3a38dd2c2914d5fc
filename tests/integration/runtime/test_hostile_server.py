"""The client against a hostile or broken HTTP/1.1 server on 127.0.0.1, one test per defect
the project's former hand-written transport had (docs/runtime.md, "Transport").

Each docstring says how that transport failed the same test. Every such claim was checked by
running this module against that transport before it was removed, with the error types it
did not have mapped to ``ApiError`` (so only behaviour could fail a test: answers, requests
seen by the server, bytes it got to send). The one test that passed there says so.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from gpustack_operator.runtime.client import (
    ApiError,
    ApiUnavailable,
    Client,
    Limits,
    ProtocolViolation,
    ResponseTooLarge,
    UnsendableRequest,
)
from gpustack_operator.runtime.informer import Informer, ReflectorSettings
from gpustack_operator.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionLost,
    LeaderElector,
)
from gpustack_operator.runtime.resources import CONFIGMAPS

from .hostile import HostileServer, Writer, answer, chunked, hostile_server

pytestmark = pytest.mark.anyio

SUPERSCRIPT_TWO = b"\xb2"
"""``²`` in Latin-1: a digit to ``str.isdigit()``, not to ``int()`` nor to HTTP."""
SMALL = Limits(max_body_bytes=1 << 20, max_watch_line_bytes=1 << 20)
"""Bounds small enough that a test reaches them in a few MiB."""


@pytest.fixture
async def server() -> AsyncIterator[HostileServer]:
    async for started in hostile_server():
        yield started


async def connect(server: HostileServer, tmp_path: Path, limits: Limits | None = None) -> Client:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    return await Client.connect(kubeconfig, timeout=5.0, limits=limits)


async def get_body(client: Client, name: str = "x") -> object:
    return (await client.get(CONFIGMAPS, name, "default"))["data"]


def data(text: str) -> bytes:
    return b'{"data":"%s"}' % text.encode()


# --- 1: interim answers ---------------------------------------------------------------------


async def test_interim_answers_are_skipped_and_each_request_gets_its_own(
    server: HostileServer, tmp_path: Path
) -> None:
    """The former transport returned the 100 (and the 103) as the final answer; the next
    request on that connection then received the previous request's answer."""
    server.replies += [
        b"HTTP/1.1 100 Continue\r\n\r\n" + answer(data("first")),
        b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + answer(data("second")),
        answer(data("third")),
    ]
    async with await connect(server, tmp_path) as client:
        assert [await get_body(client) for _ in range(3)] == ["first", "second", "third"]


# --- 2: conflicting Content-Length ----------------------------------------------------------


async def test_conflicting_content_lengths_are_refused(
    server: HostileServer, tmp_path: Path
) -> None:
    """The former transport took the last Content-Length and read the leftover bytes as
    the next request's answer."""
    smuggled = answer(data("smuggled"))
    server.replies += [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: %d\r\n\r\n{}" % (len(smuggled))
        + smuggled,
        answer(data("second")),
    ]
    async with await connect(server, tmp_path) as client:
        with pytest.raises(ProtocolViolation):
            await get_body(client)
        assert await get_body(client) == "second"


# --- 3: bytes after an answer ---------------------------------------------------------------


def late(first: bytes, stale: bytes) -> Writer:
    """Write *first*, let the client take it (a few turns of the event loop: the client runs
    in the same loop), then write *stale* on the same connection."""

    async def write(writer: asyncio.StreamWriter) -> None:
        writer.write(first)
        await writer.drain()
        for _ in range(20):
            await asyncio.sleep(0)
        writer.write(stale)
        await writer.drain()

    return write


STALE = answer(data("stale"))


async def test_bytes_after_an_answer_never_become_the_next_answer(
    server: HostileServer, tmp_path: Path
) -> None:
    """Bytes past the ``Content-Length`` in the same write: the former transport kept the
    connection (its check saw no EOF) and handed them to the next request as its answer."""
    server.replies += [answer(data("first")) + STALE, answer(data("second"))]
    async with await connect(server, tmp_path) as client:
        assert await get_body(client) == "first"
        assert await get_body(client) == "second"


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(answer(data("first")), id="past-content-length"),
        pytest.param(chunked(data("first")), id="after-the-last-chunk"),
    ],
)
async def test_bytes_arriving_later_close_the_idle_connection(
    server: HostileServer, tmp_path: Path, first: bytes
) -> None:
    """Bytes sent after the answer, while the connection waits for the next request: the
    former transport kept the connection and the next request received them as its answer
    (it never closed the connection, so this test timed out waiting for that)."""
    server.replies += [late(first, STALE), answer(data("second"))]
    async with await connect(server, tmp_path) as client:
        assert await get_body(client) == "first"
        with anyio.fail_after(5):
            await server.closed_by_client.wait()  # the client closed the poisoned connection
        assert await get_body(client) == "second"


@pytest.mark.parametrize("status", [b"099 Early", b"101 Switching Protocols", b"000 X", b"600 X"])
@pytest.mark.parametrize("when", ["same-write", "later"])
async def test_a_status_code_that_is_no_final_answer_is_refused_and_the_connection_dropped(
    server: HostileServer, tmp_path: Path, status: bytes, when: str
) -> None:
    """Before: 099, 000 and 101 were taken as the answer, and an answer the server wrote
    after them on that connection became the next request's answer (``stale``); 600 was
    a ``ServerError``."""
    first = b"HTTP/1.1 %s\r\nContent-Length: 2\r\n\r\n{}" % status
    server.replies += [
        first + STALE if when == "same-write" else late(first, STALE),
        answer(data("second")),
    ]
    async with await connect(server, tmp_path) as client:
        with pytest.raises(ProtocolViolation, match=f"status code {status[:3].decode()}"):
            await get_body(client)
        assert await get_body(client) == "second"
    assert len({r.connection for r in server.received if "configmaps" in r.request_line}) == 2


# --- 4: header values and paths -------------------------------------------------------------


async def test_a_token_with_a_line_break_is_refused_before_anything_is_sent(
    server: HostileServer, tmp_path: Path
) -> None:
    """The former transport sent ``X-Injected: 1`` to the server as a header of its own."""
    async with await connect(server, tmp_path) as client:
        sent = len(server.received)
        client.credentials.token = "tok\r\nX-Injected: 1"  # as a credential re-read may
        with pytest.raises(UnsendableRequest, match="Authorization"):
            await client.get(CONFIGMAPS, "x", "default")
        assert len(server.received) == sent
    kubeconfig = server.write_kubeconfig(tmp_path / "kc", token="tok\nX-Injected: 1")
    with pytest.raises(UnsendableRequest):
        await Client.connect(kubeconfig, timeout=5.0)
    assert len(server.received) == sent
    assert all(b"X-Injected" not in r.head for r in server.received)


@pytest.mark.parametrize(
    ("namespace", "name", "path"),
    [
        ("default", "a b", "/api/v1/namespaces/default/configmaps/a%20b"),
        ("default", "größe", "/api/v1/namespaces/default/configmaps/gr%C3%B6%C3%9Fe"),
        ("default", "../../nodes/x", "/api/v1/namespaces/default/configmaps/..%2F..%2Fnodes%2Fx"),
        ("..", "..", "/api/v1/namespaces/%2E%2E/configmaps/%2E%2E"),
    ],
)
async def test_names_are_percent_encoded_per_path_segment(
    server: HostileServer, tmp_path: Path, namespace: str, name: str, path: str
) -> None:
    """The former transport put a raw space in the request line, raised
    ``UnicodeEncodeError`` on a non-ASCII name and sent ``../`` as it was."""
    server.replies += [answer(data("ok"))]
    async with await connect(server, tmp_path) as client:
        assert (await client.get(CONFIGMAPS, name, namespace))["data"] == "ok"
    assert server.targets() == [f"GET {path} HTTP/1.1"]


# --- 5: non-idempotent requests -------------------------------------------------------------


async def test_a_patch_is_never_sent_twice(server: HostileServer, tmp_path: Path) -> None:
    """The server reads the request on a reused connection and closes it without an
    answer: the former transport sent the PATCH again on a new connection, so a JSON-patch
    ``add`` arrived twice."""
    server.replies += [answer(data("first")), None, answer(data("again"))]
    async with await connect(server, tmp_path) as client:
        await get_body(client)
        patch = [{"op": "add", "path": "/data/k", "value": "v"}]
        with pytest.raises(ApiUnavailable):
            await client.patch(CONFIGMAPS, "x", patch, namespace="default", patch_type="json")
    assert [line.split()[0] for line in server.targets()].count("PATCH") == 1


# --- 6: non-ASCII digits --------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(
            b"HTTP/1.1 %s00 OK\r\nContent-Length: 2\r\n\r\n{}" % SUPERSCRIPT_TWO, id="status"
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: %s\r\n\r\n{}" % SUPERSCRIPT_TWO, id="length"
        ),
    ],
)
async def test_non_ascii_digits_are_a_typed_error(
    server: HostileServer, tmp_path: Path, reply: bytes
) -> None:
    """``str.isdigit()`` accepts ``²``, ``int()`` does not: the former transport raised a
    bare ``ValueError``."""
    server.replies += [reply, answer(data("second"))]
    async with await connect(server, tmp_path) as client:
        with pytest.raises(ProtocolViolation):
            await get_body(client)
        assert await get_body(client) == "second"


async def test_leader_election_survives_an_answer_it_cannot_parse(
    server: HostileServer, tmp_path: Path
) -> None:
    """The renew loop catches ``ApiError`` only: the former transport's bare ``ValueError``
    on a non-ASCII status code ended the elector's ``run()``."""
    server.replies += [b"HTTP/1.1 %s00 OK\r\nContent-Length: 2\r\n\r\n{}" % SUPERSCRIPT_TWO]
    async with await connect(server, tmp_path) as client:
        elector = LeaderElector(
            client, LeaderElectionConfig(lease_name="l", lease_namespace="default", identity="a")
        )
        assert await elector.try_acquire_or_renew() is False
        assert not elector.is_leader


# --- 7: lenient framing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        *(
            pytest.param(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%s\r\n{}\r\n0\r\n\r\n"
                % size,
                id=f"chunk-size-{size.decode().strip() or 'space'}",
            )
            for size in (b"0x2", b"+2", b" 2 ", b"0_2")
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            id="gzip-chunked",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n"
            b"2\r\n{}\r\n0\r\n\r\n",
            id="chunked-and-length",
        ),
    ],
)
async def test_lenient_framing_is_refused_and_the_connection_dropped(
    server: HostileServer, tmp_path: Path, reply: bytes
) -> None:
    """The former transport accepted these chunk sizes (``int(x, 16)`` is lenient), treated
    ``gzip, chunked`` as chunked without decoding, and kept the connection of an answer
    with both ``Transfer-Encoding`` and ``Content-Length``."""
    server.replies += [reply, answer(data("second"))]
    async with await connect(server, tmp_path) as client:
        with pytest.raises(ProtocolViolation):
            await get_body(client)
        assert await get_body(client) == "second"
    assert len({r.connection for r in server.received if "configmaps" in r.request_line}) == 2


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENT = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"6"}}}\n'


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(b"zz\r\n1\r\n}\r\n0\r\n\r\n", id="chunk-size-not-hex"),
        pytest.param(b"1\r\n}XX0\r\n\r\n", id="no-line-end-after-the-data"),
        pytest.param(b"1;\x00\r\n}\r\n0\r\n\r\n", id="control-byte-in-an-extension"),
    ],
)
@pytest.mark.parametrize("verb", ["get", "watch"])
async def test_a_framing_error_in_the_middle_of_a_body_is_raised_when_it_arrives(
    server: HostileServer, tmp_path: Path, broken: bytes, verb: str
) -> None:
    """The body's first chunk arrives, then a malformed one; the server keeps the
    connection open. Before: the error surfaced only at the deadline (the request's 30 s,
    the watch's 70 s of inactivity), as a timeout."""
    if verb == "get":
        first = CHUNKED_HEAD + b"5\r\n" + b'{"a":' + b"\r\n"
    else:
        first = CHUNKED_HEAD + b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
    server.replies += [late(first, broken), answer(data("second"))]
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    events = []
    async with await Client.connect(kubeconfig) as client:  # the default deadlines
        with anyio.fail_after(1), pytest.raises(ProtocolViolation, match="not a valid HTTP"):
            if verb == "get":
                await get_body(client)
            else:
                async with client.watch(CONFIGMAPS, resource_version="5") as stream:
                    async for event in stream:
                        events.append(event.type)
        assert await get_body(client) == "second"
    assert events == ([] if verb == "get" else ["ADDED"])


# --- 8: bounds ------------------------------------------------------------------------------


def endless(head: bytes, piece: bytes, sent: list[int], most: int = 64 << 20) -> Writer:
    """Write *head*, then *piece* over and over (up to *most* bytes), counting in *sent*."""

    async def write(writer: asyncio.StreamWriter) -> None:
        writer.write(head)
        sent.append(0)
        while sent[0] < most:
            writer.write(piece)
            await writer.drain()
            sent[0] += len(piece)

    return write


CHUNK_OF_1_MIB = b"100000\r\n" + b"x" * (1 << 20) + b"\r\n"


@pytest.mark.parametrize(
    ("head", "piece"),
    [
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", CHUNK_OF_1_MIB, id="chunked"
        ),
        pytest.param(b"HTTP/1.1 200 OK\r\n\r\n", b"x" * (1 << 20), id="until-close"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffff\r\n",
            b"x" * (1 << 20),
            id="huge-chunk-size",
        ),
    ],
)
async def test_a_never_ending_body_stops_at_the_bound(
    server: HostileServer, tmp_path: Path, head: bytes, piece: bytes
) -> None:
    """The former transport read on until the request timed out, growing by hundreds of MB."""
    sent: list[int] = []
    server.replies += [endless(head, piece, sent)]
    async with await connect(server, tmp_path, SMALL) as client:
        with pytest.raises(ResponseTooLarge):
            await get_body(client)
    with anyio.fail_after(5):
        await server.closed_by_client.wait()
    assert sent[0] < 16 << 20  # the client hung up long before the 64 MiB were sent


async def test_a_huge_content_length_is_refused_before_reading(
    server: HostileServer, tmp_path: Path
) -> None:
    """The former transport set out to read the announced terabyte (and read all the
    64 MiB sent until the request timed out)."""
    sent: list[int] = []
    server.replies += [
        endless(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n", b"x" * 65536, sent)
    ]
    async with await connect(server, tmp_path, SMALL) as client:
        with pytest.raises(ResponseTooLarge, match="announces 1000000000000 bytes"):
            await get_body(client)
    with anyio.fail_after(5):
        await server.closed_by_client.wait()
    assert sent[0] < 16 << 20


async def test_a_50_mb_watch_line_stops_at_the_default_bound(
    server: HostileServer, tmp_path: Path
) -> None:
    """The former transport gathered the whole 50 MB line in memory."""
    sent: list[int] = []
    server.replies += [
        answer(b'{"metadata":{"resourceVersion":"5"},"items":[]}'),
        endless(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            CHUNK_OF_1_MIB,
            sent,
            most=50 << 20,
        ),
    ]
    async with await connect(server, tmp_path) as client:
        rv = (await client.list(CONFIGMAPS)).resource_version
        with pytest.raises(ResponseTooLarge, match="watch event exceeds"):
            async with client.watch(CONFIGMAPS, resource_version=rv) as stream:
                async for _ in stream:
                    pass
    with anyio.fail_after(5):
        await server.closed_by_client.wait()
    assert sent[0] < 32 << 20  # stopped soon after the 16 MiB bound, not at 50 MB


BOOKMARK = b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"}}}\n'
LOOP_HOLD_BOUND = 0.3
"""The most CPU time the event loop's thread may spend between two turns of a task that
only yields, while a watch floods in: 60 times the stream's 5 ms budget
(``Limits.watch_loop_budget``). Measured in the thread's CPU time, not the wall clock, so
the time the process waits for a core on a loaded machine is not counted as holding the
loop; the cyclic garbage collector's time in that thread is left out too (a collection of
the whole heap of a test process late in the suite stops every task alike, whatever the
stream does). The server in the same loop writes each MiB in one go, part of what is
measured. Before: 1 MiB of newlines held the loop 1.6 s at a time (and up to 9 s where more
was buffered)."""


def flood(body: bytes, then: bytes = EVENT) -> bytes:
    """A chunked watch answer: *body* in 64 KiB chunks, then *then*, then its end."""
    pieces = [body[i : i + (1 << 16)] for i in range(0, len(body), 1 << 16)]
    return chunked(*pieces, then)


class CollectorTime:
    """The CPU time the cyclic garbage collector has spent in one thread, summed (a
    ``gc.callbacks`` entry)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.total = 0.0
        self._started: float | None = None

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != self.thread:
            return
        if phase == "start":
            self._started = time.thread_time()
        elif self._started is not None:
            self.total += time.thread_time() - self._started
            self._started = None


async def longest_hold(stop: anyio.Event, holds: list[float], collected: list[float]) -> None:
    """Hand the loop back at once, again and again, recording the thread's CPU time each
    return took, less the garbage collector's (in *collected*): the longest is the longest
    the loop was held by others."""
    collector = CollectorTime()
    gc.callbacks.append(collector)
    try:
        while not stop.is_set():
            started, before = time.thread_time(), collector.total
            await asyncio.sleep(0)
            collected.append(collector.total - before)
            holds.append(time.thread_time() - started - collected[-1])
    finally:
        gc.callbacks.remove(collector)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\n" * (1 << 20), id="newlines"),
        pytest.param(b" \n" * (1 << 19), id="blank-lines-of-spaces"),
        pytest.param(b"\r\n" * (1 << 19), id="crlf"),
        pytest.param(BOOKMARK * ((1 << 20) // len(BOOKMARK)), id="tiny-events"),
        pytest.param((BOOKMARK + b"\n" * 4096) * 256, id="events-between-blank-lines"),
    ],
)
async def test_a_watch_flood_never_holds_the_event_loop_long(
    server: HostileServer, tmp_path: Path, body: bytes
) -> None:
    """1 MiB of blank lines (or of tiny events) then one event: the event arrives and the
    loop is never held longer than :data:`LOOP_HOLD_BOUND`. Before, measured here: 4.3 s
    (newlines), 1.0 s (spaces), 1.2 s (CRLF); tiny events held it 0.05 s and pass
    either way (they guard the budget)."""
    server.replies += [flood(body)]
    holds: list[float] = []
    collected: list[float] = []
    stop = anyio.Event()
    events: list[str] = []
    async with await connect(server, tmp_path) as client, anyio.create_task_group() as tg:
        tg.start_soon(longest_hold, stop, holds, collected)
        async with client.watch(CONFIGMAPS, resource_version="5") as stream:
            async for event in stream:
                events.append(event.type)
        stop.set()
    assert events[-1] == "ADDED" and set(events) <= {"ADDED", "BOOKMARK"}
    assert max(holds) < LOOP_HOLD_BOUND, (
        f"the loop was held {max(holds):.3f}s of CPU (the garbage collector's "
        f"{sum(collected):.3f}s in all left out)"
    )


async def test_blank_lines_count_against_the_watch_line_bound(
    server: HostileServer, tmp_path: Path
) -> None:
    """More whitespace between two events than ``max_watch_line_bytes`` (1 MiB here) ends
    the watch. Before: blank lines were not counted, so a server could send them forever."""
    server.replies += [flood(EVENT + b"\n" * (1 << 20) + b" \n" * (1 << 19))]
    events: list[str] = []
    async with await connect(server, tmp_path, SMALL) as client:
        with anyio.fail_after(5), pytest.raises(ResponseTooLarge, match="blank lines"):
            async with client.watch(CONFIGMAPS, resource_version="5") as stream:
                async for event in stream:
                    events.append(event.type)
    assert events == ["ADDED"]


async def test_a_header_bomb_is_bounded(server: HostileServer, tmp_path: Path) -> None:
    """The former transport accepted 60,000 headers as one answer."""
    bomb = b"".join(b"X-%d: 1\r\n" % i for i in range(60_000))
    server.replies += [b"HTTP/1.1 200 OK\r\n" + bomb + b"Content-Length: 2\r\n\r\n{}"]
    async with await connect(server, tmp_path) as client:
        with pytest.raises(ResponseTooLarge, match="head exceeds"):
            await get_body(client)


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nX-Big: " + b"x" * (1 << 20) + b"\r\n", id="header"),
        pytest.param(b"HTTP/1.1 200 " + b"O" * (1 << 20) + b"\r\n", id="status-line"),
    ],
)
async def test_a_head_line_beyond_the_bound_is_refused(
    server: HostileServer, tmp_path: Path, head: bytes
) -> None:
    """A 1 MiB status or header line. The former transport refused these too (it bounded
    the whole head at 1 MiB); the bound is now per line, as documented."""
    server.replies += [head + b"Content-Length: 2\r\n\r\n{}"]
    async with await connect(server, tmp_path) as client:
        with pytest.raises(ResponseTooLarge, match="head exceeds"):
            await get_body(client)


# --- the loops that must survive ------------------------------------------------------------


def configmap_list(rv: str, *names: str) -> bytes:
    items = [
        {"metadata": {"name": n, "namespace": "default", "resourceVersion": rv}} for n in names
    ]
    return answer(json.dumps({"metadata": {"resourceVersion": rv}, "items": items}).encode())


def open_watch(until: asyncio.Event) -> Writer:
    """A watch that sends nothing until *until* is set."""

    async def write(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await until.wait()

    return write


async def test_an_informer_relists_with_backoff_after_a_watch_event_beyond_the_bound(
    server: HostileServer, tmp_path: Path
) -> None:
    """A watch event beyond the line bound: the informer re-LISTs after a backoff delay
    (the event is missing from its cache), and keeps running. The former transport had no
    bound: it gathered the line in memory."""
    done = asyncio.Event()
    huge_event = b'{"type":"ADDED","object":{"metadata":{"name":"b","note":"%s"}}}\n' % (
        b"x" * (2 << 20)
    )
    server.replies += [
        configmap_list("5", "a"),
        chunked(huge_event),
        configmap_list("7", "a", "b"),
        open_watch(done),
    ]
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)

    async with await connect(server, tmp_path, SMALL) as client:
        informer = Informer(client, CONFIGMAPS, settings=ReflectorSettings(sleep=record))
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)
            with anyio.fail_after(10):
                while len(informer.indexer.list()) < 2:  # noqa: ASYNC110 - polling state
                    await anyio.sleep(0.005)
            tg.cancel_scope.cancel()
        done.set()
    verbs = ["WATCH" if "watch=true" in t else t.split()[0] for t in server.targets()]
    assert verbs[:4] == ["GET", "WATCH", "GET", "WATCH"]
    assert len(delays) == 1 and delays[0] > 0


# --- 9: answers of the wrong shape ----------------------------------------------------------

NESTED = b"[" * 10_000 + b"]" * 10_000
"""10 KB of nested arrays: deeper than ``json`` decodes (it raised ``RecursionError``)."""
NESTED_OBJECT = b'{"a":' * 2_000 + b"1" + b"}" * 2_000


def lease(**spec: object) -> bytes:
    return json.dumps(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "l", "namespace": "default", "resourceVersion": "1"},
            "spec": spec,
        }
    ).encode()


def watch_of(*lines: bytes) -> bytes:
    return chunked(*(line + b"\n" for line in lines))


LIST_HEAD = answer(b'{"metadata":{"resourceVersion":"5"},"items":[]}')


@pytest.mark.parametrize(
    ("replies", "verb"),
    [
        pytest.param([answer(NESTED)], "get", id="get-nested-array"),
        pytest.param([answer(NESTED_OBJECT)], "get", id="get-nested-object"),
        pytest.param([answer(b'{"items":5}')], "list", id="list-items-a-number"),
        pytest.param([answer(b'{"items":[],"metadata":"x"}')], "list", id="list-metadata-a-string"),
        pytest.param([answer(b'{"items":[{"metadata":"x"}]}')], "list", id="list-item-metadata"),
        pytest.param([answer(b'{"items":[7]}')], "list", id="list-item-a-number"),
        pytest.param([answer(NESTED, status="500 Oops")], "get", id="error-body-nested"),
        pytest.param(
            [answer(b'{"details":{"retryAfterSeconds":1%s}}' % (b"0" * 400), status="429 No")],
            "get",
            id="retry-after-beyond-a-float",
        ),
        pytest.param([LIST_HEAD, watch_of(NESTED)], "watch", id="watch-nested"),
        pytest.param(
            [LIST_HEAD, watch_of(b'{"type":"ADDED","object":{"metadata":"x"}}')],
            "watch",
            id="watch-metadata-a-string",
        ),
        pytest.param(
            [LIST_HEAD, watch_of(b'{"type":[],"object":{}}')], "watch", id="watch-type-a-list"
        ),
        pytest.param([answer(b'{"versions":7}')], "versions", id="discovery-versions-a-number"),
        pytest.param(
            [answer(b'{"versions":[],"preferredVersion":"v1"}')],
            "versions",
            id="discovery-preferred-a-string",
        ),
    ],
)
async def test_every_answer_the_client_cannot_read_is_a_typed_error(
    server: HostileServer, tmp_path: Path, replies: list[bytes], verb: str
) -> None:
    """Before: ``RecursionError`` (deep nesting), ``TypeError``/``AttributeError`` (a LIST's
    ``items`` a number or its ``metadata`` a string, also through
    ``WatchEvent.resource_version``) and ``OverflowError`` (a huge ``retryAfterSeconds``)
    left the client untyped."""
    server.replies += [*replies, answer(data("second"))]
    async with await connect(server, tmp_path) as client:
        with pytest.raises(ApiError):
            if verb == "get":
                await get_body(client)
            elif verb == "list":
                await client.list(CONFIGMAPS)
            elif verb == "versions":
                await client.served_versions("example.com")
            else:
                rv = (await client.list(CONFIGMAPS)).resource_version
                async with client.watch(CONFIGMAPS, resource_version=rv) as stream:
                    async for event in stream:
                        assert event.resource_version is not None
        assert await get_body(client) == "second"


def election(
    lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0
) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        lease_name="l",
        lease_namespace="default",
        identity="a",
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
    )


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(answer(NESTED), id="nested"),
        pytest.param(answer(b'{"metadata":"x","spec":{}}'), id="metadata-a-string"),
        pytest.param(answer(b'{"spec":"x"}'), id="spec-a-string"),
        pytest.param(answer(lease(holderIdentity=["b"])), id="holder-a-list"),
        pytest.param(answer(lease(leaseDurationSeconds="15")), id="duration-a-string"),
        pytest.param(answer(lease(leaseDurationSeconds=10**400)), id="duration-huge"),
        pytest.param(answer(lease(leaseTransitions={"n": 1})), id="transitions-an-object"),
        pytest.param(answer(lease(renewTime=json.loads(b"[" * 500 + b"]" * 500))), id="deep"),
    ],
)
async def test_a_lease_the_elector_cannot_read_is_a_failed_attempt(
    server: HostileServer, tmp_path: Path, reply: bytes
) -> None:
    """Before: a 10 KB nested answer to the Lease GET ended the elector (and the process)
    with ``RecursionError``; a Lease of the wrong shape with ``TypeError``/``ValueError``
    (or ``OverflowError``)."""
    server.replies += [reply]
    async with await connect(server, tmp_path) as client:
        elector = LeaderElector(client, election())
        assert await elector.try_acquire_or_renew() is False
        assert not elector.is_leader
        assert elector.observed_holder == ""
    assert [t.split()[0] for t in server.targets()] == ["GET"]  # nothing written


async def test_a_leader_whose_lease_answers_turn_unreadable_steps_down_cleanly(
    server: HostileServer, tmp_path: Path
) -> None:
    """The leader acquires the Lease, then every renewal reads 10 KB of nesting: it keeps
    trying until ``renew_deadline``, closes its fence and raises ``LeaderElectionLost``.
    Before: the first such answer ended ``run()`` with ``RecursionError``."""
    not_found = answer(b'{"kind":"Status","code":404,"reason":"NotFound"}', status="404 No")
    server.replies += [not_found, answer(lease(holderIdentity="a", leaseDurationSeconds=1))]
    server.replies += [answer(NESTED)] * 200
    async with await connect(server, tmp_path) as client:
        elector = LeaderElector(
            client, election(lease_duration=1.0, renew_deadline=0.5, retry_period=0.1)
        )
        with anyio.fail_after(10), pytest.raises(LeaderElectionLost, match="could not renew"):
            await elector.run()
        assert elector.elected.is_set()
        assert not elector.is_leader
        assert not elector.fence.held()
    verbs = [t.split()[0] for t in server.targets()]
    assert verbs[:2] == ["GET", "POST"] and set(verbs[2:]) == {"GET"} and len(verbs) > 3
