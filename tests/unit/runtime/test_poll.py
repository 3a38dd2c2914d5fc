"""runtime.poll: a check retried at an interval until it succeeds (docs/runtime.md)."""

from __future__ import annotations

import anyio
import pytest

from gpustack_operator.runtime.poll import poll_until


@pytest.mark.anyio
async def test_the_check_is_retried_until_it_succeeds() -> None:
    answers = iter([False, False, True, True])
    calls = 0

    async def check() -> bool:
        nonlocal calls
        calls += 1
        return next(answers)

    with anyio.fail_after(5):
        await poll_until(check, 0.001)
    assert calls == 3


@pytest.mark.anyio
async def test_a_failing_check_propagates_and_a_bad_interval_is_refused() -> None:
    async def broken() -> bool:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await poll_until(broken, 0.001)
    with pytest.raises(ValueError, match="positive"):
        await poll_until(broken, 0)
