#!/usr/bin/env python3
"""Benchmark: ``plan`` on a large node dump (parse, and the whole command).

Not a test. Writes N nodes shaped like ``kubectl get nodes -o yaml`` output of a real
cluster (NFD's CPU labels and a few dozen other labels, annotations, conditions, node info,
a list of images; mixed hardware as in ``bench_worker.py``: four CPU models, none, NVIDIA,
AMD or Ascend cards described by the device manager's labels) to a YAML and a JSON file,
then times, each ``--runs`` times, in this process:

- parse: ``read_nodes_file`` (YAML through libyaml's loader where PyYAML has it; JSON
  through the JSON fast path);
- plan: the whole ``gpustack-operator plan --nodes FILE -o json`` (parse, chain,
  explanations, rendering), output discarded.

Prints the median and the spread of each as a Markdown table.

    .venv/bin/python hack/bench_plan.py --nodes 5000 --runs 5
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

A = "acceleratable.feature.gpustack.ai/"
# The same host shapes as the worker benchmark, so their figures describe one fleet.
from bench_worker import CPUS  # noqa: E402  (hack/ is on sys.path when run as a script)

CARDS = [
    None,
    None,
    ("nvidia", "tesla-t4", 2),
    ("nvidia", "a10g", 4),
    ("amd", "instinct-mi300x", 8),
    ("ascend", "910b", 8),
]
RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "ascend": "huawei.com/Ascend910"}


def node(i: int) -> dict[str, Any]:
    vendor, family, model, cpu_name, cpu, memory, storage = CPUS[i % len(CPUS)]
    name = f"node-{i:05d}.pool-{i % 17}.example.internal"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "bench.large",
        "topology.kubernetes.io/zone": f"zone-{i % 3}",
        "feature.node.kubernetes.io/cpu-model.vendor_id": vendor,
        **{f"feature.node.kubernetes.io/cpu-cpuid.FEATURE{j}": "true" for j in range(30)},
    }
    if family is not None:
        labels["feature.node.kubernetes.io/cpu-model.family"] = family
        labels["feature.node.kubernetes.io/cpu-model.id"] = str(model)
    annotations = {
        "feature.gpustack.ai/cpu-name": cpu_name,
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    capacity = {"cpu": cpu, "memory": memory, "ephemeral-storage": storage, "pods": "110"}
    allocatable = dict(capacity)
    card = CARDS[(i // len(CPUS)) % len(CARDS)]
    if card is not None:
        mfr, product, count = card
        key = A + f"{mfr}-{product}"
        labels |= {
            "feature.gpustack.ai/acceleratable": "true",
            A + mfr: "true",
            key: "true",
            key + ".count": str(count),
            key + ".product": product,
            key + ".memory": "80Gi",
        }
        allocatable[RESOURCES[mfr]] = str(count)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24"},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                {"type": t, "status": "False", "reason": "Fine", "message": "ok"}
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
            ]
            + [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}],
            "nodeInfo": {"kernelVersion": "6.8.0", "kubeletVersion": "v1.31.0", "osImage": "x"},
            "images": [
                {"names": [f"registry.example/image-{j}:v1"], "sizeBytes": 1000 + j}
                for j in range(10)
            ],
        },
    }


def timed(fn: Any, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    from gpustack_operator.cli import main as cli
    from gpustack_operator.commands.plan import read_nodes_file
    from gpustack_operator.fastyaml import FastSafeLoader

    dump = {"apiVersion": "v1", "kind": "List", "items": [node(i) for i in range(args.nodes)]}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = {
            "YAML": Path(tmp) / "nodes.yaml",
            "JSON": Path(tmp) / "nodes.json",
        }
        files["YAML"].write_text(yaml.safe_dump(dump, sort_keys=False))
        files["JSON"].write_text(json.dumps(dump, indent=2))
        for fmt, path in files.items():
            parse = timed(lambda p=path: read_nodes_file(p), args.runs)

            def plan(p: Path = path) -> None:
                with contextlib.redirect_stdout(io.StringIO()):
                    code = cli(["--log-level", "warning", "plan", "--nodes", str(p), "-o", "json"])
                assert code == 0

            whole = timed(plan, args.runs)
            size = path.stat().st_size / 2**20
            rows.append((fmt, size, parse, whole))
    base = FastSafeLoader.__mro__[1].__name__
    print(f"{args.nodes} nodes, {args.runs} runs, YAML loader on {base}\n")
    print("| input | size | parse: median (min-max) | whole plan -o json: median (min-max) |")
    print("|---|---|---|---|")
    for fmt, size, parse, whole in rows:
        print(
            f"| {fmt} | {size:.0f} MiB | {statistics.median(parse):.2f} s "
            f"({min(parse):.2f}-{max(parse):.2f}) | {statistics.median(whole):.2f} s "
            f"({min(whole):.2f}-{max(whole):.2f}) |"
        )


if __name__ == "__main__":
    main()
