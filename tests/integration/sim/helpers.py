"""Small helpers for the simulated-API-server tests: raw requests through kr8s, polling."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx


async def call(
    api: Any,
    method: str,
    path: str,
    body: Any = None,
    *,
    params: dict[str, Any] | None = None,
    content_type: str = "application/json",
    raw: bytes | str | None = None,
) -> httpx.Response:
    """One request at an absolute API path, never raising on HTTP errors."""
    kwargs: dict[str, Any] = {"params": params or {}}
    if raw is not None:
        kwargs["content"] = raw
        kwargs["headers"] = {"Content-Type": content_type}
    elif body is not None:
        kwargs["content"] = json.dumps(body)
        kwargs["headers"] = {"Content-Type": content_type}
    async with api.call_api(
        method, version="", base=path, raise_for_status=False, **kwargs
    ) as resp:
        await resp.aread()
        return resp


async def watch_lines(
    api: Any,
    path: str,
    params: dict[str, Any],
    *,
    stop_after: int | None = None,
    on_ready: Callable[[], Awaitable[None]] | None = None,
    limit: float = 60.0,
) -> list[dict[str, Any]]:
    """Read a watch stream's events until it ends (or ``stop_after`` events arrived)."""
    events: list[dict[str, Any]] = []
    with anyio.fail_after(limit):
        async with api.call_api(
            "GET", version="", base=path, params={"watch": "true", **params}, stream=True
        ) as resp:
            if on_ready is not None:
                await on_ready()
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                events.append(json.loads(line))
                if stop_after is not None and len(events) >= stop_after:
                    break
    return events


async def eventually(
    check: Callable[[], Any], *, within: float = 60.0, interval: float = 0.01
) -> Any:
    """Poll ``check`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s (last: {result!r})")
        await anyio.sleep(interval)


def deployment(name: str, namespace: str | None = None, **spec: Any) -> dict[str, Any]:
    """A Deployment the API server accepts (selector, labelled template, one container),
    with *spec* merged over its spec."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
            **spec,
        },
    }
