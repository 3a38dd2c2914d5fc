#!/usr/bin/env python3
"""Benchmark: the API client's own CPU per server-side apply, per GET and per watch event.

Not a test: it prints figures (docs/performance.md records them). The simulated API server
runs in a child process (``--serve``), so the CPU time of this process (``time.process_time``)
is the client's alone: building each request, the HTTP exchange, decoding the answer. Each
round applies ``--requests`` ConfigMaps (8 at a time), GETs as many, then opens a watch and
has the server create ``--events`` ConfigMaps, counting the CPU until every event arrived.
Prints the per-operation figure of every round and the medians.

    .venv/bin/python hack/bench_client.py [--rounds 7] [--requests 1000] [--events 2000]

It uses only ``Client.connect``, ``apply``, ``get`` and ``watch``, so the same file measures
an older checkout of the project with that checkout's interpreter (before/after figures).
``--ab COMMIT`` runs this file under COMMIT's own checkout and environment too
(``hack/abcompare.py``), ``--rounds`` times each, interleaved, and prints the median ratio
per operation (this tree / COMMIT):

    .venv/bin/python hack/bench_client.py --ab main --rounds 5 --requests 1000 --events 1000

``--kr8s`` adds the same GETs sent through kr8s's own HTTP client (httpx) with the same
credentials: what sending the runtime's requests through kr8s would cost (docs/performance.md,
"Cluster access through kr8s").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.resources import CONFIGMAPS

CONCURRENCY = 8


async def serve(kubeconfig: Path) -> None:
    """The child: a simulated API server; ``events N`` on stdin creates N ConfigMaps."""
    try:
        from gpustack_sim.apiserver.server import SimServer
    except ImportError:  # an --ab baseline from before the simulator had its own package
        from gpustack_operator.sim.server import SimServer  # type: ignore[no-redef]

    sim = SimServer(watch_history=100_000)
    await sim.start()
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "events"}})
    sim.write_kubeconfig(kubeconfig)
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    created = 0
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        count = int(line.split()[1])
        for _ in range(count):
            created += 1
            sim.store.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"event-{created}", "namespace": "events"},
                    "data": {"n": str(created)},
                }
            )
        print("done", flush=True)
    await sim.stop()


async def until_line(child: subprocess.Popen[str], expected: str) -> None:
    """Read the child's output up to a line *expected* (its log lines come first)."""
    assert child.stdout is not None
    while (line := await anyio.to_thread.run_sync(child.stdout.readline)).strip() != expected:
        if not line:
            raise RuntimeError(f"the server process ended before it printed {expected!r}")


def per_op_us(started: float, count: int) -> float:
    return (time.process_time() - started) / count * 1e6


async def in_parallel(count: int, operation: object) -> None:
    async def worker(offset: int) -> None:
        for i in range(offset, count, CONCURRENCY):
            await operation(i)  # type: ignore[operator]

    async with anyio.create_task_group() as tg:
        for offset in range(CONCURRENCY):
            tg.start_soon(worker, offset)


async def one_round(
    client: Client, child: subprocess.Popen[str], args: argparse.Namespace, n: int
) -> dict[str, float]:
    requests = args.requests

    async def apply(i: int) -> None:
        body = {
            "metadata": {"name": f"cm-{i % 200}", "namespace": "default"},
            "data": {"round": str(n), "i": str(i)},
        }
        await client.apply(CONFIGMAPS, body, field_manager="bench", force=True)

    async def get(i: int) -> None:
        await client.get(CONFIGMAPS, f"cm-{i % 200}", "default")

    started = time.process_time()
    await in_parallel(requests, apply)
    result = {"apply": per_op_us(started, requests)}
    started = time.process_time()
    await in_parallel(requests, get)
    result["get"] = per_op_us(started, requests)
    if args.kr8s:
        from gpustack_operator.kubeconfig import close_kr8s, connect_kr8s

        api = await connect_kr8s(args.kubeconfig, None)

        async def get_kr8s(i: int) -> None:
            async with api.call_api("GET", url=f"namespaces/default/configmaps/cm-{i % 200}") as r:
                r.json()

        try:
            started = time.process_time()
            await in_parallel(requests, get_kr8s)
            result["get through kr8s"] = per_op_us(started, requests)
        finally:
            await close_kr8s(api)

    rv = (await client.list(CONFIGMAPS, "events", limit=1)).resource_version
    async with client.watch(CONFIGMAPS, "events", resource_version=rv) as stream:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(f"events {args.events}\n")
        child.stdin.flush()
        started = time.process_time()
        seen = 0
        async for event in stream:
            if event.type == "ADDED":
                seen += 1
                if seen == args.events:
                    break
        result["watch event"] = per_op_us(started, args.events)
    await until_line(child, "done")
    return result


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        child = subprocess.Popen(  # noqa: ASYNC220 - once, before anything is measured
            [sys.executable, __file__, "--serve", str(kubeconfig)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            await until_line(child, "ready")
            args.kubeconfig = kubeconfig
            client = await Client.connect(kubeconfig)
            rounds: list[dict[str, float]] = []
            try:
                for n in range(args.rounds):
                    rounds.append(await one_round(client, child, args, n))
                    print(json.dumps({k: round(v, 1) for k, v in rounds[-1].items()}))
            finally:
                await client.close()
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=30)
    medians = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(
        "medians (µs of client CPU per operation):",
        json.dumps({k: round(v, 1) for k, v in medians.items()}),
    )
    if args.json_out:
        args.json_out.write_text(json.dumps(medians))


def compare(args: argparse.Namespace) -> None:
    """A/B against ``--ab``: each round runs this file once under each side's interpreter
    (one round of each operation), interleaved; the median ratios printed."""
    from abcompare import Side, both, interleave, report

    sides = both(args.ab, sys.executable)

    def measure(side: Side) -> dict[str, float]:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "medians.json"
            command = [str(side.python), __file__, "--rounds", "1", "--json-out", str(out)]
            command += ["--requests", str(args.requests), "--events", str(args.events)]
            subprocess.run(command, cwd=side.repo, check=True, capture_output=True)
            return {k: float(v) for k, v in json.loads(out.read_text()).items()}

    results = interleave(args.rounds, sides, measure)
    report(results, sides, ("apply", "get", "watch event"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--kr8s", action="store_true", help="also GET through kr8s's client")
    parser.add_argument(
        "--ab", metavar="COMMIT", help="also run COMMIT (own checkout and environment); ratios"
    )
    parser.add_argument("--json-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.serve:
        asyncio.run(serve(parsed.serve))
    elif parsed.ab:
        compare(parsed)
    else:
        anyio.run(main, parsed)
