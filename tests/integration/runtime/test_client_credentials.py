"""The client sends the credentials ``runtime.credentials`` reads and refreshes them on a 401
(docs/runtime.md, "Credentials")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.resources import CONFIGMAPS

from ...unit.runtime.test_credentials import exec_kubeconfig, one_context
from .hostile import HostileServer, answer, hostile_server

pytestmark = pytest.mark.anyio

V1 = "client.authentication.k8s.io/v1"


@pytest.fixture
async def server() -> AsyncIterator[HostileServer]:
    async for started in hostile_server():
        yield started


def bearer_of(server: HostileServer, index: int) -> str:
    for line in server.received[index].head.decode().split("\r\n"):
        name, _, value = line.partition(":")
        if name.lower() == "authorization":
            return value.strip()
    return ""


async def test_a_401_runs_the_exec_plugin_again_and_retries_with_its_token(
    server: HostileServer, tmp_path: Path
) -> None:
    path = exec_kubeconfig(tmp_path, api_version=V1)
    config = path.read_text().replace("https://api.test:6443", server.url)
    path.write_text(config)
    async with await Client.connect(path, timeout=5.0) as client:
        assert bearer_of(server, 0) == "Bearer t1"  # GET /version
        server.replies += [answer(b"{}", status="401 Unauthorized"), answer(b'{"kind":"x"}')]
        assert (await client.get(CONFIGMAPS, "x", "default"))["kind"] == "x"
    assert [bearer_of(server, i) for i in (1, 2)] == ["Bearer t1", "Bearer t2"]
    assert (tmp_path / "runs").read_text() == "2"


async def test_a_token_file_is_sent_and_read_again_after_a_401(
    server: HostileServer, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("first")
    path = one_context(tmp_path / "kc", {"tokenFile": "token"})
    path.write_text(path.read_text().replace("https://api.test:6443", server.url))
    async with await Client.connect(path, timeout=5.0) as client:
        token.write_text("second")
        server.replies += [answer(b"{}", status="401 Unauthorized"), answer(b'{"kind":"x"}')]
        await client.get(CONFIGMAPS, "x", "default")
    assert [bearer_of(server, i) for i in (0, 1, 2)] == [
        "Bearer first",
        "Bearer first",
        "Bearer second",
    ]
