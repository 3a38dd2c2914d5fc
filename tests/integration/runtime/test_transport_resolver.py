"""Host names go to the system's resolver (docs/runtime.md, "Transport"): a client starts no
c-ares channel, whose thread holds an inotify instance per client."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack_operator.runtime.transport import Transport

from .hostile import answer, hostile_server

pytestmark = pytest.mark.anyio

FDS = Path("/proc/self/fd")


def inotify_instances() -> int:
    count = 0
    for fd in FDS.iterdir():
        try:
            count += str(fd.readlink()) == "anon_inode:inotify"
        except OSError:
            continue  # closed meanwhile
    return count


@pytest.mark.skipif(not FDS.is_dir(), reason="needs /proc (Linux)")
async def test_a_transport_holds_no_inotify_instance_and_resolves_localhost() -> None:
    before = inotify_instances()
    async for server in hostile_server():
        server.replies.append(answer(b'{"kind": "Status"}'))
        transport = Transport(f"http://localhost:{server.port}")
        try:
            assert inotify_instances() == before
            got = await transport.request("GET", "/api/v1/namespaces", {})
            assert got.status_code == 200
            assert inotify_instances() == before
        finally:
            await transport.aclose()
