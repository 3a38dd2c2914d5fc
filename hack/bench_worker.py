#!/usr/bin/env python3
"""Benchmark: the worker from an empty chain to convergence on N simulated nodes.

Not a test. For each N (``--nodes 100 1000 5000``) it builds N nodes of mixed hardware
(four CPU models; none, NVIDIA T4/A10G/H100, AMD MI300X or Ascend 910B cards; some sliced,
some opted out), starts the simulated API server with the NFD-master stand-in in this
process, creates the device manager's NodeFeatures directly (what the agents would publish:
the worker's requests are then the only ones the server counts), and starts the worker in a
child process (``--worker-child``) so that its CPU time and peak RSS are the worker's alone.

Measured: wall time from the worker's start to the first moment the server holds exactly
what ``plan`` computes (confirmed by a quiet period), the worker's CPU time and peak RSS up to
then (the child reports ``getrusage`` on SIGUSR1), API requests by verb, writes per desired
object (writes of the desired kinds; the worker's Events and state ConfigMaps are reported
apart, as ``other_writes``), and the writes during one forced resync after convergence (0
expected). The child runs as ``gpustack-operator worker`` does, without a periodic resync
(``--resync-period`` adds one); after convergence the parent asks it (SIGUSR2) to deliver
every cached object of every informer again and counts the writes for ``--resync`` seconds.
Prints a Markdown table.

    .venv/bin/python hack/bench_worker.py --nodes 100 1000

``--ab COMMIT`` runs the worker child of COMMIT too (its own checkout and environment,
``hack/abcompare.py``), interleaved with this tree's for ``--rounds`` rounds against the same
simulated cluster (this tree's), and prints the median ratio of the worker's CPU, start-up CPU,
wall time and peak RSS (this tree / COMMIT):

    .venv/bin/python hack/bench_worker.py --nodes 5000 --resync 2 --ab main --rounds 3

``--plane real`` runs the same measurement against the real API server of the real-cluster
tier (docs/realcluster.md: etcd and kube-apiserver built by ``make real-cluster``, with the
Kueue and NFD CRDs; no Kueue manager, kube-controller-manager or kube-scheduler, since the
worker's convergence needs none of them and the node lifecycle controller would mark the
heartbeat-less Nodes unreachable). The parent registers the Nodes, creates the device
manager's NodeFeatures and merges NodeFeature labels onto the Nodes as nfd-master does (the
tier's node stand-in); convergence is the tier's check against ``plan --kubeconfig``, polled,
and writes are kube-apiserver's ``apiserver_request_total`` write verbs on the chain's resources
(ResourceFlavors, Cohorts, ClusterQueues, LocalQueues, Topologies, NodeFeatures; the device
manager's NodeFeatures are created before the worker starts):

    .venv/bin/python hack/bench_worker.py --plane real --nodes 5000 --resync 2

``--tas off`` runs both the worker and the convergence check with Kueue Topology-Aware
Scheduling off (docs/topology.md, "The switch"): an A/B against a commit older than TAS needs
it, since that worker never writes the topology label this tree's ``plan`` expects.

``--floor`` runs, on this tree's side, the runtime's floor instead of the worker
(:func:`floor_child`: handed the objects ``plan`` computed, it only watches Nodes and NodeFeatures
and writes what it was handed); with ``--ab`` its CPU against a full worker's is the part of that
worker's CPU no cut in the chain can remove (docs/performance.md, "The runtime's floor"):

    .venv/bin/python hack/bench_worker.py --nodes 2000 --resync 2 --tas off --floor --ab 4f696e7

``BENCH_WORKER_PROFILE=FILE`` writes a cProfile of the worker (or floor) child to FILE;
``BENCH_WORKER_LOG_LEVEL=info`` shows its logs; ``BENCH_WORKER_TRACEMALLOC=FILE`` writes
the 40 largest allocation sites (tracemalloc) at convergence to FILE and the whole snapshot
to FILE.snapshot (``tracemalloc.Snapshot.load``; two runs' difference divided by the difference
in nodes is the worker's cost per node, docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import resource
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from abcompare import Side, both, interleave, report, this_tree

REPO = Path(__file__).resolve().parents[1]
# The worker child of an A/B run imports the project of the other side's checkout.
sys.path.insert(0, os.environ.get("BENCH_WORKER_REPO") or str(REPO))

CPUS = [  # vendor, family, model, name, cpu, memory (KiB), storage
    ("AMD", "25", "1", "AMD EPYC 7763 64-Core Processor", "64", "263781504Ki", "1Ti"),
    (
        "Intel",
        "6",
        "106",
        "Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz",
        "32",
        "131890412Ki",
        "500Gi",
    ),
    ("Intel", "6", "143", "Intel(R) Xeon(R) Platinum 8480+", "112", "1056762036Ki", "3Ti"),
    ("VendorUnknown", None, None, "Kunpeng 920", "96", "527769352Ki", "2Ti"),
]
CARDS = [  # (manufacturer, name, memoryMiB, count) or None
    None,
    None,
    ("nvidia", "Tesla T4", 15360, 2),
    ("nvidia", "NVIDIA A10G", 23028, 4),
    ("nvidia", "NVIDIA H100 80GB HBM3", 81559, 8),
    ("amd", "AMD Instinct MI300X", 196592, 8),
    ("ascend", "Ascend 910B", 65536, 8),
]


def mixed_nodes(count: int) -> list[dict[str, Any]]:
    """*count* Nodes, hardware drawn round-robin (deterministic)."""
    nodes = []
    for i in range(count):
        vendor, family, model, name, cpu, mem, stg = CPUS[i % len(CPUS)]
        card = CARDS[(i // len(CPUS)) % len(CARDS)]
        labels = {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "arm64" if vendor == "VendorUnknown" else "amd64",
            "kubernetes.io/hostname": f"node-{i:05d}",
            "feature.node.kubernetes.io/cpu-model.vendor_id": vendor,
        }
        if family:
            labels["feature.node.kubernetes.io/cpu-model.family"] = family
            labels["feature.node.kubernetes.io/cpu-model.id"] = model  # type: ignore[assignment]
        annotations = {"feature.gpustack.ai/cpu-name": name}
        if card is not None:
            mfr, product, memory, cards = card
            annotations["sim.gpustack.ai/devices"] = json.dumps(
                [{"manufacturer": mfr, "name": product, "memoryMiB": memory, "count": cards}]
            )
            if i % 10 == 3 and mfr == "nvidia":
                akey = "nvidia-" + product.lower().replace("nvidia ", "").replace(" ", "-")
                labels[f"acceleratable.feature.gpustack.ai/{akey}.sliced.partitions"] = "4"
        if i % 50 == 49:
            labels["gpustack.ai/managed"] = "false"
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"node-{i:05d}", "labels": labels, "annotations": annotations},
                "status": {"capacity": {"cpu": cpu, "memory": mem, "ephemeral-storage": stg}},
            }
        )
    return nodes


# --- the worker child -------------------------------------------------------------------------


def _peak_rss_mib() -> float:
    """This process's own peak RSS: VmHWM, not ``ru_maxrss``.

    On Linux a child started by fork+exec keeps the high-water mark of its forked copy of
    the parent in ``ru_maxrss`` (a 100 MiB worker reported the parent's 400 MiB); VmHWM
    belongs to the exec'd image alone.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mib() -> float:
    """This process's resident memory now (VmRSS), beside the peak: what the caches hold at
    convergence, apart from what a cold start's LIST held for a while."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _shared_changed() -> int | None:
    """How many of the containers cached objects share were mutated (0: the read-only
    contract held); None for a checkout that shares none."""
    try:
        from gpustack_operator.runtime.cache import shared_values
    except ImportError:
        return None
    return shared_values().drop_changed()


def _usage() -> dict[str, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu_s": ru.ru_utime + ru.ru_stime,
        "max_rss_mib": _peak_rss_mib(),
        "rss_mib": _rss_mib(),
    }


def _worker_config(config: Any, tas: bool) -> Any:
    """*config* (the checkout's ``WorkerConfig``) with TAS off unless *tas*."""
    if tas:
        return config()
    try:
        from gpustack_operator.domain.node.nodetopology import TopologyPolicy
        from gpustack_operator.domain.plan.policy import ChainPolicy
        from gpustack_operator.environment import load_manufacturers
    except ImportError:  # a checkout older than TAS
        return config()
    return config(policy=ChainPolicy(load_manufacturers(), topology=TopologyPolicy(enabled=False)))


def worker_child(kubeconfig: str, report: Path, resync_period: float, tas: bool = True) -> int:
    """Run the worker until SIGTERM; SIGUSR1 appends a getrusage snapshot to *report*,
    SIGUSR2 resyncs every informer once. *tas* False: TAS off (a checkout older than TAS has
    none to turn off)."""
    from gpustack_operator.runtime.logs import configure_logging
    from gpustack_operator.runtime.manager import ManagerOptions, run_async

    try:
        wiring = importlib.import_module("gpustack_operator.wiring")
    except ImportError:  # a checkout from before the worker's wiring left controllers/
        # (spelled in parts so that hack/layout_moves.py leaves the old name alone)
        wiring = importlib.import_module(".".join(("gpustack_operator", "controllers", "worker")))
    WorkerConfig = wiring.WorkerConfig
    new_worker_manager = wiring.new_worker_manager
    setup_worker = wiring.setup_worker

    configure_logging(os.environ.get("BENCH_WORKER_LOG_LEVEL", "warning"))

    memory_to = os.environ.get("BENCH_WORKER_TRACEMALLOC")
    if memory_to:
        import tracemalloc

        tracemalloc.start()

    def snapshot(*_: object) -> None:
        with report.open("a") as fh:
            fh.write(json.dumps({**_usage(), "shared_changed": _shared_changed()}) + "\n")
        if memory_to:
            taken = tracemalloc.take_snapshot()
            taken.dump(memory_to + ".snapshot")  # for compare_to between two runs
            top = taken.statistics("lineno")[:40]
            Path(memory_to).write_text("\n".join(str(stat) for stat in top) + "\n")

    signal.signal(signal.SIGUSR1, snapshot)

    async def main() -> int:
        client = await _started_and_connected(kubeconfig, report)
        options = ManagerOptions(
            health_probe_bind_address="0",
            metrics_bind_address="0",
            resync_period=resync_period or None,
            # The first LIST of tens of thousands of Nodes from the simulated server can
            # outlast the default 120 s (the worker's --cache-sync-timeout); the benchmark
            # measures the converge, not the start-up bound.
            cache_sync_timeout=900.0,
        )
        manager = new_worker_manager(client, options)
        setup_worker(manager, _worker_config(WorkerConfig, tas))
        return await _serve(manager, client)

    return _run_child(run_async, main)


async def _started_and_connected(kubeconfig: str, report: Path) -> Any:
    """Report that the child's imports are done (its start-up CPU), then connect.

    The benchmark's server shares its event loop with the parent, which may still be busy
    seeding a large cluster: the child waits for it rather than failing the run."""
    from gpustack_operator.runtime.client import ApiUnavailable, Client

    with report.open("a") as fh:
        fh.write(json.dumps({"started": time.time(), **_usage()}) + "\n")
    deadline = time.monotonic() + 900
    while True:
        try:
            return await Client.connect(kubeconfig)
        except ApiUnavailable:
            if time.monotonic() > deadline:
                raise


async def _serve(manager: Any, client: Any) -> int:
    """Run *manager* until SIGTERM; SIGUSR2 delivers every cached object of every informer
    again (the forced resync the parent counts writes after)."""

    def resync_all() -> None:
        for informer in manager.informers.informers:
            informer.resync()

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, resync_all)
    try:
        return int(await manager.run_until_signal())
    finally:
        await client.close()


def _run_child(run_async: Any, main: Any) -> int:
    """Run a child's *main* with *run_async*, under cProfile when ``BENCH_WORKER_PROFILE``
    names a file."""
    profile_to = os.environ.get("BENCH_WORKER_PROFILE")
    if not profile_to:
        return int(run_async(main))
    import cProfile

    profiler = cProfile.Profile()
    try:
        return int(profiler.runcall(run_async, main))
    finally:
        profiler.dump_stats(profile_to)


def floor_child(kubeconfig: str, report: Path, expected: Path) -> int:
    """The runtime's floor: a worker that is handed every object ``plan`` wants (*expected*)
    instead of computing it, and keeps only what any worker of this runtime pays for.

    It applies the chain's Kueue objects once, then watches Nodes and the worker's
    NodeFeatures through the runtime's informers (the runtime's own transform only, not the
    worker's), reconciles each Node by comparing its NodeFeature in the cache with the wanted
    one, and applies it through the worker's writer: the decoding, caching, dispatch,
    queueing and writes of the real worker's event stream, with no node model, index or
    chain computed. Its CPU against a full worker's is the share of the worker's CPU that no
    cut in the chain can remove (docs/performance.md, "The runtime's floor").
    """
    from gpustack_operator.apis import NODE_FEATURES
    from gpustack_operator.domain.labels import NFD_NODE_NAME_LABEL, PART_OF_LABEL, PART_OF_WORKER
    from gpustack_operator.runtime.controller import Request
    from gpustack_operator.runtime.logs import configure_logging
    from gpustack_operator.runtime.manager import Manager, ManagerOptions, run_async
    from gpustack_operator.runtime.resources import NODES, Resource
    from gpustack_operator.worker.common import Writer, is_up_to_date

    configure_logging(os.environ.get("BENCH_WORKER_LOG_LEVEL", "warning"))
    objects: list[dict[str, Any]] = json.loads(expected.read_text())
    selector = f"{PART_OF_LABEL}={PART_OF_WORKER}"
    features: dict[str, dict[str, Any]] = {}
    chain: list[tuple[Resource, dict[str, Any]]] = []
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] == "NodeFeature":
            labels = meta.get("labels") or {}
            if labels.get(PART_OF_LABEL) == PART_OF_WORKER:
                features[labels[NFD_NODE_NAME_LABEL]] = obj
            continue
        group, _, version = obj["apiVersion"].rpartition("/")
        kind = obj["kind"]
        plural = kind.lower() + "s"
        chain.append((Resource(group, version, kind, plural, bool(meta.get("namespace"))), obj))
    namespace = next(iter(features.values()))["metadata"]["namespace"]

    def snapshot(*_: object) -> None:
        with report.open("a") as fh:
            fh.write(json.dumps({**_usage(), "shared_changed": None}) + "\n")

    signal.signal(signal.SIGUSR1, snapshot)

    async def main() -> int:
        client = await _started_and_connected(kubeconfig, report)
        manager = Manager(
            client,
            ManagerOptions(
                health_probe_bind_address="0",
                metrics_bind_address="0",
                cache_sync_timeout=900.0,
            ),
        )
        writer = Writer(client, "gpustack-operator", None, manager.fence)
        nodes = manager.informer(NODES)
        cached = manager.informer(NODE_FEATURES, namespace=namespace, label_selector=selector)

        async def reconcile(request: Request) -> None:
            node = nodes.indexer.get(request.key)
            planned = features.get(request.key)
            if node is None or planned is None:
                return
            owner = {
                "apiVersion": "v1",
                "kind": "Node",
                "name": request.key,
                "uid": node["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": False,
            }  # as the worker's NodeFeature has it; plan's has no uid to name
            want = {**planned, "metadata": {**planned["metadata"], "ownerReferences": [owner]}}
            have = cached.indexer.get(f"{namespace}/{want['metadata']['name']}")
            if not is_up_to_date(have, want):
                await writer.apply(NODE_FEATURES, want, existed=have is not None, cache=cached)

        (
            manager.controller("floor")
            .for_(NODES)
            .owns(NODE_FEATURES, namespace=namespace, label_selector=selector)
            .complete(reconcile)
        )
        for kind, obj in chain:
            await writer.apply(kind, obj, existed=False)
        return await _serve(manager, client)

    return _run_child(run_async, main)


# --- the parent -------------------------------------------------------------------------------


async def _read_report(path: Path, lines: int) -> dict[str, float]:
    report = anyio.Path(path)
    with anyio.fail_after(10):
        while True:
            rows = (await report.read_text()).splitlines() if await report.exists() else []
            if len(rows) >= lines:
                return json.loads(rows[lines - 1])  # type: ignore[no-any-return]
            await anyio.sleep(0.05)


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 20 values is the largest)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


