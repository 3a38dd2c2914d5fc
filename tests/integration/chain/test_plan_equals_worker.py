"""``plan`` equals the worker for every input, not just the example cluster.

A seeded generator builds random mixed clusters (a few hundred nodes: AMD and Intel CPUs,
with and without the CPU-name and CPU-detail annotations, without CPU identity, opted out,
NVIDIA cards already labelled by a device manager, sliced queues, simulated cards for the
device-manager agents, the same hardware at different sizes so a queue holds several
flavors). The nodes join the simulator in random order while the worker runs; midway the
worker is stopped and a new one started, as a restart or a leader change would. The chain
the cluster converges to must equal what ``plan`` computes for the same nodes, object for
object: flavor order and notes included, which docs/naming.md ("Flavor order and notes")
makes functions of the nodes alone.
"""

from __future__ import annotations

import json
import random
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.worker.support import (
    eventually,
    fast_config,
    idle,
    worker_running,
)

pytestmark = [pytest.mark.anyio]

SEEDS = (20261123, 7)
NODES = 200
TIMEOUT = 180.0
"""A deadline, not a wait: 200 nodes converge in about 30 s alone; on the 2-core machine with
the real-cluster tier's servers running beside the suite and one core kept busy it took 56
to 114 s (the slowest run still writing its last LocalQueues at 110 s: slow, not stuck). The first
worker's first ClusterQueue has the same deadline: it waits until the first hundred nodes
carry their capacity labels (docs/worker.md, "Batching"), and on two busy cores the worker
published about two NodeFeatures a second."""
KUEUE = "kueue.x-k8s.io/v1beta2"
A = "acceleratable.feature.gpustack.ai/"
CPUS = (
    ("AMD", "25", "1", "AMD EPYC 7763 64-Core Processor"),
    ("Intel", "6", "106", "Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz"),
    ("Intel", "6", "143", "Intel(R) Xeon(R) Platinum 8480+"),
)
CARDS = (("Tesla T4", "15Gi"), ("NVIDIA A10G", "22Gi"), ("NVIDIA L4", "22Gi"))
SIM_CARDS = (("Tesla T4", 15360), ("NVIDIA H100 80GB HBM3", 81559))


def _node(rng: random.Random, i: int) -> dict[str, Any]:
    vendor, family, model, cpu_name = rng.choice(CPUS)
    labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    annotations: dict[str, str] = {}
    identity = rng.random()
    if identity > 0.05:  # about one node in twenty has no CPU identity at all
        labels["feature.node.kubernetes.io/cpu-model.vendor_id"] = vendor
        labels["feature.node.kubernetes.io/cpu-model.family"] = family
        labels["feature.node.kubernetes.io/cpu-model.id"] = model
    if identity > 0.35:
        annotations["feature.gpustack.ai/cpu-name"] = cpu_name
    if rng.random() < 0.5:  # CPU detail (notes) present on some nodes only
        annotations["feature.gpustack.ai/cpu-physical-cores"] = str(rng.choice((8, 16, 32)))
        annotations["feature.gpustack.ai/cpu-hz"] = "2450000000"
    if rng.random() < 0.05:
        labels["gpustack.ai/managed"] = "false"
    cpu = rng.choice((8, 16, 32, 48))
    capacity = {
        "cpu": str(cpu),
        "memory": f"{cpu * rng.choice((2, 4)) + rng.choice((0, 1))}Gi",
        "ephemeral-storage": f"{rng.choice((96, 97, 200))}Gi",
    }
    allocatable = dict(capacity)
    kind = rng.random()
    if kind < 0.35:  # cards a device manager already described
        product, memory = rng.choice(CARDS)
        count = rng.choice((1, 2, 4, 8))
        key = A + "nvidia-" + product.lower().replace("nvidia ", "").replace(" ", "-")
        labels |= {
            "feature.gpustack.ai/acceleratable": "true",
            A + "nvidia": "true",
            key: "true",
            key + ".count": str(count),
            key + ".product": product.replace(" ", "-"),
            key + ".memory": memory,
        }
        if rng.random() < 0.2:
            labels[key + ".sliced.partitions"] = str(rng.choice((4, 8)))
        allocatable["nvidia.com/gpu"] = str(count)
    elif kind < 0.42:  # simulated cards: the device-manager agent labels them
        product, memory_mib = rng.choice(SIM_CARDS)
        devices = [{"manufacturer": "nvidia", "name": product, "memoryMiB": memory_mib, "count": 2}]
        annotations["sim.gpustack.ai/devices"] = json.dumps(devices)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"node-{i:03d}", "labels": labels, "annotations": annotations},
        "status": {"capacity": capacity, "allocatable": allocatable},
    }


def random_cluster(seed: int) -> list[dict[str, Any]]:
    """:data:`NODES` nodes of the mix above, in a random join order."""
    rng = random.Random(seed)
    nodes = [_node(rng, i) for i in range(NODES)]
    rng.shuffle(nodes)
    return nodes


@pytest.mark.timeout(2 * TIMEOUT + 60)
@pytest.mark.parametrize("seed", SEEDS)
async def test_a_random_cluster_joined_with_a_restart_converges_to_plan(seed: int) -> None:
    nodes = random_cluster(seed)
    first, rest = nodes[: NODES // 2], nodes[NODES // 2 :]
    async with SimCluster(first[:10], ["default", "team-a"], run_worker=False) as cluster:
        assert cluster.kubeconfig is not None
        config = fast_config(system_namespace=cluster.system_namespace)
        async with worker_running(cluster.kubeconfig, config):
            for node in first[10:]:
                cluster.add_node(node)
                await anyio.lowlevel.checkpoint()
            # Stopped midway: part of the chain is written, in this run's creation order.
            await eventually(
                lambda: bool(cluster.sim.store.list(KUEUE, "ClusterQueue")),
                "a first ClusterQueue",
                TIMEOUT,
            )
        for node in rest:
            cluster.add_node(node)
        async with worker_running(cluster.kubeconfig, config) as running:
            await cluster.converge(TIMEOUT, idle=lambda: cluster.idle() and idle(running.manager))
        planned = cluster.expected()
        queues = planned.cluster_queues
    # The generator really made the cases this test is about.
    assert len(queues) >= 8
    assert any(len(q["spec"]["resourceGroups"][0]["flavors"]) >= 3 for q in queues)
    assert any("note.gpustack.ai/detail" in q["metadata"]["annotations"] for q in queues)
