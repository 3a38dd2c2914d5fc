"""Benchmark what the schema checks of built-in kinds cost a simulated write.

Not a test: it prints figures (docs/performance.md records them). Run it with

    .venv/bin/python hack/bench_builtin_writes.py [--nodes 2000] [--repeat 5]

It creates N Nodes shaped like a GPU worker's (labels, capacity, conditions, node info)
through the simulator's store, then updates each with one more label, and reports the median
time per write over the repeats, with the checks of ``gpustack_sim/apiserver/builtinschemas.py`` on
and, for
comparison, off (as if the kind had no published schema), in the same process, the two
alternated.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any
from unittest import mock

from gpustack_sim.apiserver import builtinschemas
from gpustack_sim.apiserver.kinds import KindRegistry
from gpustack_sim.apiserver.store import Store


def node(index: int) -> dict[str, Any]:
    quantities = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{index:05d}",
            "labels": {f"feature.node.kubernetes.io/label-{j}": "v" * 20 for j in range(20)},
        },
        "status": {
            "capacity": quantities,
            "allocatable": quantities,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.34.0",
                "kubeProxyVersion": "",
                "osImage": "Ubuntu 24.04",
                "kernelVersion": "6.8.0",
                "containerRuntimeVersion": "containerd://2.0.0",
                "architecture": "amd64",
                "operatingSystem": "linux",
                "machineID": "m",
                "systemUUID": "s",
                "bootID": "b",
            },
        },
    }


def one_run(count: int) -> float:
    """Seconds per write for *count* creates and *count* updates."""
    store = Store(KindRegistry.with_builtins())
    info = store.registry.by_kind("v1", "Node")
    assert info is not None
    nodes = [node(i) for i in range(count)]
    started = time.perf_counter()
    for obj in nodes:
        store.create_as(info, obj)
    for obj in nodes:
        obj["metadata"]["labels"]["gpustack.ai/pool"] = "a"
        store.update_as(info, obj, name=obj["metadata"]["name"])
    return (time.perf_counter() - started) / (2 * count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    one_run(10)  # load and compile the schemas outside the measurement
    off: list[float] = []
    on: list[float] = []
    for _ in range(args.repeat):  # alternated, so that drifts of a shared machine hit both
        gc.collect()
        with mock.patch.object(builtinschemas, "has_schema", lambda info: False):
            off.append(one_run(args.nodes))
        gc.collect()
        on.append(one_run(args.nodes))
    print(f"{args.nodes} Node creates + {args.nodes} updates, median of {args.repeat}:")
    for label, runs in (("checks off", off), ("checks on", on)):
        runs_us = ", ".join(f"{r * 1e6:.1f}" for r in runs)
        print(f"  {label}: {statistics.median(runs) * 1e6:.1f} µs per write ({runs_us})")


if __name__ == "__main__":
    main()
