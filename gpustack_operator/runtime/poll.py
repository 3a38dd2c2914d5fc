"""Retry a check at a fixed interval until it succeeds: the runtime's one polling loop.

Reconcilers and the worker's wiring never sleep themselves (timing belongs to the runtime,
docs/runtime.md): a step that must wait for something outside any watch, such as an API group
the cluster does not serve yet, hands a check to :func:`poll_until`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio


async def poll_until(check: Callable[[], Awaitable[bool]], interval: float) -> None:
    """Await *check* now and then every *interval* seconds until it returns True.

    Exceptions from *check* propagate: a check decides itself which failures are worth
    another try.
    """
    if interval <= 0:
        raise ValueError(f"poll interval must be positive, got {interval!r}")
    while True:
        if await check():
            return
        await anyio.sleep(interval)
