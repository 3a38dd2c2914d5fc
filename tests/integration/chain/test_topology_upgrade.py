"""Upgrading a chain built without TAS loses nothing (docs/topology.md, "Upgrading a chain
built without TAS").

The worker first runs with ``--topology=off`` on GKE nodes that publish topology levels; a
Job is admitted into the non-TAS pool. A worker with TAS on then takes over: the admitted
Workload stays admitted, its flavor stays listed in the old ClusterQueue for as long as
Kueue reports usage on it, new work is admitted into the TAS pool, and once the first Job
finishes (usage 0) the old flavor and its queue go and the chain equals ``plan``'s.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.commands.plan import read_cluster_file
from gpustack_operator.domain.node.nodetopology import TopologyPolicy
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.profiles import local_queue_name
from gpustack_sim.cluster.cluster import SimCluster
from gpustack_sim.demojobs import DemoJob, job_manifest
from tests.integration.worker.support import (
    MANUFACTURERS,
    eventually,
    fast_config,
    idle,
    worker_running,
)

pytestmark = pytest.mark.anyio

DUMP = Path(__file__).resolve().parents[3] / "examples" / "topology-gke-a3-ultra.yaml"
KUEUE = "kueue.x-k8s.io/v1beta2"


def _device_queue(cluster: SimCluster, tas: bool) -> dict[str, Any]:
    return next(
        q
        for q in cluster.sim.store.list(KUEUE, "ClusterQueue")
        if "nvidia" in q["metadata"]["name"] and q["metadata"]["name"].endswith("-tas") == tas
    )


def _submit(cluster: SimCluster, name: str, queue: str) -> None:
    requests = {"cpu": "28", "memory": "369Gi", "nvidia.com/gpu": "1"}
    cluster.sim.store.create(
        job_manifest(DemoJob(name, local_queue_name(queue), "default", requests))
    )


def _workload(cluster: SimCluster, job: str) -> dict[str, Any] | None:
    for wl in cluster.sim.store.list(KUEUE, "Workload", "default"):
        if any(o.get("name") == job for o in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def _admitted_to(cluster: SimCluster, job: str) -> str:
    """The flavor the Job's Workload was admitted to ("" while it is not)."""
    wl = _workload(cluster, job) or {}
    admission = (wl.get("status") or {}).get("admission") or {}
    flavors = [f for ps in admission.get("podSetAssignments") or [] for f in ps["flavors"].values()]
    return flavors[0] if flavors else ""


def _listed(queue: dict[str, Any]) -> list[str]:
    return [f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]]


