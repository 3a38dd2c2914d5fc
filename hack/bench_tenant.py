#!/usr/bin/env python3
"""Benchmark: a shared-node tenant's pools (``domain.tenancy.tenant_fleet``) by fleet size.

Not a test. In a vCluster tenant the worker recomputes the whole fleet's pools from its Node
cache after every Node change (docs/tenants.md, "Cost"); this times that computation for
fleets of ``--nodes`` synced host nodes (the four shapes of ``examples/vcluster-tenant.yaml``
in turn: A100, CPU and two sizes of T4 nodes that host labels cannot tell apart, so their
pools merge), each ``--runs`` times, and prints the median and the spread as a Markdown
table.

    .venv/bin/python hack/bench_tenant.py --nodes 50,200,1000 --runs 5
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpustack_operator.domain.chain.tenancy import tenant_fleet  # noqa: E402
from gpustack_operator.domain.manufacturers import default_manufacturers  # noqa: E402

TEMPLATES = yaml.safe_load((REPO / "examples" / "vcluster-tenant.yaml").read_text())["items"]


def fleet(size: int) -> list[dict[str, Any]]:
    nodes = []
    for i in range(size):
        node = copy.deepcopy(TEMPLATES[i % len(TEMPLATES)])
        node["metadata"]["name"] = f"host-{i:05d}"
        node["metadata"]["uid"] = f"uid-{i}"
        node["metadata"]["resourceVersion"] = "1"
        nodes.append(node)
    return nodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="50,200,1000", help="fleet sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    manufacturers = default_manufacturers()
    print("| nodes | tenant_fleet median | min | max |")
    print("|---:|---:|---:|---:|")
    for size in (int(n) for n in args.nodes.split(",")):
        nodes = fleet(size)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            tenant_fleet(nodes, manufacturers)
            times.append(time.perf_counter() - start)
        print(
            f"| {size:,} | {statistics.median(times) * 1000:.0f} ms "
            f"| {min(times) * 1000:.0f} ms | {max(times) * 1000:.0f} ms |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
