"""Run the gateway: its clusters and its HTTP(S) server, until cancelled or signalled."""

from __future__ import annotations

import signal
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import structlog
from aiohttp import web

from gpustack_operator.gateway.api import ApiOptions, build_app
from gpustack_operator.gateway.cluster import ClusterSpec
from gpustack_operator.gateway.gateway import Gateway
from gpustack_operator.gateway.guard import ConnectionLimits, GuardedRunner
from gpustack_operator.gateway.reload import (
    FileReloader,
    reload_forever,
    tls_reloader,
    token_reloader,
)

__all__ = ["GatewayServer", "ServerOptions", "load_tokens", "tls_context"]

log = structlog.get_logger(__name__)


def tls_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server context (TLS 1.2+) from PEM files; a clear ValueError if they do not load."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"cannot load the TLS certificate {cert_file} with key {key_file}: {exc}"
        ) from exc
    return context


def load_tokens(path: Path) -> list[str]:
    """Bearer tokens, one a line (blank lines and ``#`` comments ignored); at least one."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read the token file {path}: {exc}") from exc
    tokens = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    if not tokens:
        raise ValueError(f"the token file {path} holds no token")
    return tokens


@dataclass
class ServerOptions:
    bind_address: str = "127.0.0.1"
    port: int = 8090
    tls: ssl.SSLContext | None = None
    api: ApiOptions = field(default_factory=ApiOptions)
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    tls_files: tuple[Path, Path] | None = None
    """Certificate and key behind ``tls``: reloaded into it when they change."""
    token_file: Path | None = None
    """Where ``api.tokens`` came from: reloaded when it changes."""
    reload_interval: float = 5.0


class GatewayServer:
    """The gateway plus its HTTP server; :attr:`port` is known once :attr:`serving` is set."""

    def __init__(self, gateway: Gateway, clusters: list[ClusterSpec], options: ServerOptions):
        self.gateway = gateway
        self.options = options
        for spec in clusters:
            gateway.add(spec)
        self.port: int | None = None
        self.serving = anyio.Event()

    @property
    def url(self) -> str:
        scheme = "https" if self.options.tls else "http"
        host = self.options.bind_address
        host = "127.0.0.1" if host in ("", "0.0.0.0") else host
        host = f"[{host}]" if ":" in host else host
        return f"{scheme}://{host}:{self.port}"

    async def run(self) -> None:
        """Serve until cancelled; watch streams end and clusters stop on the way out."""
        opts = self.options
        runner = GuardedRunner(
            build_app(self.gateway, opts.api),
            opts.limits,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=5.0,
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, opts.bind_address, opts.port, ssl_context=opts.tls)
            try:
                await site.start()
            except OSError as exc:
                raise OSError(
                    exc.errno,
                    f"cannot serve the gateway on {opts.bind_address}:{opts.port}: "
                    f"{exc.strerror}; pick another --bind-address/--port",
                ) from exc
            addresses = runner.addresses
            self.port = int(addresses[0][1]) if addresses else opts.port
            log.info("serving worker-gateway", url=self.url, clusters=len(self.gateway.clusters))
            self.serving.set()
            async with anyio.create_task_group() as tg:
                reloaders = self._reloaders()
                if reloaders:
                    tg.start_soon(reload_forever, reloaders, opts.reload_interval)
                await self.gateway.run()
        finally:
            with anyio.CancelScope(shield=True):
                self.gateway.hub.close()
                await runner.cleanup()

    def _reloaders(self) -> list[FileReloader]:
        opts = self.options
        reloaders = []
        if opts.tls is not None and opts.tls_files is not None:
            reloaders.append(tls_reloader(opts.tls, *opts.tls_files, build=tls_context))
        if opts.token_file is not None:
            reloaders.append(token_reloader(opts.token_file, load_tokens, opts.api.set_tokens))
        return reloaders

    async def run_until_signal(self) -> int:
        """Run until SIGTERM/SIGINT; 0 after a clean stop, 1 when serving failed."""
        code = 0
        async with anyio.create_task_group() as tg:

            async def on_signals() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        log.info("signal received; stopping", signal=signal.Signals(signum).name)
                        scope.cancel()
                        return

            scope = anyio.CancelScope()
            tg.start_soon(on_signals)
            try:
                with scope:
                    await self.run()
            except OSError as exc:
                log.error("worker-gateway stopped", error=str(exc))
                code = 1
            tg.cancel_scope.cancel()
        return code
