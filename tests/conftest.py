"""Fixtures shared by every test package."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (the product's loop), through anyio's pytest plugin."""
    return "asyncio"
