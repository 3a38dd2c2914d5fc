"""The kr8s internals the client relies on (runtime/kr8sinternals.py) still exist and still
behave: this fails on a kr8s upgrade that renames or changes them."""

from __future__ import annotations

import inspect
from pathlib import Path

import httpx
import kr8s.asyncio
import pytest

from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.kr8sinternals import close_session, rebuild_session, session_of
from gpustack_operator.runtime.resources import NAMESPACES
from gpustack_operator.sim.server import SimServer

pytestmark = pytest.mark.anyio


def test_the_private_names_exist() -> None:
    assert inspect.iscoroutinefunction(kr8s.asyncio.Api._create_session)


async def test_the_session_is_found_rebuilt_and_closed(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    client = await Client.connect(sim_kubeconfig)
    await client.list(NAMESPACES)
    first = session_of(client.kr8s_api)
    assert isinstance(first, httpx.AsyncClient), "kr8s no longer keeps its session in _session"
    await rebuild_session(client.kr8s_api)
    second = session_of(client.kr8s_api)
    assert second is not None and second is not first, "_create_session made no new session"
    await client.list(NAMESPACES)  # the rebuilt session works
    await close_session(client.kr8s_api)
    assert second.is_closed
    await first.aclose()
