"""The client sends the credentials ``runtime.credentials`` reads and refreshes them on a 401
(docs/runtime.md, "Credentials")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpustack_operator.runtime.client import ApiUnavailable, Client
from gpustack_operator.runtime.credentials import TOKEN_REREAD_SECONDS, Credentials
from gpustack_operator.runtime.resources import CONFIGMAPS

from ...unit.runtime.test_credentials import (
    Clock,
    exec_kubeconfig,
    no_ambient_credentials,  # noqa: F401 - an autouse fixture
    one_context,
)
from .hostile import HostileServer, answer, hostile_server

pytestmark = pytest.mark.anyio


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
    path = exec_kubeconfig(tmp_path, server.url)
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


async def test_a_credential_that_cannot_be_read_again_fails_the_request_as_unavailable(
    server: HostileServer, tmp_path: Path
) -> None:
    """Typed, so that every long-running loop retries it with backoff; nothing is sent."""
    token = tmp_path / "token"
    token.write_text("first")
    path = one_context(tmp_path / "kc", {"tokenFile": "token"})
    path.write_text(path.read_text().replace("https://api.test:6443", server.url))
    clock = Clock()
    credentials = Credentials(
        str(path), None, where="test", service_account=tmp_path / "none", clock=clock
    )
    await credentials.load()
    async with Client(credentials, timeout=5.0) as client:
        token.unlink()
        clock.now = TOKEN_REREAD_SECONDS
        with pytest.raises(ApiUnavailable, match="cannot read the token file") as caught:
            await client.get(CONFIGMAPS, "x", "default")
        assert caught.value.reason == "CredentialsUnavailable"
    assert server.received == []
