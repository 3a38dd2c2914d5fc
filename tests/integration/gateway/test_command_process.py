"""The ``worker-gateway`` command as a process: flags, serving, and a clean stop on SIGTERM."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from .conftest import SimCluster
from .support import all_ready

pytestmark = pytest.mark.anyio

STARTUP_DEADLINE = 300
"""Seconds the process may take to serve: a deadline, not a wait (the output's end, the
process exiting, ends the wait at once). On two busy cores a Python command took 45 s to
print its ``--help`` and over 60 s to start serving."""


class _Output:
    """Drains the process's output (so its pipe never fills) and finds the serving URL."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.url = ""
        self.found = anyio.Event()

    async def drain(self, process: Process) -> None:
        assert process.stdout is not None
        buffer = ""
        async for chunk in TextReceiveStream(process.stdout):
            buffer += chunk
            while "\n" in buffer:
                line, buffer = buffer.split("\n", 1)
                self.lines.append(line)
                if '"serving worker-gateway"' in line and not self.url:
                    self.url = str(json.loads(line)["url"])
                    self.found.set()
        self.found.set()


@pytest.mark.timeout(STARTUP_DEADLINE + 120)
async def test_the_command_serves_and_stops_cleanly(
    clusters: list[SimCluster], tmp_path: Path
) -> None:
    east, west, _ = clusters
    tokens = tmp_path / "tokens"
    tokens.write_text("t0ken\n")
    config = tmp_path / "gateway.yaml"
    config.write_text(f"clusters:\n  - {{name: west, kubeconfig: {west.kubeconfig.name}}}\n")
    command = [
        sys.executable, "-m", "gpustack_operator", "--log-format", "json", "worker-gateway",
        "--cluster", f"east={east.kubeconfig}:sim", "--config", str(config),
        "--port", "0", "--token-file", str(tokens), "--probe-interval", "0.2",
    ]  # fmt: skip
    output = _Output()
    async with await anyio.open_process(command, stderr=-2) as process:  # stderr -> stdout
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(output.drain, process)
                with anyio.fail_after(STARTUP_DEADLINE):
                    await output.found.wait()
                assert output.url, f"the gateway exited before serving: {output.lines}"
                await _exercise(output.url, east, west)
                process.send_signal(signal.SIGTERM)
                with anyio.fail_after(30):
                    assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()


async def _exercise(url: str, east: SimCluster, west: SimCluster) -> None:
    headers = {"Authorization": "Bearer t0ken"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client:
        items = await all_ready(client, 2)
        assert sorted(i["name"] for i in items) == ["east", "west"]
        pools = (await client.get("/apis/v1/pools")).json()["items"]
        assert len(pools) == len(east.state.cluster_queues) + len(west.state.cluster_queues)
    async with httpx.AsyncClient(base_url=url) as anonymous:
        assert (await anonymous.get("/apis/v1/pools")).status_code == 401
