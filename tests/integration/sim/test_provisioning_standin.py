"""The simulator scales pools from zero (docs/simulator.md, "The provisioning stand-in").

A Karpenter NodePool at zero nodes gets its queue; a Job admitted to it has its pod Pending
until the provisioning stand-in adds a node of the pool's shape, then Running on it; once the
Job is gone the idle node is removed after the consolidation delay. Through 0 -> 1 -> 0 nodes
(and 0 -> 2 -> 0) the worker writes no ResourceFlavor, Cohort, ClusterQueue or LocalQueue:
nothing is renamed or recreated as the pool scales.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import anyio
import pytest

from gpustack_operator.commands.plan import read_cluster_input
from gpustack_operator.domain.chain.declaredpools import (
    DECLARED_POOLS_CONFIGMAP,
    DECLARED_POOLS_KEY,
)
from gpustack_operator.domain.profiles import local_queue_name
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.cluster.cluster import SimCluster
from gpustack_sim.standins.crds import autoscaling_stand_in_crds, stand_in_crds
from gpustack_sim.standins.provisioning import PROVISIONED_ANNOTATION, ProvisioningStandIn
from gpustack_sim.standins.scheduler import SchedulerStandIn

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "autoscaling"
CHAIN_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")
POOL = "pool-karpenter-h100"


def _nodepools() -> list[dict[str, Any]]:
    dump = read_cluster_input(EXAMPLES / "pools-at-zero.yaml")
    return [copy.deepcopy(dict(p)) for p in dump.pools if p["kind"] == "NodePool"]


def _job(name: str, gpus: int, parallelism: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": local_queue_name(POOL)},
        },
        "spec": {
            "suspend": True,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {
                                "requests": {
                                    "cpu": "1",
                                    "memory": "1Gi",
                                    "nvidia.com/gpu": str(gpus),
                                }
                            },
                        }
                    ],
                }
            },
        },
    }


async def _until(condition: Any, what: str, timeout: float = 30.0) -> None:  # noqa: ASYNC109
    with anyio.move_on_after(timeout):
        while not condition():  # noqa: ASYNC110 - polls cluster state
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def _pool_nodes(cluster: SimCluster) -> list[dict[str, Any]]:
    return [
        n
        for n in cluster.sim.store.list("v1", "Node")
        if n["metadata"].get("annotations", {}).get(PROVISIONED_ANNOTATION)
    ]


def _pods(cluster: SimCluster) -> list[dict[str, Any]]:
    return cluster.sim.store.list("v1", "Pod", "team-a")


def _chain_uids(cluster: SimCluster) -> dict[str, set[str]]:
    api = f"kueue.x-k8s.io/{cluster.kueue.version.value}"
    return {k: {o["metadata"]["uid"] for o in cluster.sim.store.list(api, k)} for k in CHAIN_KINDS}


async def _finish(cluster: SimCluster, job: str) -> None:
    """The Job done and gone, as a person deleting it with its pods."""
    store = cluster.sim.store
    store.delete("batch/v1", "Job", job, "team-a")
    for pod in _pods(cluster):
        store.delete("v1", "Pod", pod["metadata"]["name"], "team-a")


@pytest.mark.parametrize(("gpus", "pods", "nodes"), [(1, 1, 1), (8, 2, 2)])
async def test_a_job_admitted_at_zero_gets_a_node_and_nothing_is_rebuilt(
    gpus: int, pods: int, nodes: int
) -> None:
    async with SimCluster(
        [],
        ["team-a"],
        crds=[*stand_in_crds(), *autoscaling_stand_in_crds(provisioning=False)],
        pool_objects=_nodepools(),
        provision_delay=1.0,
        consolidation_delay=0.3,
        run_agents=False,
    ) as cluster:
        await cluster.converge(30.0)
        before = _chain_uids(cluster)
        assert POOL in _names(cluster, "ClusterQueue")
        cluster.sim.counters.reset()
        cluster.sim.store.create(_job("train", gpus, pods))
        # Admitted at zero nodes: the pods wait for the pool to grow.
        await _until(
            lambda: (
                len(_pods(cluster)) == pods
                and all(p.get("status", {}).get("phase") == "Pending" for p in _pods(cluster))
            ),
            "the Job's pods, Pending",
        )
        assert not _pool_nodes(cluster), "no node before the provisioning delay"
        await _until(
            lambda: all(p["spec"].get("nodeName") for p in _pods(cluster)),
            "the pods bound to nodes the pool added",
        )
        assert len(_pool_nodes(cluster)) == nodes
        bound = {p["spec"]["nodeName"] for p in _pods(cluster)}
        assert bound == {n["metadata"]["name"] for n in _pool_nodes(cluster)}
        assert all(
            n["metadata"]["labels"]["karpenter.sh/nodepool"] == "h100" for n in _pool_nodes(cluster)
        )
        await cluster.converge(30.0)
        await _finish(cluster, "train")
        await _until(lambda: not _pool_nodes(cluster), "the idle nodes to be removed")
        await cluster.converge(30.0)
        assert cluster.provisioning is not None
        assert len(cluster.provisioning.added) == len(cluster.provisioning.removed) == nodes
        writes = {kind: cluster.sim.counters.writes(kind) for kind in CHAIN_KINDS}
        assert writes == dict.fromkeys(CHAIN_KINDS, 0)
        assert _chain_uids(cluster) == before


def _names(cluster: SimCluster, kind: str) -> list[str]:
    api = f"kueue.x-k8s.io/{cluster.kueue.version.value}"
    return [o["metadata"]["name"] for o in cluster.sim.store.list(api, kind)]


async def test_a_pool_never_grows_past_its_limit() -> None:
    async with SimCluster(
        [],
        ["team-a"],
        crds=[*stand_in_crds(), *autoscaling_stand_in_crds(provisioning=False)],
        pool_objects=_nodepools(),
        provision_delay=0.1,
        consolidation_delay=30.0,
        run_agents=False,
    ) as cluster:
        await cluster.converge(30.0)
        # 16 GPUs of quota: two Jobs of 8 are admitted (2 nodes, the limit); a third waits
        # for quota and adds no node.
        for name in ("a", "b", "c"):
            cluster.sim.store.create(_job(name, 8))
        await _until(lambda: len(_pool_nodes(cluster)) == 2, "two nodes")
        await _until(
            lambda: sum(1 for p in _pods(cluster) if p["spec"].get("nodeName")) == 2,
            "two pods running",
        )
        assert len(_pool_nodes(cluster)) == 2


DECLARED = """pools:
- name: l4
  nodeSelector:
    cloud.google.com/gke-nodepool: l4
  accelerator:
    product: NVIDIA L4
    resource: nvidia.com/gpu
    perNode: 2
  cpu: "23"
  memory: 86Gi
  maxNodes: 3