async def test_an_admitted_workload_survives_the_move_to_tas() -> None:
    nodes = [dict(n) for n in read_cluster_file(DUMP)[0]]
    off = ChainPolicy(manufacturers=MANUFACTURERS, topology=TopologyPolicy(enabled=False))
    async with SimCluster(nodes, ["default"], run_worker=False, policy=off) as cluster:
        assert cluster.kubeconfig is not None
        config = fast_config(system_namespace=cluster.system_namespace, topology=off.topology)
        async with worker_running(cluster.kubeconfig, config) as running:
            await cluster.converge(60, idle=lambda: cluster.idle() and idle(running.manager))
            old_queue = _device_queue(cluster, tas=False)["metadata"]["name"]
            _submit(cluster, "before", old_queue)
            await eventually(lambda: _admitted_to(cluster, "before"), "the first Job admitted")
        old_flavor = _admitted_to(cluster, "before")
        assert ".tas" not in old_flavor

        on = replace(off, topology=TopologyPolicy())
        cluster.policy = on
        config = fast_config(system_namespace=cluster.system_namespace)
        async with worker_running(cluster.kubeconfig, config) as running:
            await eventually(
                lambda: any(
                    "nvidia" in q["metadata"]["name"] and q["metadata"]["name"].endswith("-tas")
                    for q in cluster.sim.store.list(KUEUE, "ClusterQueue")
                ),
                "the TAS device pool",
            )
            tas_queue = _device_queue(cluster, tas=True)["metadata"]["name"]
            await eventually(
                lambda: _listed(_device_queue(cluster, tas=True)), "a TAS flavor listed"
            )

            # Meanwhile: still admitted, its flavor still there and listed, with no quota.
            def old_queue_holds_only_the_used_flavor() -> bool:
                old = cluster.sim.store.get(KUEUE, "ClusterQueue", old_queue)
                if old is None or _listed(old) != [old_flavor]:
                    return False
                quotas = old["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
                return {r["nominalQuota"] for r in quotas} == {"0"}

            await eventually(old_queue_holds_only_the_used_flavor, "the old queue at no quota")
            assert _admitted_to(cluster, "before") == old_flavor
            assert cluster.sim.store.get(KUEUE, "ResourceFlavor", old_flavor) is not None

            _submit(cluster, "after", tas_queue)  # new work goes to the TAS flavors
            await eventually(
                lambda: ".tas-" in _admitted_to(cluster, "after"), "the new Job in TAS"
            )
            # the unused CPU pool's old flavor went at once; the one in use did not
            assert cluster.sim.store.get(KUEUE, "ResourceFlavor", old_flavor) is not None
            assert _admitted_to(cluster, "before") == old_flavor

            # The first Job finishes: Kueue reports no usage, and the old objects go.
            job = cluster.sim.store.get("batch/v1", "Job", "before", "default")
            assert job is not None
            job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
            cluster.sim.store.update_status(job)
            await cluster.converge(60, idle=lambda: cluster.idle() and idle(running.manager))
        assert cluster.sim.store.get(KUEUE, "ResourceFlavor", old_flavor) is None
        assert cluster.sim.store.get(KUEUE, "ClusterQueue", old_queue) is None
        assert ".tas-" in _admitted_to(cluster, "after")


async def test_queues_of_the_older_tas_name_go_once_idle() -> None:
    """docs/topology.md, "Names": TAS queues were ``<queue>.tas`` (no DNS label, so Kueue
    left their Pods without kueue.x-k8s.io/cluster-queue-name) and are now ``<queue>-tas``.
    A chain written under the older name is not orphaned: the worker deletes the older
    ClusterQueue (Kueue reports nothing reserved in it) and its LocalQueues, and the chain
    equals ``plan``'s."""
    nodes = [dict(n) for n in read_cluster_file(DUMP)[0]]
    policy = ChainPolicy(manufacturers=MANUFACTURERS)
    async with SimCluster(nodes, ["default"], run_worker=False, policy=policy) as cluster:
        assert cluster.kubeconfig is not None
        config = fast_config(system_namespace=cluster.system_namespace)
        async with worker_running(cluster.kubeconfig, config) as running:
            await cluster.converge(60, idle=lambda: cluster.idle() and idle(running.manager))
            tas = _device_queue(cluster, tas=True)
            name = tas["metadata"]["name"]
            older = name.removesuffix("-tas") + ".tas"
            legacy = {
                "apiVersion": KUEUE,
                "kind": "ClusterQueue",
                "metadata": {"name": older, "labels": dict(tas["metadata"]["labels"])},
                "spec": dict(tas["spec"]),
            }
            created = cluster.sim.store.create(legacy)
            cluster.sim.store.create(
                {
                    "apiVersion": KUEUE,
                    "kind": "LocalQueue",
                    "metadata": {
                        "name": local_queue_name(older),
                        "namespace": "default",
                        "labels": dict(tas["metadata"]["labels"]),
                        "ownerReferences": [
                            {
                                "apiVersion": KUEUE,
                                "kind": "ClusterQueue",
                                "name": older,
                                "uid": created["metadata"]["uid"],
                            }
                        ],
                    },
                    "spec": {"clusterQueue": older},
                }
            )
            await eventually(
                lambda: cluster.sim.store.get(KUEUE, "ClusterQueue", older) is None,
                "the older TAS queue deleted",
            )
            await cluster.converge(60, idle=lambda: cluster.idle() and idle(running.manager))
        assert (
            cluster.sim.store.get(KUEUE, "LocalQueue", local_queue_name(older), "default") is None
        )
        assert cluster.sim.store.get(KUEUE, "ClusterQueue", name) is not None
