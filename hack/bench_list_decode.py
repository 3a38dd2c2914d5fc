"""Benchmark how long decoding a large LIST body holds the event loop.

Not a test: it prints figures (docs/performance.md records them). Run it with

    .venv/bin/python hack/bench_list_decode.py [--items 500 5000] [--repeat 3]

For each size it builds a NodeList body shaped like the worker's Nodes (40 labels each),
then decodes it on the event loop while a ticker task sleeps 1 ms at a time, and reports the
decode's wall time and the longest time the loop was held between two ticks, in CPU time of
the loop's thread (the hold with nothing to decode is printed first). Two ways
are compared: ``json.loads`` in one call (before) and ``runtime.jsondecode.decode_object``
(after: item by item, handing the loop back every 2 ms).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from gpustack_operator.runtime.jsondecode import decode_object


def node_list(count: int) -> bytes:
    items = [
        {
            "metadata": {
                "name": f"node-{i:05d}",
                "uid": f"{i:036d}",
                "resourceVersion": str(1000 + i),
                "labels": {f"feature.node.kubernetes.io/label-{j}": "v" * 20 for j in range(40)},
            },
            "status": {"capacity": {"cpu": "16", "memory": "64Gi"}},
        }
        for i in range(count)
    ]
    return json.dumps({"kind": "NodeList", "apiVersion": "v1", "items": items}).encode()


async def measure(decode: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """(decode seconds, longest loop hold in seconds) for one decode.

    The hold is measured in CPU time of the loop's thread between two ticks
    (``time.thread_time``): on a shared machine the wall-clock gap also counts the time the
    OS gave the CPU to other processes, which no decoder can avoid.
    """
    gaps: list[float] = []
    done = anyio.Event()

    async def ticker() -> None:
        last = time.thread_time()
        while not done.is_set():
            await anyio.sleep(0.001)
            now = time.thread_time()
            gaps.append(now - last)
            last = now

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await anyio.sleep(0.02)
        started = time.perf_counter()
        decoded = await decode()
        took = time.perf_counter() - started
        await anyio.sleep(0.02)
        done.set()
    del decoded  # freed after measuring: a cache keeps what it decodes
    return took, max(gaps)


async def main(sizes: list[int], repeat: int) -> None:
    idle = sorted([(await measure(lambda: anyio.sleep(0.2)))[1] for _ in range(repeat)])
    print(f"longest loop hold with nothing to decode: {idle[len(idle) // 2] * 1e3:.1f} ms")
    print("| items | body | json.loads: decode / loop held | incremental: decode / loop held |")
    print("|---|---|---|---|")
    for count in sizes:
        body = node_list(count)

        async def before(body: bytes = body) -> Any:
            return json.loads(body)

        async def after(body: bytes = body) -> Any:
            return await decode_object(body)

        rows = []
        for way in (before, after):
            runs = [await measure(way) for _ in range(repeat)]
            took = sorted(r[0] for r in runs)[len(runs) // 2]
            held = sorted(r[1] for r in runs)[len(runs) // 2]
            rows.append(f"{took * 1e3:.0f} ms / {held * 1e3:.1f} ms")
        print(f"| {count:,} | {len(body) / 2**20:.1f} MiB | {rows[0]} | {rows[1]} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[500, 5000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    anyio.run(main, args.items, args.repeat)
