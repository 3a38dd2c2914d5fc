"""A node's CPU and memory in the pools it feeds (docs/worker.md, "CPU and memory: counted in
every pool, or once"), end to end: the worker's chain, Jobs that fill the node, the
simulator's Kueue stand-in admitting them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpustack_operator.domain.chain.queues import HostCounting
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.chain.test_kueue_admission import JOBS, QUEUE_LABEL, pools, until
from tests.integration.worker.support import fast_config, node

pytestmark = pytest.mark.anyio
CPUS = 32


def job(name: str, queue: str, cpus: int, cards: int) -> dict[str, Any]:
    requests = {
        "cpu": str(cpus),
        "memory": "1Gi",
        **({"nvidia.com/gpu": str(cards)} if cards else {}),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": requests}}
                    ],
                }
            },
        },
    }


@pytest.mark.parametrize(
    ("counting", "admitted_per_pool"),
    [(HostCounting.EVERY_POOL, 2), (HostCounting.ONCE, 1)],
    ids=["every-pool", "once"],
)
async def test_jobs_fill_a_node_once_or_in_every_pool(
    counting: HostCounting, admitted_per_pool: int
) -> None:
    """A 32-CPU node with two T4s feeds a CPU pool and a T4 pool. Two 16-CPU Jobs in each:
    the reference's arithmetic (every-pool, the default) admits all four, 64 CPUs on 32;
    ``--host-counting once`` gives each pool 16 and admits one per pool, 32 in all."""
    config = fast_config(host_counting=counting)
    nodes = [node("gpu-32", cpu=str(CPUS), memory="128Gi", cards=("Tesla T4", 2))]
    async with SimCluster(nodes, ["default"], run_agents=False, worker_config=config) as cluster:
        await cluster.converge(45)  # equal to plan under the same policy
        async with httpx.AsyncClient(base_url=cluster.sim.url, timeout=10) as http:
            t4, cpu, local = await pools(http)
            names = {"cpu": local[cpu["metadata"]["name"]], "t4": local[t4["metadata"]["name"]]}
            for pool, queue in names.items():
                for i in range(2):
                    body = job(f"{pool}-{i}", queue, CPUS // 2, 1 if pool == "t4" else 0)
                    (await http.post(JOBS, json=body)).raise_for_status()
            admitted = 0
            for pool in names:
                for i in range(2):
                    await until(http, f"{pool}-{i}", admitted=i < admitted_per_pool)
                    admitted += i < admitted_per_pool
            assert admitted * CPUS // 2 == (2 if counting is HostCounting.EVERY_POOL else 1) * CPUS
