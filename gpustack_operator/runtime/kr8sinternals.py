"""The two places the client reaches into kr8s's private API, kept in one module.

kr8s (``kr8s.asyncio.Api``) builds its HTTP session with the bearer token baked into the
headers and offers no public way to close it or to rebuild it after a token rotation. The
client needs both: :func:`close_session` when it closes, :func:`rebuild_session` after a 401
and a re-read of the credentials. Both use private attributes of kr8s 0.20 (``_session``,
``_create_session``); ``tests/unit/runtime/test_kr8sinternals.py`` fails when an upgrade
renames or changes them, so a kr8s upgrade that breaks them is caught before release.
"""

from __future__ import annotations

import httpx
import kr8s.asyncio

__all__ = ["close_session", "rebuild_session", "session_of"]


def session_of(api: kr8s.asyncio.Api) -> httpx.AsyncClient | None:
    """The HTTP session kr8s created for *api* (None before its first request)."""
    session = getattr(api, "_session", None)
    return session if isinstance(session, httpx.AsyncClient) else None


async def close_session(api: kr8s.asyncio.Api) -> None:
    """Close *api*'s HTTP session (open watches end)."""
    session = session_of(api)
    if session is not None:
        await session.aclose()


async def rebuild_session(api: kr8s.asyncio.Api) -> None:
    """Create a new HTTP session from *api*'s current credentials (after ``reauthenticate``)."""
    await api._create_session()
