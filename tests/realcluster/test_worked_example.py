"""Scenarios a and b on real Kueue: the worked example converges to ``plan`` through deploy/'s
RBAC and Kueue's webhooks with no writes at steady state, and docs/workloads.md's Job is
admitted, bound by kube-scheduler to a node of its flavor and completed, its quota returned
(docs/realcluster.md)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
import yaml
from anyio.from_thread import BlockingPortal

from gpustack_operator.domain.node.simdevices import SIM_DEVICES_ANNOTATION
from tests.realcluster.cluster import Operator, get_all, load_nodes, wait_converged
from tests.realcluster.conftest import register
from tests.realcluster.controlplane import REPO, LoopbackPlane, RealClusterError, wait_until
from tests.realcluster.nodes import NodeAgents

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]
PLANES = ("real", "sim")
"""The backends each scenario runs on (conftest.py): the real control plane and `sim --serve`."""

EXAMPLE = REPO / "examples" / "cluster.yaml"
STEADY_WINDOW = 8.0
"""Seconds the steady state is watched for writes: several of the worker's capacity
coalescing windows and Kueue status updates."""


def _docs_job() -> dict[str, Any]:
    page = (REPO / "docs" / "workloads.md").read_text()
    section = page.split("## A complete Job", 1)[1]
    block = re.search(r"^```yaml\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert block is not None, "docs/workloads.md lost its Job"
    return dict(yaml.safe_load(block.group(1)))


@pytest.fixture(scope="module")
def worked_example(
    plane: LoopbackPlane, operator: Operator, agents: NodeAgents, portal: BlockingPortal
) -> Operator:
    nodes = load_nodes(EXAMPLE)
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}])
    register(portal, agents, nodes)
    operator.start_device_managers(
        n["metadata"]["name"]
        for n in nodes
        if SIM_DEVICES_ANNOTATION in (n["metadata"].get("annotations") or {})
    )
    operator.start_worker()
    return operator


def _converged(plane: LoopbackPlane, operator: Operator) -> None:
    wait_converged(plane, operator)


def test_the_worked_example_converges_to_plan_through_kueues_webhooks(
    plane: LoopbackPlane, worked_example: Operator
) -> None:
    """(a) deploy/'s RBAC, a ServiceAccount token, real Kueue's webhooks: the worker's chain
    equals ``plan`` on the same cluster, and a steady state makes no writes."""
    _converged(plane, worked_example)
    queues = get_all(plane, "clusterqueues.kueue.x-k8s.io")
    assert queues, "no ClusterQueue was written"

    # Kueue's own controllers took them: every ClusterQueue is Active (its flavors exist and
    # its quotas validated), as Kueue reports it.
    def all_active() -> bool:
        listed = get_all(plane, "clusterqueues.kueue.x-k8s.io")
        return all(
            any(
                c["type"] == "Active" and c["status"] == "True"
                for c in (q.get("status") or {}).get("conditions") or []
            )
            for q in listed
        )

    if not plane.differs("ClusterQueue `Active` condition"):
        wait_until(all_active, timeout=60, what="every ClusterQueue Active in Kueue")
    # The webhooks are Kueue's and they are live: a ClusterQueue Kueue's webhook refuses is
    # refused (a flavor listed twice in one resource group).
    bad = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "refused-by-kueue"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "1"}]},
                        {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "1"}]},
                    ],
                }
            ]
        },
    }
    with pytest.raises(RealClusterError, match=r"denied|[Ii]nvalid|[Dd]uplicate"):
        plane.kubectl_run("create", "--dry-run=server", "-f", "-", stdin=json.dumps(bad))

    before = worked_example.writes()
    time.sleep(STEADY_WINDOW)  # a window with nothing to do: no write may happen in it
    assert worked_example.writes() == before, "the worker wrote at steady state"


def test_the_docs_job_is_admitted_placed_on_its_flavor_and_completes(
    plane: LoopbackPlane, worked_example: Operator
) -> None:
    """(b) docs/workloads.md's Job: Kueue admits it to the pool's queue, kube-scheduler binds
    its Pod to a node the flavor selects, it completes and the quota is free again."""
    _converged(plane, worked_example)
    job = _docs_job()
    queue = job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    local = json.loads(plane.kubectl_run("get", "localqueue", queue, "-n", "team-a", "-o", "json"))
    cluster_queue = local["spec"]["clusterQueue"]
    plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(job))

    def workload() -> dict[str, Any] | None:
        for item in get_all(plane, "workloads.kueue.x-k8s.io", namespaced=True):
            owners = item["metadata"].get("ownerReferences") or []
            if any(o["kind"] == "Job" and o["name"] == job["metadata"]["name"] for o in owners):
                return item
        return None

    wait_until(
        lambda: (w := workload()) is not None and (w.get("status") or {}).get("admission"),
        timeout=60,
        what="the Job's Workload admitted by Kueue",
    )
    admitted = workload()
    assert admitted is not None
    admission = admitted["status"]["admission"]
    assert admission["clusterQueue"] == cluster_queue
    (podset,) = admission["podSetAssignments"]
    flavor_name = podset["flavors"]["nvidia.com/gpu"]
    flavor = json.loads(plane.kubectl_run("get", "resourceflavor", flavor_name, "-o", "json"))

    def pod() -> dict[str, Any] | None:
        pods = json.loads(
            plane.kubectl_run(
                "get",
                "pods",
                "-n",
                "team-a",
                "-l",
                f"job-name={job['metadata']['name']}",
                "-o",
                "json",
            )
        )["items"]
        return pods[0] if pods else None

    wait_until(
        lambda: (p := pod()) is not None and p["spec"].get("nodeName"),
        timeout=60,
        what="the Job's Pod bound by kube-scheduler",
    )
    bound = pod()
    assert bound is not None
    node = json.loads(plane.kubectl_run("get", "node", bound["spec"]["nodeName"], "-o", "json"))
    labels = node["metadata"].get("labels") or {}
    assert flavor["spec"].get("nodeLabels"), f"flavor {flavor_name} selects no nodes"
    for key, value in flavor["spec"]["nodeLabels"].items():
        assert labels.get(key) == value, f"{node['metadata']['name']} lacks the flavor's {key}"
    # Kueue injected the flavor's node labels into the Pod, as it does on admission.
    assert (flavor["spec"].get("nodeLabels") or {}).items() <= (
        bound["spec"].get("nodeSelector") or {}
    ).items()
    plane.kubectl_run(
        "wait",
        "--for=condition=complete",
        "--timeout=90s",
        "-n",
        "team-a",
        f"job/{job['metadata']['name']}",
    )

    def quota_free() -> bool:
        status = json.loads(plane.kubectl_run("get", "clusterqueue", cluster_queue, "-o", "json"))
        usage = (status.get("status") or {}).get("flavorsReservation") or []
        return all(
            str(r.get("total", "0")) in ("0", "0m") for f in usage for r in f.get("resources") or []
        )

    wait_until(quota_free, timeout=60, what="the ClusterQueue's reservation back to 0")
