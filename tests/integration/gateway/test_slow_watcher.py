"""A watcher that stops reading is cut off with an ERROR line; the others keep streaming."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import httpx
import pytest

from gpustack_operator.gateway.api import ApiOptions
from gpustack_operator.gateway.hub import OVERFLOW_REASON

from .conftest import SimCluster
from .support import Watch, all_ready, eventually, running_gateway, watching

pytestmark = pytest.mark.anyio

PAD = "x" * 200 * 1024  # big events fill the socket buffers after a few dozen


async def _stalled_watch(port: int, path: str) -> socket.socket:
    """Open a watch with a tiny receive buffer and never read from it."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    request = f"GET {path}?watch=true HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    await loop.sock_sendall(sock, request.encode())
    return sock


async def _read_to_end(sock: socket.socket) -> bytes:
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    while chunk := await loop.sock_recv(sock, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _has(watch: Watch, count: int) -> Callable[[], bool]:
    return lambda: len(watch.live()) >= count


async def test_a_slow_watcher_is_dropped_without_blocking_others(
    clusters: list[SimCluster],
) -> None:
    east = clusters[0]
    name = east.state.cluster_queues[0]["metadata"]["name"]
    path = "/apis/v1/clusters/east/clusterqueues"
    async with (
        running_gateway([east.spec], watch_buffer=4, api=ApiOptions(abort_grace=60)) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        await all_ready(client, 1)
        hub = server.gateway.hub
        async with watching(client, path) as fast:
            assert server.port is not None
            slow = await _stalled_watch(server.port, path)
            try:
                await eventually(lambda: len(hub) == 2, "the stalled watch to subscribe")
                pushed = 0
                while len(hub) == 2:
                    assert pushed < 400, "the stalled watcher was never dropped"
                    queue = east.sim.store.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", name)
                    assert queue is not None
                    queue["metadata"].setdefault("annotations", {})["test/pad"] = f"{pushed}{PAD}"
                    east.sim.store.update(queue)
                    pushed += 1
                    # The fast watcher gets every event, in order, while the slow one stalls.
                    await eventually(_has(fast, pushed), f"event {pushed}")
                live = fast.live()
                assert [e["type"] for e in live] == ["MODIFIED"] * pushed
                assert [e["object"]["metadata"]["annotations"]["test/pad"][:4] for e in live] == [
                    f"{i}{PAD}"[:4] for i in range(pushed)
                ]
                # The stalled client finds a clear error at the end of what it was sent.
                received = await _read_to_end(slow)
                assert b'"type":"ERROR"' in received
                assert OVERFLOW_REASON.encode() in received
                assert b"fell too far behind (more than 4 events" in received
            finally:
                slow.close()
            # The fast watcher still streams after the drop.
            queue = east.sim.store.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", name)
            assert queue is not None
            queue["metadata"]["annotations"]["test/pad"] = "after"
            east.sim.store.update(queue)
            await eventually(
                lambda: fast.live()[-1]["object"]["metadata"]["annotations"]["test/pad"] == "after",
                "an event after the drop",
            )
        metrics = (await client.get("/metrics")).text
        assert "gpustack_gateway_watch_dropped_total" in metrics
