"""Benchmark the runtime: work-queue throughput and informer events/s against the simulator.

Not a test: it prints figures (docs/performance.md records them). Run it with

    .venv/bin/python hack/bench_runtime.py [--keys 10000] [--objects 5000] [--no-uvloop]

Measured, each in one process and one event loop:

1. the bare WorkQueue: add N distinct keys, W workers get/done them (keys/s), and a burst of
   N adds of one key while it is processing (adds/s; must cause exactly one more run);
2. a Controller with a no-op reconciler (queue + metrics + contextvars + bookkeeping);
3. an Informer against the simulated API server on a real socket: the initial paged LIST of N
   objects, then N creates streamed over the WATCH (events/s until the cache holds them all);
4. a Manager with one controller over those N objects: a full resync reconciled from the
   cache with no writes (the steady state), reconciles/s and the API writes it caused.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio
import structlog

from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.controller import Controller, Request, enqueue_object
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.logs import configure_logging
from gpustack_operator.runtime.manager import Manager, ManagerOptions, run_async
from gpustack_operator.runtime.resources import CONFIGMAPS
from gpustack_operator.runtime.workqueue import ShutDown, WorkQueue
from gpustack_sim.apiserver.server import SimServer


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s ({count:,} in {seconds * 1000:,.1f} ms)"


async def bench_queue(keys: int, workers: int) -> None:
    queue = WorkQueue("bench-queue")
    processed = 0
    all_done = anyio.Event()

    async def worker() -> None:
        nonlocal processed
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            processed += 1
            queue.done(key)
            if processed == keys:
                all_done.set()

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(workers):
            tg.start_soon(worker)
        for i in range(keys):
            queue.add(f"ns/key-{i}")
            if i % 256 == 0:
                await anyio.lowlevel.checkpoint()
        await all_done.wait()
        elapsed = time.perf_counter() - started
        queue.shut_down()
    print(f"workqueue add+get+done, {workers} workers: {rate(keys, elapsed)}")

    queue = WorkQueue("bench-burst")
    queue.add("hot")
    key = await queue.get()
    started = time.perf_counter()
    for _ in range(keys):
        queue.add(key)
    elapsed = time.perf_counter() - started
    queue.done(key)
    assert len(queue) == 1, "a burst while processing must queue the key exactly once"
    print(f"workqueue burst of adds to a processing key: {rate(keys, elapsed)} -> 1 more run")


async def bench_controller(keys: int, workers: int) -> None:
    done = 0
    all_done = anyio.Event()

    async def reconcile(req: Request) -> None:
        nonlocal done
        done += 1
        if done == keys:
            all_done.set()

    controller = Controller("bench-controller", reconcile, max_concurrent_reconciles=workers)

    class Source:
        """An always-synced source: the benchmark feeds the queue directly."""

        resource = CONFIGMAPS
        indexer: dict[str, dict[str, object]] = {}
        has_synced = True

        def add_event_handler(self, handler: object) -> None:
            return None

        def remove_event_handler(self, handler: object) -> None:
            return None

        async def wait_for_sync(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
            return True

    controller.watch(Source(), enqueue_object())
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        await anyio.wait_all_tasks_blocked()  # workers started and waiting for keys
        assert controller.started
        started = time.perf_counter()
        for i in range(keys):
            controller.queue.add(f"ns/key-{i}")
            if i % 256 == 0:
                await anyio.lowlevel.checkpoint()
        await all_done.wait()
        elapsed = time.perf_counter() - started
        tg.cancel_scope.cancel()
    print(f"controller no-op reconciles, {workers} workers: {rate(keys, elapsed)}")


async def bench_informer(objects: int) -> None:
    sim = SimServer(watch_history=objects * 2 + 100)
    await sim.start()
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = sim.write_kubeconfig(Path(tmp) / "kubeconfig")
        client = await Client.connect(kubeconfig)
        try:
            for i in range(objects):
                sim.store.create(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": f"seed-{i}", "namespace": "default"},
                        "data": {"i": str(i)},
                    }
                )
            informer = Informer(client, CONFIGMAPS)
            delivered = 0
            target = anyio.Event()

            class Count:
                def on_add(self, obj: dict[str, object]) -> None:
                    nonlocal delivered
                    delivered += 1
                    if delivered == objects:
                        target.set()

                def on_update(self, old: dict[str, object], new: dict[str, object]) -> None:
                    return None

                def on_delete(self, obj: dict[str, object]) -> None:
                    return None

            informer.add_event_handler(Count())
            async with anyio.create_task_group() as tg:
                started = time.perf_counter()
                tg.start_soon(informer.run)
                await informer.wait_for_sync()
                elapsed = time.perf_counter() - started
                print(f"informer initial LIST (paged 500): {rate(objects, elapsed)}")

                delivered = 0
                target = anyio.Event()
                started = time.perf_counter()
                for i in range(objects):
                    sim.store.create(
                        {
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "metadata": {"name": f"live-{i}", "namespace": "default"},
                            "data": {"i": str(i)},
                        }
                    )
                    if i % 64 == 0:
                        await anyio.lowlevel.checkpoint()
                await target.wait()
                elapsed = time.perf_counter() - started
                print(f"informer WATCH events (create -> handler): {rate(objects, elapsed)}")
                tg.cancel_scope.cancel()
            await bench_resync(client, sim, objects * 2)
        finally:
            await client.close()
            await sim.stop()


async def bench_resync(client: Client, sim: SimServer, objects: int) -> None:
    manager = Manager(
        client, ManagerOptions(health_probe_bind_address="0", metrics_bind_address="0")
    )
    configmaps = manager.informer(CONFIGMAPS)
    reconciled = 0
    target = anyio.Event()

    async def reconcile(req: Request) -> None:
        nonlocal reconciled
        # A steady-state reconcile: read the cache, find nothing to change, write nothing.
        configmaps.indexer.get(req.key)
        reconciled += 1
        if reconciled == objects:
            target.set()

    manager.controller("bench-resync").for_(CONFIGMAPS).with_options(
        max_concurrent_reconciles=8
    ).complete(reconcile)
    async with anyio.create_task_group() as tg:
        tg.start_soon(manager.run)
        await target.wait()  # the initial reconcile of everything
        reconciled = 0
        target = anyio.Event()
        sim.counters.reset()
        started = time.perf_counter()
        configmaps.resync()
        await target.wait()
        elapsed = time.perf_counter() - started
        print(
            f"manager full resync of {objects:,} objects: {rate(objects, elapsed)}, "
            f"API writes: {sim.counters.writes()}"
        )
        tg.cancel_scope.cancel()


async def main(args: argparse.Namespace) -> None:
    await bench_queue(args.keys, args.workers)
    await bench_controller(args.keys, args.workers)
    await bench_informer(args.objects)


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--objects", type=int, default=5000)
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args()
    configure_logging("warning", "console")
    structlog.contextvars.clear_contextvars()
    print(f"python {sys.version.split()[0]}, loop: {'asyncio' if args.no_uvloop else 'uvloop'}")
    if args.no_uvloop:
        anyio.run(main, args, backend="asyncio")
    else:
        run_async(lambda: main(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