"""


async def test_pools_declared_in_the_configmap_are_provisioned(sim: SimServer) -> None:
    """docs/autoscaling.md, "Pools declared by a person": the ConfigMap
    ``gpustack-declared-pools`` declares pools as NodePools do, and the provisioning stand-in
    grows them too, the ConfigMap read when it changes."""
    if sim.store.get("v1", "Namespace", "gpustack-system") is None:
        sim.store.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpustack-system"}}
        )
    pending = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {
            "nodeSelector": {"cloud.google.com/gke-nodepool": "l4"},
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"requests": {"nvidia.com/gpu": "2"}},
                }
            ],
        },
    }
    sim.store.create(pending)
    async with (
        SchedulerStandIn(sim),  # reports the pod unschedulable, then binds it
        ProvisioningStandIn(sim, provision_delay=1.0, consolidation_delay=30.0) as stand_in,
    ):
        assert stand_in.pools() == []  # no ConfigMap yet: nothing to grow
        sim.store.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": DECLARED_POOLS_CONFIGMAP, "namespace": "gpustack-system"},
                "data": {DECLARED_POOLS_KEY: DECLARED},
            }
        )

        def added() -> list[dict[str, Any]]:
            return [
                n
                for n in sim.store.list("v1", "Node")
                if n["metadata"].get("annotations", {}).get(PROVISIONED_ANNOTATION)
            ]

        def bound() -> str:
            pod = sim.store.get("v1", "Pod", "train", "default") or {}
            return str((pod.get("spec") or {}).get("nodeName") or "")

        await _until(bound, "the pod bound to a node of the declared pool")
        (node,) = added()
        assert bound() == node["metadata"]["name"]
        assert node["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == "l4"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    # A cluster provisions for such a ConfigMap even with no pool in its input or policy.
    assert SimCluster([], ["default"], run_worker=False, run_agents=False).provisioning is not None
