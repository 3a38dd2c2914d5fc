"""Reload the TLS certificate/key and the token file when they change on disk, without a restart
(docs/worker-gateway.md, "Security").

Each file is polled (modification time, size, inode: a Secret volume's symlink swap changes the
inode). A changed set is loaded in full first; only a set that loads replaces the one in use,
so a half-written certificate or an emptied token file leaves the previous one serving and is
retried at the next poll.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import structlog

from gpustack_operator.gateway.metrics import RELOADS

__all__ = ["FileReloader", "reload_forever", "tls_reloader", "token_reloader"]

log = structlog.get_logger(__name__)

Stamp = tuple[tuple[int, int, int] | None, ...]


def _stamp(paths: Sequence[Path]) -> Stamp:
    out: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            out.append(None)
            continue
        out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


class FileReloader:
    """Calls *load* when any of *paths* changed since the last successful load."""

    def __init__(self, name: str, paths: Sequence[Path], load: Callable[[], None]) -> None:
        self.name = name
        self.paths = list(paths)
        self.load = load
        self._stamp = _stamp(self.paths)

    def check(self) -> bool:
        """Reload if changed; True when a new version is now in use."""
        stamp = _stamp(self.paths)
        if stamp == self._stamp:
            return False
        try:
            self.load()
        except ValueError as exc:
            RELOADS.labels(file=self.name, result="failed").inc()
            log.error("reload_failed_keeping_previous", file=self.name, error=str(exc))
            return False
        self._stamp = stamp
        RELOADS.labels(file=self.name, result="ok").inc()
        log.info("reloaded", file=self.name, paths=[str(p) for p in self.paths])
        return True


def tls_reloader(
    context: ssl.SSLContext,
    cert_file: Path,
    key_file: Path,
    build: Callable[[Path, Path], ssl.SSLContext],
) -> FileReloader:
    """Reload *context*'s certificate chain in place; new connections get the new one."""

    def load() -> None:
        build(cert_file, key_file)  # raises ValueError if the pair does not load together
        try:
            context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load {cert_file} with {key_file}: {exc}") from exc

    return FileReloader("tls", [cert_file, key_file], load)


def token_reloader(
    path: Path, read: Callable[[Path], list[str]], apply: Callable[[list[str]], None]
) -> FileReloader:
    """Replace the accepted bearer tokens with the file's; a file without tokens is refused."""
    return FileReloader("tokens", [path], lambda: apply(read(path)))


async def reload_forever(reloaders: Sequence[FileReloader], interval: float) -> None:
    """Poll every *interval* seconds until cancelled."""
    while True:
        await anyio.sleep(interval)
        for reloader in reloaders:
            reloader.check()
