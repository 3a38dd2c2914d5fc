"""No process of the tier outlives the test run that started it.

Every process the tier starts (a control plane's components, ``sim --serve``, the worker, the
device managers) runs in a session of its own, so that stopping it ends everything it
started and a Ctrl-C aimed at pytest does not reach it half-way through a test. The price: a
test run that is killed (SIGKILL, a runner's time limit, a crashed xdist worker) never runs
its teardown, and those sessions would live on, holding their ports. The reaper closes that
gap: one small process per test process, in a session of its own too, told the process group
of each process the tier starts (and forgets it when that process is stopped). When the test
process ends, however it ends, the reaper's end of the pipe reads EOF and it ends every group
still registered, SIGTERM first, SIGKILL after a grace.

:func:`left_behind` is the check that nothing stayed: every tier process carries
:data:`LOG_ENV`, the path of its log, in its environment, so the processes of a plane are
found by their logs' folder whatever became of their parents.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path

LOG_ENV = "GPUSTACK_REALCLUSTER_LOG"
"""Set in the environment of every process the tier starts: the path of its log."""

_SCRIPT = r"""
import os, signal, sys, time
groups = set()
for line in sys.stdin:
    line = line.strip()
    if line[:1] == "+":
        groups.add(int(line[1:]))
    elif line[:1] == "-":
        groups.discard(int(line[1:]))

def alive(group):
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
    groups = {g for g in groups if alive(g)}
    for group in groups:
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while groups and time.monotonic() < deadline:
        groups = {g for g in groups if alive(g)}
        time.sleep(0.1)
"""


class Reaper:
    """The reaper process of this test process (module docstring), started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None

    def _tell(self, line: str) -> None:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._process = subprocess.Popen(
                    [sys.executable, "-I", "-c", _SCRIPT],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    start_new_session=True,
                )
            assert self._process.stdin is not None
            self._process.stdin.write(line + "\n")
            self._process.stdin.flush()

    def guard(self, group: int) -> None:
        """End process group *group* if this test process ends before :meth:`release`."""
        self._tell(f"+{group}")

    def release(self, group: int) -> None:
        """Group *group* was stopped: forget it (its id may be reused)."""
        self._tell(f"-{group}")


REAPER = Reaper()


def _environment(pid: str) -> dict[str, str]:
    try:
        raw = Path("/proc", pid, "environ").read_bytes()
    except OSError:  # gone meanwhile, or another user's
        return {}
    pairs = (entry.partition(b"=") for entry in raw.split(b"\0") if entry)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def _command(pid: str) -> str:
    with contextlib.suppress(OSError):
        return Path("/proc", pid, "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    return ""


def left_behind(logs: Path) -> list[str]:
    """The live processes (``pid command``) started for the plane whose logs are in *logs*,
    found through :data:`LOG_ENV`; [] where the platform has no ``/proc`` to look in."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    prefix = f"{logs}{os.sep}"
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if _environment(entry.name).get(LOG_ENV, "").startswith(prefix):
            found.append(f"{entry.name} {_command(entry.name)}".strip())
    return sorted(found)
