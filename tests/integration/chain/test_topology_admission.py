"""Jobs through the TAS chain in the simulator (docs/simulator.md, "TAS admission stand-in").

On the GKE A3 Ultra dump (two blocks, four sub-blocks of two 8-GPU nodes): a Job whose pods
fit one sub-block is admitted into one and its pods run on the nodes TAS chose; one a node
larger than any sub-block waits with Kueue's message although the queue's quota covers it;
a cordoned node's capacity is not offered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from gpustack_operator.commands.plan import read_cluster_file
from gpustack_operator.domain.nodeview import labels_of
from gpustack_operator.domain.profiles import local_queue_name
from gpustack_sim.cluster.cluster import SimCluster
from gpustack_sim.demojobs import DemoJob, job_manifest
from gpustack_sim.standins.kueuetas import REQUIRED, assignment_placement
from tests.integration.worker.support import eventually
from tests.unit.domain.test_workloads_doc import tas_job_example

pytestmark = pytest.mark.anyio

DUMP = Path(__file__).resolve().parents[3] / "examples" / "topology-gke-a3-ultra.yaml"
SUBBLOCK = "cloud.google.com/gce-topology-subblock"
WL = "kueue.x-k8s.io/v1beta2"


def _job(cluster: SimCluster, name: str, pods: int) -> None:
    queue = next(
        q["metadata"]["name"]
        for q in cluster.actual().cluster_queues
        if "nvidia" in q["metadata"]["name"]
    )
    requests = {"cpu": "200", "memory": "2000Gi", "nvidia.com/gpu": "8"}
    job = DemoJob(name, local_queue_name(queue), "default", requests, pods, {REQUIRED: SUBBLOCK})
    cluster.sim.store.create(job_manifest(job))


def _workload(cluster: SimCluster, job: str) -> dict[str, Any] | None:
    for wl in cluster.sim.store.list(WL, "Workload", "default"):
        if any(o.get("name") == job for o in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def _reserved(cluster: SimCluster, job: str) -> dict[str, Any] | None:
    wl = _workload(cluster, job)
    for cond in ((wl or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == "QuotaReserved":
            return dict(cond)
    return None


def _bound(cluster: SimCluster, job: str) -> list[str]:
    pods = cluster.sim.store.list("v1", "Pod", "default")
    return sorted(
        p["spec"].get("nodeName", "")
        for p in pods
        if labels_of(p).get("batch.kubernetes.io/job-name") == job
    )


def _cordon(cluster: SimCluster, name: str) -> None:
    stored = cluster.sim.store.get("v1", "Node", name)
    assert stored is not None
    stored.setdefault("spec", {})["unschedulable"] = True
    cluster.sim.store.update(stored)


async def test_admitted_into_one_domain_held_without_one_and_cordoned_capacity() -> None:
    nodes = [dict(n) for n in read_cluster_file(DUMP)[0]]
    subblock = {n["metadata"]["name"]: n["metadata"]["labels"][SUBBLOCK] for n in nodes}
    async with SimCluster(nodes, ["default"]) as cluster:
        await cluster.converge(60)

        _job(cluster, "fits", 2)
        await eventually(lambda: len([n for n in _bound(cluster, "fits") if n]) == 2, "pods bound")
        wl = _workload(cluster, "fits")
        assert wl is not None
        [assignment] = wl["status"]["admission"]["podSetAssignments"]
        chosen = [n for n, _ in assignment_placement(assignment["topologyAssignment"])]
        assert sorted(chosen) == _bound(cluster, "fits")  # pinned where TAS chose
        assert len({subblock[n] for n in chosen}) == 1

        _job(cluster, "too-wide", 3)  # 24 GPUs: the queue has 48 free, no sub-block 3 nodes
        await eventually(lambda: _reserved(cluster, "too-wide") is not None, "a decision")
        held = _reserved(cluster, "too-wide")
        assert held is not None and held["status"] == "False"
        assert held["message"].endswith("allows to fit only 2 out of 3 pod(s)")
        assert _bound(cluster, "too-wide") == []

        # Cordon one node of every free sub-block: no sub-block offers two nodes any more.
        taken = {subblock[n] for n in chosen}
        for name in sorted(subblock):
            if subblock[name] not in taken and name.endswith(("1", "3", "5", "7")):
                _cordon(cluster, name)
        _job(cluster, "after-cordon", 2)
        await eventually(lambda: _reserved(cluster, "after-cordon") is not None, "a decision")
        cordoned = _reserved(cluster, "after-cordon")
        assert cordoned is not None and cordoned["status"] == "False"
        assert cordoned["message"].endswith("allows to fit only 1 out of 2 pod(s)")


async def test_the_documented_tas_job_is_admitted_into_one_subblock() -> None:
    """docs/workloads.md, "Asking for a domain": its Job, posted as written to the GKE dump's
    simulated cluster, is admitted and its two pods share one sub-block."""
    job = tas_job_example()
    nodes = [dict(n) for n in read_cluster_file(DUMP)[0]]
    subblock = {n["metadata"]["name"]: n["metadata"]["labels"][SUBBLOCK] for n in nodes}
    name = str(job["metadata"]["name"])  # type: ignore[index]
    async with SimCluster(nodes, ["default"]) as cluster:
        await cluster.converge(60)
        async with httpx.AsyncClient(base_url=cluster.sim.url, timeout=10) as http:
            jobs = "/apis/batch/v1/namespaces/default/jobs"
            (await http.post(jobs, json=job)).raise_for_status()
        await eventually(lambda: all(_bound(cluster, name)) and _bound(cluster, name), "bound")
        bound = _bound(cluster, name)
        assert len(bound) == 2 and len({subblock[n] for n in bound}) == 1
