"""Plain and TAS nodes of one profile on real Kueue and kube-scheduler (docs/topology.md,
"Plain nodes"; docs/realcluster.md). On the mixed GKE example (four H200 nodes that publish
topology levels, two that do not), the Pods of plain Jobs are bound only to the plain nodes,
though the TAS nodes of the same profile have room; the Pods of a TAS queue carry
``kueue.x-k8s.io/cluster-queue-name`` (docs/naming.md, "Derived names")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal

from gpustack_operator.domain.labels import TOPOLOGY_LABEL, TOPOLOGY_NONE
from gpustack_operator.domain.profiles import strip_tas_suffix
from tests.realcluster.cluster import (
    Operator,
    device_job,
    get_all,
    is_admitted,
    load_nodes,
    wait_converged,
    workload_of,
)
from tests.realcluster.conftest import register
from tests.realcluster.controlplane import REPO, ControlPlane, wait_until
from tests.realcluster.nodes import NodeAgents

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]

EXAMPLE = REPO / "examples" / "topology-mixed.yaml"
PLAIN_NODES = {"gke-mix-5", "gke-mix-6"}
NAMESPACE = "default"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/cluster-queue-name"
JOBS = 8
"""One-card Jobs in the plain H200 queue (16 cards on the two plain nodes): kube-scheduler's
default scoring spreads them over every node their selector allows."""


@pytest.fixture(scope="module")
def mixed_cluster(
    plane: ControlPlane, operator: Operator, agents: NodeAgents, portal: BlockingPortal
) -> Operator:
    register(portal, agents, load_nodes(EXAMPLE))
    operator.start_worker()
    wait_converged(plane, operator)
    return operator


def _device_queues(plane: ControlPlane) -> tuple[str, str, str]:
    """(plain LocalQueue, TAS LocalQueue, TAS ClusterQueue) of the H200 pool."""
    plain = tas = tas_cq = ""
    for local in get_all(plane, "localqueues.kueue.x-k8s.io", namespaced=True):
        if local["metadata"]["namespace"] != NAMESPACE:
            continue
        cluster_queue = local["spec"]["clusterQueue"]
        if "nvidia-h200" not in cluster_queue:
            continue
        if strip_tas_suffix(cluster_queue) != cluster_queue:
            tas, tas_cq = local["metadata"]["name"], cluster_queue
        else:
            plain = local["metadata"]["name"]
    assert plain and tas, "no plain and TAS H200 queues"
    return plain, tas, tas_cq


def _pods(plane: ControlPlane, job: str) -> list[dict[str, Any]]:
    return list(
        json.loads(
            plane.kubectl_run("get", "pods", "-n", NAMESPACE, "-l", f"job-name={job}", "-o", "json")
        )["items"]
    )


def test_a_plain_jobs_pods_land_only_on_plain_nodes(
    plane: ControlPlane, mixed_cluster: Operator
) -> None:
    nodes = {n["metadata"]["name"]: n for n in get_all(plane, "nodes")}
    plain_nodes = {
        name
        for name, n in nodes.items()
        if n["metadata"]["labels"].get(TOPOLOGY_LABEL) == TOPOLOGY_NONE
    }
    assert plain_nodes == PLAIN_NODES
    plain, _, _ = _device_queues(plane)
    names = [f"plain-{i}" for i in range(JOBS)]
    for name in names:
        plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(device_job(name, NAMESPACE, plain)))
    wait_until(
        lambda: all(is_admitted(workload_of(plane, n, NAMESPACE)) for n in names),
        timeout=120,
        what="every plain Job admitted",
    )
    wait_until(
        lambda: all((p := _pods(plane, n)) and p[0]["spec"].get("nodeName") for n in names),
        timeout=120,
        what="every plain Pod bound by kube-scheduler",
    )
    placed = {n: _pods(plane, n)[0]["spec"]["nodeName"] for n in names}
    assert set(placed.values()) <= PLAIN_NODES, f"plain Pods on TAS nodes: {placed}"


def test_pods_of_a_tas_queue_carry_the_cluster_queue_name(
    plane: ControlPlane, mixed_cluster: Operator
) -> None:
    _, tas, tas_cq = _device_queues(plane)
    plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(device_job("tas-0", NAMESPACE, tas)))
    wait_until(lambda: bool(_pods(plane, "tas-0")), timeout=120, what="the TAS Job's Pod created")
    (pod,) = _pods(plane, "tas-0")
    assert pod["metadata"]["labels"].get(QUEUE_NAME_LABEL) == tas_cq, pod["metadata"]
