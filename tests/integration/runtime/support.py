"""Helpers for the manager / leader-election integration tests (real sockets, simulated API)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from anyio.abc import TaskGroup

from gpustack_operator.runtime import metrics
from gpustack_operator.runtime.backoff import BackoffPolicy
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.informer import ReflectorSettings
from gpustack_operator.runtime.manager import Manager, ManagerOptions

_counter = itertools.count()


def unique(prefix: str) -> str:
    """Controller and Lease names label process-wide metrics: one per test."""
    return f"{prefix}-{next(_counter)}"


def options(**overrides: Any) -> ManagerOptions:
    """Random local ports, short timeouts; anything else as given."""
    base: dict[str, Any] = {
        "health_probe_bind_address": "127.0.0.1:0",
        "metrics_bind_address": "127.0.0.1:0",
        "cache_sync_timeout": 30.0,
        "graceful_shutdown_timeout": 5.0,
        "reflector": ReflectorSettings(backoff=BackoffPolicy(initial=0.01, cap=0.05)),
    }
    base.update(overrides)
    return ManagerOptions(**base)


@asynccontextmanager
async def connected(kubeconfig: Path) -> AsyncIterator[Client]:
    client = await Client.connect(kubeconfig)
    try:
        yield client
    finally:
        await client.close()


@dataclass
class Handle:
    """A manager running in the background of a task group."""

    manager: Manager
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    stopped: anyio.Event = field(default_factory=anyio.Event)
    errors: list[BaseException] = field(default_factory=list)
    """What ``run()`` raised (empty after a clean stop)."""

    async def stop(self) -> None:
        """Cancel the manager and wait for its graceful shutdown."""
        self.scope.cancel()
        with anyio.CancelScope(shield=True), anyio.fail_after(30):
            await self.stopped.wait()


def start(tg: TaskGroup, manager: Manager) -> Handle:
    handle = Handle(manager)

    async def run() -> None:
        try:
            with handle.scope:
                await manager.run()
        except Exception as err:
            handle.errors.append(err)
        finally:
            handle.stopped.set()

    tg.start_soon(run)
    return handle


@asynccontextmanager
async def running(manager: Manager) -> AsyncIterator[tuple[Manager, list[BaseException]]]:
    """Run *manager* in the background; on exit cancel it and wait for its shutdown."""
    async with anyio.create_task_group() as tg:
        handle = start(tg, manager)
        try:
            yield manager, handle.errors
        finally:
            await handle.stop()


async def http_get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5) as http:
        return await http.get(url)


def sample(metric: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(metric, labels) or 0.0


def idle(manager: Manager) -> bool:
    """Every controller's queue is empty, nothing processing, nothing delayed."""
    return all(
        len(c.queue) == 0 and not c.queue.processing() and c.queue.num_waiting() == 0
        for c in manager.controllers
    )
