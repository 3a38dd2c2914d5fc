"""The health endpoints of the simulated API server: ``/healthz``, ``/livez``, ``/readyz``.

Probes, ``kubectl get --raw /readyz`` and cluster tools ask them; the simulator is healthy
whenever it answers (docs/simulator.md, "Server parts").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

__all__ = ["CHECKS", "add_health_routes"]

CHECKS = ("ping", "log", "etcd")
"""The checks the answers list (a real server runs more; these are the ones it always has)."""


def add_health_routes(app: web.Application) -> None:
    """Register ``/healthz``, ``/livez``, ``/readyz`` and their per-check paths."""

    def handler(endpoint: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def answer(request: web.Request) -> web.Response:
            if "verbose" not in request.query:
                return web.Response(text="ok", content_type="text/plain")
            lines = [f"[+]{check} ok" for check in CHECKS]
            lines.append(f"{endpoint} check passed")
            return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

        return answer

    async def one_check(request: web.Request) -> web.Response:
        if request.match_info["check"] not in CHECKS:
            raise web.HTTPNotFound(text="404 page not found")
        return web.Response(text="ok", content_type="text/plain")

    for endpoint in ("healthz", "livez", "readyz"):
        app.router.add_get(f"/{endpoint}", handler(endpoint))
        app.router.add_get(f"/{endpoint}/{{check}}", one_check)