async def reaction_latencies(cluster: Any, changes: int) -> dict[str, Any]:
    """Remove and restore single nodes' accelerators; time each until its queues are written.

    Each change edits one node's device-manager NodeFeature (what the agent would publish
    when a card disappears or comes back); the NFD stand-in merges it into the Node, the
    worker republishes the node's capacity labels, and its ClusterQueues' quotas change.
    The latency is from the edit to the last ClusterQueue write it causes (no further
    write for 3 s), measured after a quiet period, so it is a lone change, not a burst.
    """
    store = cluster.sim.store
    writes: list[tuple[float, str]] = []

    def record(event_type: str, obj: dict[str, Any]) -> None:
        if obj.get("kind") in ("ClusterQueue", "Node"):
            writes.append((time.monotonic(), obj["kind"]))

    features = [
        f
        for f in store.list("nfd.k8s-sigs.io/v1alpha1", "NodeFeature", "gpustack-system")
        if f["metadata"]["name"].endswith("-gpustack-device-manager") and f["spec"].get("labels")
    ]
    unsubscribe = store.subscribe(record)
    to_queue: list[float] = []
    to_node: list[float] = []
    try:
        for i in range(changes):
            name = features[(i // 2) * 7 % len(features)]["metadata"]["name"]
            stored = store.get("nfd.k8s-sigs.io/v1alpha1", "NodeFeature", name, "gpustack-system")
            original = next(f for f in features if f["metadata"]["name"] == name)
            stored["spec"]["labels"] = {} if i % 2 == 0 else dict(original["spec"]["labels"])
            writes.clear()
            edited = time.monotonic()
            store.update(stored)
            with anyio.fail_after(60):
                while True:
                    await anyio.sleep(0.02)
                    queues = [t for t, kind in writes if kind == "ClusterQueue"]
                    if queues and time.monotonic() - queues[-1] >= 3.0:
                        break
            to_queue.append(queues[-1] - edited)
            nodes = [t for t, kind in writes if kind == "Node"]
            to_node.append(nodes[0] - edited if nodes else float("nan"))
    finally:
        unsubscribe()
    return {
        "changes": changes,
        "queue_p50_s": _percentile(to_queue, 50),
        "queue_p99_s": _percentile(to_queue, 99),
        "node_p50_s": _percentile(to_node, 50),
        "latencies_s": to_queue,
    }


async def bench(
    count: int,
    bound: float,
    resync: float,
    reaction: int = 0,
    resync_period: float = 0.0,
    worker: Side | None = None,
    tas: bool = True,
    floor: bool = False,
) -> dict[str, Any]:
    """One run; the worker child runs from *worker*'s checkout and environment (default this
    tree's). *floor*: this tree's side runs :func:`floor_child` instead of the worker."""
    from gpustack_operator.domain.plan.plan import apply_sim_devices
    from gpustack_operator.environment import load_manufacturers
    from gpustack_operator.runtime.logs import configure_logging
    from gpustack_sim.cluster.cluster import SimCluster

    configure_logging("warning")
    nodes = mixed_nodes(count)
    manufacturers = load_manufacturers()
    with tempfile.TemporaryDirectory(prefix="bench-worker-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig.yaml"
        report = Path(tmp) / "usage.jsonl"
        policy = None
        if not tas:
            from gpustack_operator.domain.node.nodetopology import TopologyPolicy
            from gpustack_operator.domain.plan.policy import ChainPolicy

            policy = ChainPolicy(manufacturers, topology=TopologyPolicy(enabled=False))
        async with SimCluster(
            nodes,
            ["default", "team-a"],
            run_worker=False,
            run_agents=False,
            kubeconfig=kubeconfig,
            policy=policy,
        ) as cluster:
            _, dm_features = apply_sim_devices(nodes, manufacturers)
            for feature in dm_features:  # what the agents would publish, not counted
                cluster.sim.store.create(feature)
            with anyio.fail_after(bound):
                while not cluster.nfd.idle():  # noqa: ASYNC110 - polls the stand-in
                    await anyio.sleep(0.05)
            expected = cluster.expected()
            desired = Counter(obj["kind"] for obj in expected.objects())
            desired["NodeFeature"] -= len(dm_features)  # the worker's NodeFeatures only
            side = worker or this_tree(sys.executable)
            if floor and side.repo == REPO:
                wanted = Path(tmp) / "expected.json"
                wanted.write_text(json.dumps(expected.objects()))
                command = ["--floor-child", str(kubeconfig), str(report), str(wanted)]
            else:
                command = ["--worker-child", str(kubeconfig), str(report)]
            cluster.sim.counters.reset()
            spawned = time.time()
            child = await anyio.open_process(
                [
                    str(side.python),
                    __file__,
                    *command,
                    "--resync-period",
                    str(resync_period),
                    "--tas",
                    "on" if tas else "off",
                ],
                cwd=side.repo,
                env={**os.environ, "BENCH_WORKER_REPO": str(side.repo)},
                stdout=None,
                stderr=None,
            )
            try:
                settle = 1.0 + count / 2000
                converged = await _converged(cluster, expected, bound, settle, child)
                child.send_signal(signal.SIGUSR1)
                start = await _read_report(report, 1)
                usage = await _read_report(report, 2)
                counts = cluster.sim.counters.snapshot()
                cluster.sim.counters.reset()
                child.send_signal(signal.SIGUSR2)  # every cached object reconciled again
                await anyio.sleep(resync)
                steady_writes = cluster.sim.counters.writes()
                reactions = await reaction_latencies(cluster, reaction) if reaction else None
            finally:
                child.send_signal(signal.SIGTERM)
                with anyio.fail_after(60):
                    await child.wait()
    by_verb: Counter[str] = Counter()
    writes_by_kind: Counter[str] = Counter()
    for (verb, kind), n in counts.items():
        if verb == "apply":
            continue  # also counted under patch
        by_verb[verb] += n
        if verb in ("create", "update", "patch", "delete", "deletecollection"):
            writes_by_kind[kind] += n
    total_desired = sum(desired.values())
    # Per desired object: the chain's kinds only, as the real plane counts them; the worker's
    # Events and its state ConfigMaps (the timers, the node report) are no desired object.
    chain_writes = sum(n for kind, n in writes_by_kind.items() if kind in desired)
    return {
        "nodes": count,
        "wall_s": converged - start["started"],
        "startup_s": start["started"] - spawned,
        "cpu_s": usage["cpu_s"],
        "startup_cpu_s": start["cpu_s"],
        "max_rss_mib": usage["max_rss_mib"],
        "rss_mib": usage.get("rss_mib", 0.0),
        "shared_changed": usage.get("shared_changed"),
        "by_verb": dict(by_verb),
        "desired": dict(desired),
        "writes_by_kind": dict(writes_by_kind),
        "writes_per_object": chain_writes / max(1, total_desired),
        "other_writes": {k: n for k, n in writes_by_kind.items() if k not in desired},
        "steady_writes": steady_writes,
        "host_cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "reaction": reactions,
    }


async def _converged(
    cluster: Any, expected: Any, bound: float, settle: float, child: Any = None
) -> float:
    """The wall-clock time from which the server has held *expected* (what ``plan`` computed
    before the worker started) and stayed still for *settle* seconds.

    The simulated server shares this process's event loop with the check, so the check must
    not hold the loop while the worker is busy: computing ``plan`` again (over a minute at
    20,000 nodes) or reading and comparing the whole chain on every poll made the worker's
    requests time out. Here ``plan`` is computed once, before the worker starts, and the chain
    is compared only once the store's resourceVersion has stood still for *settle* seconds
    (a cheap poll); the state it was still at is then the converged one. A worker *child*
    that has exited ends the wait at once (its log says why).
    """
    from gpustack_sim.cluster.chain import differences

    store = cluster.sim.store
    deadline = time.monotonic() + bound
    seen_rv, seen_at = store.resource_version, time.time()
    compared_rv = -1
    left: list[str] = []
    while True:
        await anyio.sleep(0.1)
        rv = store.resource_version
        if rv != seen_rv:
            seen_rv, seen_at = rv, time.time()
        elif rv != compared_rv and time.time() - seen_at >= settle:
            compared_rv = rv
            left = differences(cluster.actual(), expected, server_defaults=cluster.server_defaults)
            if not left and store.resource_version == rv:
                return seen_at
        if child is not None and child.returncode is not None:
            raise SystemExit(f"bench_worker: the worker exited ({child.returncode}) first")
        if time.monotonic() > deadline:
            raise SystemExit(
                f"bench_worker: not converged within {bound:.0f} s; {len(left)} differences "
                f"from plan at the last comparison, e.g. {left[:3]}"
            )


_WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION")
_CHAIN_RESOURCES = (
    "resourceflavors",
    "cohorts",
    "clusterqueues",
    "localqueues",
    "topologies",
    "nodefeatures",
)
"""What the worker writes; the parent writes Nodes, kube-apiserver its own Endpoints."""


async def _apiserver_writes(http: Any) -> Counter[str]:
    """kube-apiserver's write requests so far by chain resource (``apiserver_request_total``,
    every response code)."""
    text = (await http.get("/metrics")).text
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(
            part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split(",")
        )
        verb = labels.get("verb", "").strip('"')
        resource_name = labels.get("resource", "").strip('"')
        if verb in _WRITE_VERBS and resource_name in _CHAIN_RESOURCES:
            counts[resource_name] += int(float(line.rsplit(" ", 1)[1]))
    return counts


async def bench_real(count: int, bound: float, resync: float) -> dict[str, Any]:
    """One run against the real-cluster tier's etcd and kube-apiserver (module docstring)."""
    import httpx

    from gpustack_operator.domain.plan.plan import apply_sim_devices
    from gpustack_operator.environment import load_manufacturers
    from tests.realcluster.cluster import chain_differences
    from tests.realcluster.controlplane import (
        ControlPlane,
        cached_binaries,
        crd_documents,
        kueue_crds,
        shared_dir,
    )
    from tests.realcluster.nodes import NodeAgents

    binaries, shared = cached_binaries(), shared_dir()
    if binaries is None or shared is None:
        raise SystemExit(
            "bench_worker: --plane real needs the tier's binaries (`make real-cluster`) and "
            "../shared (the real CRDs)"
        )
    nodes = mixed_nodes(count)
    manufacturers = load_manufacturers()
    with tempfile.TemporaryDirectory(prefix="bench-worker-real-") as tmp:
        workdir = Path(tmp)
        plane = ControlPlane(binaries, workdir, shared)
        report = workdir / "usage.jsonl"
        try:
            plane._start_etcd()
            plane._start_apiserver()
            _say(f"etcd and kube-apiserver ready (logs: {plane.logs})")
            crds = shared / "crds"
            documents = kueue_crds(
                crds / "kueue-v0.19.2",
                shared / "kueue-v0.19.2-extras" / "conversion-patches",
                f"https://127.0.0.1:{plane.kueue_webhook_port}",
                plane.ca.pem,
            ) + crd_documents(crds / "nfd-v0.19.0")
            plane.kubectl_run(
                "create",
                "-f",
                "-",
                stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": documents}),
            )
            plane.apply(
                [
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                    for ns in ("gpustack-system", "team-a")
                ]
            )
            agents = NodeAgents(plane.server, plane.admin_tls(), manufacturers)
            async with httpx.AsyncClient(
                base_url=plane.server, verify=plane.admin_tls(), timeout=60
            ) as http:
                limit = anyio.Semaphore(16)

                async def publish(feature: dict[str, Any]) -> None:
                    namespace = feature["metadata"]["namespace"]
                    async with limit:
                        response = await http.post(
                            f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{namespace}/nodefeatures",
                            json=feature,
                        )
                        response.raise_for_status()

                registering = time.monotonic()
                _, dm_features = apply_sim_devices(nodes, manufacturers)
                async with anyio.create_task_group() as tg:
                    for feature in dm_features:  # what the agents would publish
                        tg.start_soon(publish, feature)
                # Each Node created once, with its status and NFD's labels (no Lease: nothing
                # watches them); the merge then finds nothing to change.
                await agents.register(nodes, features=dm_features, keep_alive=False)
                await agents._merge_node_features()
                seeded = time.monotonic() - registering
                _say(f"{count:,} Nodes and their NodeFeatures in {seeded:.1f} s")
                kubeconfig = plane.admin_kubeconfig
                planned = json.loads(_plan(kubeconfig))
                before = await _apiserver_writes(http)
                spawned = time.time()
                child = await anyio.open_process(
                    [
                        sys.executable,
                        __file__,
                        "--worker-child",
                        str(kubeconfig),
                        str(report),
                        "--resync-period",
                        "0",
                    ],
                    cwd=REPO,
                    stdout=None,
                    stderr=None,
                )
                try:
                    converged = await _poll_converged(
                        plane, planned, agents, bound, kubeconfig, chain_differences
                    )
                    child.send_signal(signal.SIGUSR1)
                    start = await _read_report(report, 1)
                    usage = await _read_report(report, 2)
                    after = await _apiserver_writes(http)
                    child.send_signal(signal.SIGUSR2)
                    await anyio.sleep(resync)
                    steady = sum((await _apiserver_writes(http) - after).values())
                finally:
                    child.send_signal(signal.SIGTERM)
                    with anyio.fail_after(60):
                        await child.wait()
            await agents.aclose()
        finally:
            plane.stop()
    writes = after - before
    desired = Counter(
        o["kind"]
        for o in planned["items"]
        if not (o["kind"] == "NodeFeature" and o["metadata"]["name"].endswith("-device-manager"))
    )
    return {
        "plane": "real",
        "nodes": count,
        "seed_s": seeded,
        "wall_s": converged - start["started"],
        "startup_s": start["started"] - spawned,
        "cpu_s": usage["cpu_s"],
        "startup_cpu_s": start["cpu_s"],
        "max_rss_mib": usage["max_rss_mib"],
        "desired": dict(desired),
        "writes_by_resource": dict(writes),
        "writes_per_object": sum(writes.values()) / max(1, sum(desired.values())),
        "steady_writes": steady,
        "host_cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
    }


def _say(message: str) -> None:
    print(f"bench_worker: {message}", file=sys.stderr, flush=True)


def _plan(kubeconfig: Path) -> str:
    """``gpustack-operator plan --kubeconfig`` of the live cluster, as JSON text."""
    import subprocess

    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpustack_operator",
            "plan",
            f"--kubeconfig={kubeconfig}",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout


async def _poll_converged(
    plane: Any,
    planned: dict[str, Any],
    agents: Any,
    bound: float,
    kubeconfig: Path,
    differences: Any,
) -> float:
    """The wall-clock time of the first look that found the chain equal to *planned*
    (then confirmed against a fresh ``plan``); NodeFeature labels are merged between looks."""
    left: list[str] = []
    started = time.monotonic()
    try:
        with anyio.fail_after(bound):
            while True:
                looked = time.time()
                left = await anyio.to_thread.run_sync(differences, plane, planned)
                if not left:
                    fresh = json.loads(await anyio.to_thread.run_sync(_plan, kubeconfig))
                    left = await anyio.to_thread.run_sync(differences, plane, fresh)
                    if not left:
                        return looked
                    planned.clear()
                    planned.update(fresh)
                _say(f"{time.monotonic() - started:.0f} s: {len(left)} differences from plan")
                await agents._merge_node_features()
                await anyio.sleep(1.0)
    except TimeoutError:
        raise SystemExit(
            f"bench_worker: not converged within {bound:.0f} s; {len(left)} differences from "
            f"plan at the last look, e.g. {left[:3]}"
        ) from None


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| nodes | desired objects | wall to converged | worker CPU (of it start-up) "
        "| worker peak RSS "
        "| requests (get/list/watch/create/patch/update/delete) | writes per object "
        "| writes after resync |\n|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        v = r["by_verb"]
        verbs = "/".join(
            str(v.get(k, 0))
            for k in ("get", "list", "watch", "create", "patch", "update", "delete")
        )
        lines.append(
            f"| {r['nodes']:,} | {sum(r['desired'].values()):,} | {r['wall_s']:.1f} s "
            f"| {r['cpu_s']:.1f} s ({r['startup_cpu_s']:.1f} s) "
            f"| {r['max_rss_mib']:.0f} MiB | {verbs} "
            f"| {r['writes_per_object']:.2f} | {r['steady_writes']} |"
        )
    return head + "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--timeout", type=float, default=900.0, help="per size (default 900 s)")
    parser.add_argument(
        "--resync",
        type=float,
        default=10.0,
        help="after convergence, count writes this long after one forced resync (s)",
    )
    parser.add_argument(
        "--resync-period",
        type=float,
        default=0.0,
        help="the worker's periodic resync (s; default none, as the worker runs by default)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument(
        "--plane",
        choices=("sim", "real"),
        default="sim",
        help="the API server: the simulated one in this process (default) or the real-cluster "
        "tier's etcd and kube-apiserver (make real-cluster)",
    )
    parser.add_argument(
        "--reaction",
        type=int,
        default=0,
        metavar="N",
        help="after convergence, time N single-node accelerator changes (remove, restore)",
    )
    parser.add_argument(
        "--ab",
        metavar="COMMIT",
        help="also run COMMIT's worker (own checkout and environment), interleaved; print ratios",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="A/B rounds per size, each side once (default 3)"
    )
    parser.add_argument(
        "--tas",
        choices=("on", "off"),
        default="on",
        help="Topology-Aware Scheduling in the worker and the check (off: for an A/B against a "
        "commit older than TAS)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="run the runtime's floor (a worker handed plan's objects, docs/performance.md) "
        "instead of this tree's worker (with --ab: on this tree's side)",
    )
    parser.add_argument(
        "--worker-child", nargs=2, metavar=("KUBECONFIG", "REPORT"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--floor-child",
        nargs=3,
        metavar=("KUBECONFIG", "REPORT", "EXPECTED"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.floor_child:
        return floor_child(
            args.floor_child[0], Path(args.floor_child[1]), Path(args.floor_child[2])
        )
    if args.worker_child:
        return worker_child(
            args.worker_child[0], Path(args.worker_child[1]), args.resync_period, args.tas == "on"
        )
    if args.ab:
        return compare(args)
    if args.plane == "real":
        sys.path.insert(0, str(REPO))  # the tier's harness (tests/realcluster)
        # SIGTERM (a timeout) unwinds like an error, so the control plane is stopped.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        for count in args.nodes:
            row = anyio.run(bench_real, count, args.timeout, args.resync)
            print(json.dumps(row))
        return 0
    rows = []
    for count in args.nodes:
        row = anyio.run(
            bench,
            count,
            args.timeout,
            args.resync,
            args.reaction,
            args.resync_period,
            None,
            args.tas == "on",
            args.floor,
        )
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    sys.stdout.write(table(rows))
    for r in rows:
        if r["reaction"]:
            x = r["reaction"]
            sys.stdout.write(
                f"{r['nodes']:,} nodes, {x['changes']} single-node changes: edit -> last "
                f"ClusterQueue write p50 {x['queue_p50_s']:.2f} s, p99 {x['queue_p99_s']:.2f} s "
                f"(edit -> Node updated p50 {x['node_p50_s']:.3f} s)\n"
            )
    return 0


AB_KEYS = ("cpu_s", "startup_cpu_s", "wall_s", "max_rss_mib")


def compare(args: argparse.Namespace) -> int:
    """A/B against ``--ab``: interleaved rounds per size, the median ratios printed."""
    sides = both(args.ab, sys.executable)
    summary = []
    for count in args.nodes:

        def measure(side: Side, count: int = count) -> dict[str, float]:
            row = anyio.run(
                bench,
                count,
                args.timeout,
                args.resync,
                0,
                args.resync_period,
                side,
                args.tas == "on",
                args.floor,
            )
            if row["steady_writes"] or row["writes_per_object"] > 1.05:
                print(f"ab: {side.name} wrote more than once per object: {json.dumps(row)}")
            return {key: float(row[key]) for key in AB_KEYS}

        print(f"ab: {count:,} nodes, {args.rounds} rounds", flush=True)
        results = interleave(args.rounds, sides, measure)
        summary.append(
            {"nodes": count, "rounds": results, "ratios": report(results, sides, AB_KEYS)}
        )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
