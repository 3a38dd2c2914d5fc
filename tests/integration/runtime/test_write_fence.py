"""The write fence is checked after every wait of a write (docs/runtime.md, "Write fence"):
a write that passed ``Writer``'s check while the Lease was held, then waited for the rate
limiter, a credential refresh or a connection while the fence closed, sends nothing.

The fence's clock is a fake one that each wait moves past ``renew_deadline``, so "the wait
outlasted the fence" is exact, not a race. Before the fence moved into the client, each of
these writes reached the server after the fence had closed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from gpustack_operator.domain.labels import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from gpustack_operator.runtime.backoff import TokenBucket
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.fence import LeaseFence, LeaseNotHeld
from gpustack_operator.runtime.resources import CONFIGMAPS
from gpustack_operator.worker.common import Writer

from .hostile import HostileServer, answer, hostile_server

pytestmark = pytest.mark.anyio

RENEW_DEADLINE = 1.0
CONFIGMAP = {
    "metadata": {
        "name": "x",
        "namespace": "default",
        "uid": "u-1",
        "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
    },
    "data": {"k": "v"},
}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def outlast(self, fence: LeaseFence) -> None:
        """Time passes beyond the fence's deadline (a wait that took too long)."""
        self.now += fence.renew_deadline + 0.003


@pytest.fixture
async def server() -> AsyncIterator[HostileServer]:
    async for started in hostile_server():
        yield started


def writes(server: HostileServer) -> list[str]:
    return [t for t in server.targets() if t.split()[0] in ("PATCH", "DELETE")]


async def test_a_slow_rate_limiter_sends_nothing_after_the_fence_closes(
    server: HostileServer, tmp_path: Path
) -> None:
    """qps 1, burst 1: the apply takes the only token; the second write waits for the next
    one, past the deadline. Before: the delete reached the server after the fence closed."""
    clock = FakeClock()
    fence = LeaseFence(RENEW_DEADLINE, clock=clock)

    async def slow_sleep(_: float) -> None:
        clock.outlast(fence)

    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    async with await Client.connect(kubeconfig, timeout=5.0) as connected:
        client = Client(
            connected.credentials, rate_limiter=TokenBucket(1, 1, clock=clock, sleep=slow_sleep)
        )
        async with client:
            writer = Writer(client, "test", None, fence)
            fence.renewed(clock.now)
            server.replies += [answer(b"{}")]
            await writer.apply(CONFIGMAPS, CONFIGMAP, existed=True)  # the burst token
            assert len(writes(server)) == 1
            fence.renewed(clock.now)
            with pytest.raises(LeaseNotHeld):
                await writer.delete(CONFIGMAPS, CONFIGMAP, "test")  # waits for a token
            fence.renewed(clock.now)
            with pytest.raises(LeaseNotHeld):
                await writer.apply(CONFIGMAPS, CONFIGMAP, existed=True)
    assert len(writes(server)) == 1
    assert fence.refused == 2


async def test_a_slow_credential_refresh_sends_nothing_after_the_fence_closes(
    server: HostileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token's re-read (an exec plugin, a token file) outlasts the fence. Before: both
    writes reached the server after the fence closed."""
    clock = FakeClock()
    fence = LeaseFence(RENEW_DEADLINE, clock=clock)
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    async with await Client.connect(kubeconfig, timeout=5.0) as client:
        authorization = client.credentials.authorization

        async def slow_authorization() -> str | None:
            clock.outlast(fence)
            return await authorization()

        monkeypatch.setattr(client.credentials, "authorization", slow_authorization)
        writer = Writer(client, "test", None, fence)
        for write in (
            lambda: writer.apply(CONFIGMAPS, CONFIGMAP, existed=True),
            lambda: writer.delete(CONFIGMAPS, CONFIGMAP, "test"),
        ):
            fence.renewed(clock.now)
            with pytest.raises(LeaseNotHeld):
                await write()
    assert writes(server) == []
    assert fence.refused == 2


async def test_a_slow_connection_set_up_sends_nothing_after_the_fence_closes(
    server: HostileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new connection (DNS, TCP, TLS, a proxy) outlasts the fence; the connection itself
    is then used by the next request that may go."""
    clock = FakeClock()
    fence = LeaseFence(RENEW_DEADLINE, clock=clock)
    create = aiohttp.TCPConnector._create_connection
    slow = [True]

    def slow_create(
        original: Callable[..., Awaitable[object]],
    ) -> Callable[..., Awaitable[object]]:
        async def create_connection(*args: object, **kwargs: object) -> object:
            connection = await original(*args, **kwargs)
            if slow[0]:
                clock.outlast(fence)
            return connection

        return create_connection

    monkeypatch.setattr(aiohttp.TCPConnector, "_create_connection", slow_create(create))
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    async with (
        await Client.connect(kubeconfig, timeout=5.0) as connected,
        Client(connected.credentials) as client,  # no connection yet
    ):
        writer = Writer(client, "test", None, fence)
        fence.renewed(clock.now)
        with pytest.raises(LeaseNotHeld):
            await writer.apply(CONFIGMAPS, CONFIGMAP, existed=True)
        slow[0] = False
        fence.renewed(clock.now)
        server.replies += [answer(b"{}")]
        await writer.apply(CONFIGMAPS, CONFIGMAP, existed=True)  # the fence holds
    assert len(writes(server)) == 1
    assert fence.refused == 1
