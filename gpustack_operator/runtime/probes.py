"""HTTP endpoints of a manager: ``/healthz`` and ``/readyz`` probes, Prometheus ``/metrics``.

Each endpoint set is an aiohttp application served on its own bind address, given in the
controller-runtime style: ``":8081"`` (all interfaces), ``"127.0.0.1:0"`` (a random port, for
tests), ``"[::1]:8080"``; ``"0"`` or ``""`` disables the server.

A probe runs named checks; each returns ``True``/``False`` or raises (a failure whose message
is shown). The probe answers 200 ``ok`` when all pass and 500 listing the failures otherwise;
``?verbose`` lists every check as Kubernetes' own probes do.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from aiohttp import web
    from prometheus_client import CollectorRegistry

__all__ = [
    "Check",
    "HealthChecks",
    "HttpServer",
    "metrics_app",
    "parse_bind_address",
    "probes_app",
]

log = structlog.get_logger(__name__)

Check = Callable[[], bool | Awaitable[bool]]
"""A health check: True when healthy; may be async; raising counts as unhealthy."""


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """``":8081"`` -> ``("0.0.0.0", 8081)``; ``"0"``/``""`` -> None (disabled).

    Raises ValueError with the accepted forms on anything else.
    """
    address = address.strip()
    if address in ("", "0"):
        return None
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise ValueError(
            f"bind address {address!r} has no port: use ':8081', '127.0.0.1:8081' or '0' to disable"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"bind address {address!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"bind address {address!r}: port {port} is outside 0..65535")
    return (host or "0.0.0.0", port)


class HealthChecks:
    """A named set of checks behind one probe endpoint."""

    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}

    def add(self, name: str, check: Check) -> None:
        if name in self._checks:
            raise ValueError(f"a health check named {name!r} is already registered")
        self._checks[name] = check

    async def run(self) -> list[tuple[str, bool, str]]:
        """(name, passed, reason) for every check, in registration order."""
        results: list[tuple[str, bool, str]] = []
        for name, check in self._checks.items():
            try:
                outcome = check()
                if inspect.isawaitable(outcome):
                    outcome = await outcome
                results.append((name, bool(outcome), "" if outcome else "not ready"))
            except Exception as err:
                results.append((name, False, str(err) or type(err).__name__))
        return results


def _probe_handler(checks: HealthChecks) -> Callable[[web.Request], Awaitable[web.Response]]:
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        results = await checks.run()
        healthy = all(ok for _, ok, _ in results)
        if "verbose" in request.query:
            lines = [f"[{'+' if ok else '-'}]{name} {'ok' if ok else 'failed: ' + why}"
                     for name, ok, why in results]  # fmt: skip
            lines.append(f"{request.path.strip('/')} check {'passed' if healthy else 'failed'}")
            body = "\n".join(lines) + "\n"
        elif healthy:
            body = "ok"
        else:
            body = "".join(f"[-]{name} failed: {why}\n" for name, ok, why in results if not ok)
        return web.Response(status=200 if healthy else 500, text=body)

    return handle


def probes_app(healthz: HealthChecks, readyz: HealthChecks) -> web.Application:
    """``/healthz`` (liveness) and ``/readyz`` (readiness)."""
    from aiohttp import web  # imported when a server is built: 0.3-0.5 s of start-up otherwise

    app = web.Application()
    app.router.add_get("/healthz", _probe_handler(healthz))
    app.router.add_get("/readyz", _probe_handler(readyz))
    return app


def metrics_app(registry: CollectorRegistry) -> web.Application:
    """``/metrics`` in the Prometheus text format."""
    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    async def handle(request: web.Request) -> web.Response:
        payload = generate_latest(registry)
        return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    return app


@dataclass
class HttpServer:
    """One aiohttp application on one bind address; :attr:`port` is known after start."""

    app: web.Application
    host: str
    requested_port: int
    name: str = "http"
    _runner: web.AppRunner | None = None
    port: int | None = None

    async def start(self) -> None:
        from aiohttp import web

        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.requested_port, reuse_address=True)
        try:
            await site.start()
        except OSError as err:
            await runner.cleanup()
            raise OSError(
                err.errno,
                f"cannot serve {self.name} on {self.host}:{self.requested_port}: {err.strerror}; "
                "pick another address or '0' to disable",
            ) from err
        self._runner = runner
        addresses = runner.addresses  # the bound (host, port, ...) tuples; port 0 resolved
        self.port = int(addresses[0][1]) if addresses else self.requested_port
        log.info(f"serving {self.name}", host=self.host, port=self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"
