"""Scenario c on real Kueue: the README's topology demo. On the GKE A3 Ultra example, a Job
that fills one sub-block is admitted into one domain and its Pods land there; one a node
wider waits with Kueue's own TAS message, though the pool's quota covers it
(docs/realcluster.md, docs/topology.md)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal

from gpustack_operator.domain.node.simdevices import SIM_DEVICES_ANNOTATION
from gpustack_sim.demojobs import REQUIRED_TOPOLOGY, job_manifest, pick_tas_demo_jobs
from tests.realcluster.cluster import (
    Operator,
    condition,
    get_all,
    load_nodes,
    wait_converged,
    workload_of,
)
from tests.realcluster.conftest import register
from tests.realcluster.controlplane import REPO, LoopbackPlane, wait_until
from tests.realcluster.nodes import RUN_SECONDS_ANNOTATION, NodeAgents

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]
PLANES = ("real", "sim")
"""The backends each scenario runs on (conftest.py): the real control plane and `sim --serve`."""

EXAMPLE = REPO / "examples" / "topology-gke-a3-ultra.yaml"


@pytest.fixture(scope="module")
def tas_cluster(
    plane: LoopbackPlane, operator: Operator, agents: NodeAgents, portal: BlockingPortal
) -> Operator:
    nodes = load_nodes(EXAMPLE)
    register(portal, agents, nodes)
    operator.start_device_managers(
        n["metadata"]["name"]
        for n in nodes
        if SIM_DEVICES_ANNOTATION in (n["metadata"].get("annotations") or {})
    )
    operator.start_worker()
    wait_converged(plane, operator)
    return operator


def _workload(plane: LoopbackPlane, namespace: str, job: str) -> dict[str, Any] | None:
    return workload_of(plane, job, namespace)


def _quota_reserved(workload: dict[str, Any] | None) -> dict[str, Any] | None:
    return condition(workload, "QuotaReserved")


def test_one_domain_job_is_placed_in_one_domain_and_a_wider_one_waits(
    plane: LoopbackPlane, tas_cluster: Operator
) -> None:
    jobs = pick_tas_demo_jobs(
        get_all(plane, "clusterqueues.kueue.x-k8s.io"),
        get_all(plane, "localqueues.kueue.x-k8s.io", namespaced=True),
        get_all(plane, "resourceflavors.kueue.x-k8s.io"),
        get_all(plane, "topologies.kueue.x-k8s.io"),
        get_all(plane, "nodes"),
    )
    assert len(jobs) == 2, "the example has no TAS pool with several nodes in a domain"
    fits, wider = jobs
    for job in jobs:
        manifest = job_manifest(job)
        # The Pods run until the test has looked at them.
        manifest["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})[
            RUN_SECONDS_ANNOTATION
        ] = "600"
        plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(manifest))

    wait_until(
        lambda: (
            (c := _quota_reserved(_workload(plane, wider.namespace, wider.name))) is not None
            and c["status"] == "False"
            and "allows to fit only" in c.get("message", "")
        ),
        timeout=90,
        what="the wider Job held with Kueue's TAS message",
    )
    held = _quota_reserved(_workload(plane, wider.namespace, wider.name))
    assert held is not None
    assert f"allows to fit only {fits.pods} out of {wider.pods} pod(s)" in held["message"]

    wait_until(
        lambda: (
            (c := _quota_reserved(_workload(plane, fits.namespace, fits.name))) is not None
            and c["status"] == "True"
        ),
        timeout=90,
        what="the one-domain Job admitted",
    )
    admitted = _workload(plane, fits.namespace, fits.name)
    assert admitted is not None
    (podset,) = admitted["status"]["admission"]["podSetAssignments"]
    assignment = podset["topologyAssignment"]
    assert assignment["levels"][-1] == "kubernetes.io/hostname"

    def pods() -> list[dict[str, Any]]:
        return list(
            json.loads(
                plane.kubectl_run(
                    "get", "pods", "-n", fits.namespace, "-l", f"job-name={fits.name}", "-o", "json"
                )
            )["items"]
        )

    wait_until(
        lambda: len(p := pods()) == fits.pods and all(x["spec"].get("nodeName") for x in p),
        timeout=90,
        what="every Pod of the one-domain Job bound",
    )
    level = fits.annotations[REQUIRED_TOPOLOGY]
    nodes = {n["metadata"]["name"]: n for n in get_all(plane, "nodes")}
    placed = Counter(p["spec"]["nodeName"] for p in pods())
    domains = {nodes[name]["metadata"]["labels"][level] for name in placed}
    assert len(domains) == 1, f"the Pods span {domains} at {level}"
    assert sum(placed.values()) == fits.pods
