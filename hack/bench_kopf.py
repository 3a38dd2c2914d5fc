#!/usr/bin/env python3
"""Benchmark: a burst of no-op events through the runtime and through kopf, same server.

Not a test, and kopf is no dependency of the project: the kopf side runs in its own
interpreter, by default ``uv run --no-project --with kopf==1.45.2 python`` (or the one named
by ``--kopf-python``). This process holds the simulated API server; each contender runs in a
child process of its own (its CPU time is its own), watches ConfigMaps in one namespace and
does nothing per event:

- ours: a Manager with one controller over ConfigMaps and a no-op reconciler (informer,
  work queue, metrics, logging context: what every reconcile of the worker pays);
- kopf: an ``@kopf.on.event("configmaps")`` handler that counts (standalone, no peering,
  no event posting).

Each child first reports when it has seen a sentinel ConfigMap (its watch is running); then
this process creates N ConfigMaps at once and the child reports when its handler has run for
all N. Two ways to time the burst:

- queued (the default): the child is stopped (SIGSTOP to its process group) while the N
  ConfigMaps are created and their watch events written towards it, and continued two
  seconds after the last create; events/s are N over the time from SIGCONT to the last
  handler call. The burst is waiting for the contender, so the figure is the contender's
  alone.
- ``--live``: the child runs while the events are created; events/s are N over the time
  from the first create to the last handler call, which includes this process creating and
  streaming them (a bound on the faster contender).

CPU per event is the child's own, from the sentinel to the last handler call. The ratio is
ours / kopf.

    .venv/bin/python hack/bench_kopf.py [--events 5000] [--runs 3] [--live]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
KOPF = "kopf==1.45.2"


def _usage() -> dict[str, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"t": time.time(), "cpu_s": ru.ru_utime + ru.ru_stime}


def _report(path: Path, what: str) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps({"what": what, **_usage()}) + "\n")


# --- the contenders (child processes) ---------------------------------------------------------


def child_ours(kubeconfig: str, report: Path, events: int) -> int:
    sys.path.insert(0, str(REPO))
    import anyio

    from gpustack_operator.runtime.client import Client
    from gpustack_operator.runtime.controller import Request
    from gpustack_operator.runtime.logs import configure_logging
    from gpustack_operator.runtime.manager import Manager, ManagerOptions, run_async
    from gpustack_operator.runtime.resources import CONFIGMAPS

    configure_logging("warning")

    async def main() -> None:
        client = await Client.connect(kubeconfig)
        manager = Manager(
            client, ManagerOptions(health_probe_bind_address="0", metrics_bind_address="0")
        )
        seen = 0
        done = anyio.Event()

        async def reconcile(req: Request) -> None:
            nonlocal seen
            if req.name == "sentinel":
                _report(report, "ready")
            elif req.name.startswith("burst-"):
                seen += 1
                if seen == events:
                    _report(report, "done")
                    done.set()

        manager.controller("bench-noop").for_(CONFIGMAPS).with_options(
            max_concurrent_reconciles=8
        ).complete(reconcile)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(manager.run)
                await done.wait()
                tg.cancel_scope.cancel()
        finally:
            await client.close()

    run_async(main)
    return 0


def child_kopf(kubeconfig: str, report: Path, events: int) -> int:
    import asyncio
    import logging

    import kopf

    os.environ["KUBECONFIG"] = kubeconfig
    logging.getLogger().setLevel(logging.WARNING)
    seen = 0
    stop = asyncio.Event()

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False
        settings.scanning.disabled = True
        settings.watching.server_timeout = 600

    @kopf.on.event("configmaps")
    def handle(event: dict[str, Any], name: str, **_: Any) -> None:
        nonlocal seen
        if name == "sentinel":
            _report(report, "ready")
        elif name.startswith("burst-") and event.get("type") in (None, "ADDED"):
            seen += 1
            if seen == events:
                _report(report, "done")
                stop.set()

    async def main() -> None:
        await kopf.operator(standalone=True, namespaces=[NAMESPACE], stop_flag=stop)

    asyncio.run(main())
    return 0


# --- the parent ----------------------------------------------------------------------------------


def _configmap(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {"k": name},
    }


async def _wait_line(report: Path, what: str, child: Any, bound: float) -> dict[str, Any]:
    import anyio

    path = anyio.Path(report)
    with anyio.fail_after(bound):
        while True:
            if await path.exists():
                for line in (await path.read_text()).splitlines():
                    row = json.loads(line)
                    if row["what"] == what:
                        return row  # type: ignore[no-any-return]
            if child.returncode is not None:
                raise RuntimeError(f"the contender exited ({child.returncode}) before {what!r}")
            await anyio.sleep(0.02)


async def run_one(
    name: str, command: list[str], events: int, bound: float, live: bool = False
) -> dict[str, float]:
    import anyio

    from gpustack_operator.runtime.logs import configure_logging
    from gpustack_sim.apiserver.server import SimServer

    configure_logging("warning")
    sim = SimServer(watch_history=events + 100)
    await sim.start()
    try:
        sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        with tempfile.TemporaryDirectory(prefix="bench-kopf-") as tmp:
            kubeconfig = sim.write_kubeconfig(Path(tmp) / "kubeconfig")
            report = Path(tmp) / "report.jsonl"
            child = await anyio.open_process(
                [*command, __file__, "--child", name, str(kubeconfig), str(report), str(events)],
                cwd=REPO,
                stdout=None,
                stderr=None,
                start_new_session=True,  # one process group: uv and its python stop together
            )
            try:
                sim.store.create(_configmap("sentinel"))
                ready = await _wait_line(report, "ready", child, bound)
                if not live:
                    os.killpg(child.pid, signal.SIGSTOP)
                started = time.time()
                for i in range(events):
                    sim.store.create(_configmap(f"burst-{i:06d}"))
                    if i % 64 == 0:
                        await anyio.lowlevel.checkpoint()
                if not live:
                    await anyio.sleep(2.0)  # the server writes the events out meanwhile
                    started = time.time()
                    os.killpg(child.pid, signal.SIGCONT)
                done = await _wait_line(report, "done", child, bound)
            finally:
                if child.returncode is None:
                    child.terminate()
                with anyio.fail_after(30):
                    await child.wait()
    finally:
        await sim.stop()
    seconds = done["t"] - started
    return {
        "events_per_s": events / seconds,
        "seconds": seconds,
        "cpu_ms_per_event": (done["cpu_s"] - ready["cpu_s"]) * 1000 / events,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3, help="runs of each, alternating")
    parser.add_argument("--timeout", type=float, default=600.0, help="per run (s)")
    parser.add_argument(
        "--kopf-python",
        help=f"an interpreter with {KOPF} installed (default: uv run --with {KOPF})",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="time the burst from its first create, the contender running meanwhile",
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _, kubeconfig, report, events = args.child
        run = child_kopf if args.child[0] == "kopf" else child_ours
        return run(kubeconfig, Path(report), int(events))

    import anyio

    sys.path.insert(0, str(REPO))
    if args.kopf_python:
        kopf_cmd = [args.kopf_python]
    else:
        uv = shutil.which("uv")
        if uv is None:
            parser.error("uv is not on PATH: install it, or pass --kopf-python with kopf installed")
        kopf_cmd = [uv, "run", "--no-project", "--quiet", "--with", KOPF, "python"]
    contenders = {"ours": [sys.executable], "kopf": kopf_cmd}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    for run in range(args.runs):
        for name, cmd in contenders.items():
            row = anyio.run(run_one, name, cmd, args.events, args.timeout, args.live)
            results[name].append(row)
            print(f"run {run + 1} {name}: {json.dumps(row)}", file=sys.stderr)
    median = {
        name: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        for name, rows in results.items()
    }
    ours, kopf = median["ours"], median["kopf"]
    how = "created while it ran" if args.live else "queued for it"
    print(f"{args.events:,} no-op events in a burst {how}, medians of {args.runs} runs each:")
    for name, m in median.items():
        print(
            f"  {name}: {m['events_per_s']:,.0f} events/s, "
            f"{m['cpu_ms_per_event']:.3f} ms CPU per event"
        )
    print(
        f"  ratio ours / kopf: {ours['events_per_s'] / kopf['events_per_s']:.1f}x events/s, "
        f"{kopf['cpu_ms_per_event'] / ours['cpu_ms_per_event']:.1f}x less CPU per event"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
