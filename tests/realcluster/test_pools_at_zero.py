"""Scenario f on real Kueue: a declared pool at zero nodes with a ProvisioningRequest check
(docs/autoscaling.md). Kueue's provisioning controller creates the ProvisioningRequest; the
autoscaler stand-in adds a node and the Job is admitted and runs there; when the autoscaler
fails instead, Kueue keeps the Workload waiting with "Retrying after failure"
(docs/realcluster.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal

from tests.realcluster.autoscaler import AutoscalerStandIn
from tests.realcluster.cluster import (
    SYSTEM_NAMESPACE,
    Operator,
    device_job,
    get_all,
    is_admitted,
    wait_converged,
    workload_of,
)
from tests.realcluster.controlplane import REPO, LoopbackPlane, wait_until
from tests.realcluster.nodes import NodeAgents

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]
PLANES = ("real", "sim")
"""The backends each scenario runs on (conftest.py): the real control plane and `sim --serve`."""

DECLARED = REPO / "examples" / "autoscaling" / "declared-pools.yaml"
POOL_QUEUE = "pool-declared-l4-flex"
NO_PROVISIONING_REQUEST = "Kueue's ProvisioningRequest admission check"
"""The docs/simulator.md row: the simulator writes no ProvisioningRequest."""
NAMESPACE = "default"
L4_NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "l4-flex",
        "labels": {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "cloud.google.com/gke-nodepool": "l4-flex",
        },
    },
    "spec": {
        "taints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"},
        ]
    },
    "status": {
        "capacity": {"cpu": "24", "memory": "96Gi", "nvidia.com/gpu": "2"},
        "allocatable": {"cpu": "23", "memory": "86Gi", "nvidia.com/gpu": "2"},
    },
}
"""A node of examples/autoscaling/declared-pools.yaml's l4-flex pool, as GKE adds one."""


@pytest.fixture(scope="module")
def autoscaler(
    plane: LoopbackPlane, operator: Operator, agents: NodeAgents, portal: BlockingPortal
) -> Iterator[AutoscalerStandIn]:
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "gpustack-declared-pools", "namespace": SYSTEM_NAMESPACE},
                "data": {"pools.yaml": DECLARED.read_text()},
            }
        ]
    )
    stand_in = AutoscalerStandIn(agents, L4_NODE)
    future = portal.start_task_soon(stand_in.run)
    operator.start_worker("--provisioning-requests=on")
    wait_converged(plane, operator, f"--declared-pools={DECLARED}", "--provisioning-requests=on")
    try:
        yield stand_in
    finally:
        future.cancel()


def _local_queue(plane: LoopbackPlane) -> str:
    for local in get_all(plane, "localqueues.kueue.x-k8s.io", namespaced=True):
        meta = local["metadata"]
        if meta["namespace"] == NAMESPACE and local["spec"]["clusterQueue"] == POOL_QUEUE:
            return str(meta["name"])
    raise AssertionError(f"no LocalQueue of {POOL_QUEUE} in {NAMESPACE}")


def _job(name: str, queue: str) -> dict[str, Any]:
    return device_job(name, NAMESPACE, queue, run_seconds=None)


def _check_state(workload: dict[str, Any] | None) -> dict[str, Any]:
    states = ((workload or {}).get("status") or {}).get("admissionChecks") or []
    return dict(states[0]) if states else {}


def test_kueue_asks_the_autoscaler_and_the_job_runs_on_the_new_node(
    plane: LoopbackPlane, autoscaler: AutoscalerStandIn, portal: BlockingPortal
) -> None:
    check = json.loads(
        plane.kubectl_run("get", "admissionchecks.kueue.x-k8s.io", POOL_QUEUE, "-o", "json")
    )
    wait_until(
        lambda: any(
            c["type"] == "Active" and c["status"] == "True"
            for c in (
                json.loads(
                    plane.kubectl_run(
                        "get", "admissionchecks.kueue.x-k8s.io", POOL_QUEUE, "-o", "json"
                    )
                ).get("status")
                or {}
            ).get("conditions")
            or []
        ),
        timeout=60,
        what=f"Kueue's provisioning controller marking {check['metadata']['name']} Active",
    )
    plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(_job("l4-smoke", _local_queue(plane))))
    if not plane.differs(NO_PROVISIONING_REQUEST):
        wait_until(
            lambda: bool(autoscaler.answered), timeout=90, what="a ProvisioningRequest from Kueue"
        )
    else:  # admitted on quota alone, no request written: the scale-up is the test's
        wait_until(
            lambda: is_admitted(workload_of(plane, "l4-smoke")),
            timeout=90,
            what="the Job admitted on the pool's quota",
        )
        assert get_all(plane, "provisioningrequests.autoscaling.x-k8s.io", namespaced=True) == []
        portal.call(autoscaler.add_nodes, 1)
    plane.kubectl_run(
        "wait", "--for=condition=complete", "--timeout=120s", "-n", NAMESPACE, "job/l4-smoke"
    )
    pods = json.loads(
        plane.kubectl_run("get", "pods", "-n", NAMESPACE, "-l", "job-name=l4-smoke", "-o", "json")
    )["items"]
    assert [p["spec"]["nodeName"] for p in pods] == [f"{L4_NODE['metadata']['name']}-1"]


def test_a_failed_provisioning_request_keeps_the_workload_waiting_to_retry(
    plane: LoopbackPlane, autoscaler: AutoscalerStandIn
) -> None:
    autoscaler.fail = True
    answered = len(autoscaler.answered)
    plane.kubectl_run(
        "apply", "-f", "-", stdin=json.dumps(_job("l4-no-capacity", _local_queue(plane)))
    )
    if plane.differs(NO_PROVISIONING_REQUEST):  # no request, so no failure: quota admits it
        wait_until(
            lambda: is_admitted(workload_of(plane, "l4-no-capacity")),
            timeout=90,
            what="the Job admitted on the pool's quota",
        )
        return
    wait_until(lambda: len(autoscaler.answered) > answered, timeout=90, what="the request answered")
    wait_until(
        lambda: (
            "Retrying after failure: the node group has no capacity left"
            in _check_state(workload_of(plane, "l4-no-capacity")).get("message", "")
        ),
        timeout=90,
        what="Kueue's retry message on the admission check",
    )
    job = json.loads(
        plane.kubectl_run("get", "job", "l4-no-capacity", "-n", NAMESPACE, "-o", "json")
    )
    assert job["spec"]["suspend"] is True
