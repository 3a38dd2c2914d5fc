"""Deadline-bounded polling for runtime tests: wait for a condition, never for a duration."""

from __future__ import annotations

from collections.abc import Callable

import anyio


async def eventually(
    condition: Callable[[], bool],
    *,
    timeout: float = 60.0,  # noqa: ASYNC109 - a deadline, part of this helper's contract
    what: str = "condition",
) -> None:
    """Return as soon as *condition()* holds; fail the test if it does not within *timeout*."""
    with anyio.move_on_after(timeout):
        while not condition():  # noqa: ASYNC110 - conditions are plain state, not events
            await anyio.sleep(0.002)
        return
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
