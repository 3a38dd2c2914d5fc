"""DRA ResourceSlices in the live cluster (docs/devices.md, "DRA"): the capacity controller
reads a Node's slices and a slice published later brings the Node's pool."""

from __future__ import annotations

import copy

import pytest

from gpustack_operator.commands.plan import read_cluster_file
from gpustack_sim.cluster.cluster import SimCluster

from .support import REPO

pytestmark = pytest.mark.anyio
DUMP = REPO / "examples" / "dra-h100.yaml"
QUEUE = "gpustack--intel-6-143-ln-x64-64c-504g--nvidia-h100-80gb-hbm3-dra-1d"


async def test_a_resource_slice_published_later_brings_the_pool() -> None:
    nodes, _, slices = read_cluster_file(DUMP)
    async with SimCluster(nodes, ["default"]) as cluster:
        await cluster.converge(60)
        assert cluster.worker_config.dra, "the simulator serves resource.k8s.io/v1"
        assert QUEUE not in {q["metadata"]["name"] for q in cluster.expected().cluster_queues}

        (resource_slice,) = slices
        cluster.resource_slices.append(copy.deepcopy(dict(resource_slice)))
        cluster.sim.store.create(copy.deepcopy(dict(resource_slice)), field_manager="dra-driver")
        await cluster.converge(60)
        queue = cluster.sim.store.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", QUEUE)
        assert queue is not None
        (group,) = queue["spec"]["resourceGroups"]
        assert group["coveredResources"][-1] == "gpu.nvidia.com/gpu"
        assert group["flavors"][0]["resources"][-1] == {
            "name": "gpu.nvidia.com/gpu",
            "nominalQuota": "4",
        }
