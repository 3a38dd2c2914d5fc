"""CPU the worker spends from process start to its first API request (docs/performance.md).

Starts ``gpustack-operator worker`` against a stand-in API server on 127.0.0.1 that answers
every request 503; when the first request arrives it reads the process's user + system CPU
time from /proc and stops it. Prints each run and the median.

The image runs compiled bytecode (``UV_COMPILE_BYTECODE=1`` in the Dockerfile), so the
measured process must too: the child may write ``__pycache__`` (``PYTHONDONTWRITEBYTECODE``
is dropped from its environment) and one unmeasured run comes first. Without that, every
module without bytecode is compiled again in every run (0.4 s and more of the figure).

    .venv/bin/python hack/bench_startup.py --runs 9
    .venv/bin/python hack/bench_startup.py --python /path/to/venv/bin/python  # another install
"""

from __future__ import annotations

import argparse
import http.server
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of *pid* so far (fields 14 and 15 of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class FirstRequest(http.server.BaseHTTPRequestHandler):
    """Answers 503; the first request of a run records the worker's CPU time."""

    pid = 0
    cpu: float | None = None
    path = ""
    arrived = threading.Event()

    def do_GET(self) -> None:
        cls = type(self)
        if cls.cpu is None and cls.pid:
            cls.cpu, cls.path = cpu_seconds(cls.pid), self.path
            cls.arrived.set()
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_PATCH = do_GET

    def log_message(self, *args: object) -> None:
        return


def kubeconfig(port: int, directory: Path) -> Path:
    path = directory / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: bench\n"
        f"clusters: [{{name: bench, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: bench, user: {token: bench}}]\n"
        "contexts: [{name: bench, context: {cluster: bench, user: bench}}]\n"
    )
    return path


def one_run(python: str, config: Path, timeout: float) -> tuple[float, str]:
    FirstRequest.cpu, FirstRequest.path = None, ""
    FirstRequest.arrived.clear()
    command = [
        python,
        "-m",
        "gpustack_operator",
        "--log-level",
        "error",
        "worker",
        "--kubeconfig",
        str(config),
        "--no-leader-elect",
        "--health-probe-bind-address",
        "0",
        "--metrics-bind-address",
        "0",
        "--disable-applications",
        "*",
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GPUSTACK_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    with subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    ) as proc:
        FirstRequest.pid = proc.pid
        try:
            if not FirstRequest.arrived.wait(timeout):
                proc.kill()
                raise SystemExit(
                    f"no API request within {timeout:g}s: {proc.stderr.read()[-500:]!r}"
                )
        finally:
            proc.kill()
    assert FirstRequest.cpu is not None
    return FirstRequest.cpu, FirstRequest.path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--python", default=sys.executable, help="interpreter of the install")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), FirstRequest)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        config = kubeconfig(port, Path(tmp))
        one_run(args.python, config, args.timeout)  # writes the bytecode, not measured
        for i in range(args.runs):
            cpu, path = one_run(args.python, config, args.timeout)
            figures.append(cpu)
            print(f"run {i + 1}: {cpu:.2f} s CPU before the first request ({path})")
    server.shutdown()
    print(f"median: {statistics.median(figures):.2f} s CPU ({args.runs} runs, {args.python})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
