"""Scenario d on real Kueue: teams. A team that borrows the idle devices of the others is
preempted by Kueue when an owner submits work within its share (docs/teams.md, "Borrowing and
reclaiming"): the borrower's Workload is evicted for ``InCohortReclamation`` and the owner's is
admitted (docs/realcluster.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal

from gpustack_operator.domain.simdevices import SIM_DEVICES_ANNOTATION
from tests.realcluster.cluster import (
    SYSTEM_NAMESPACE,
    Operator,
    condition,
    device_job,
    get_all,
    is_admitted,
    load_nodes,
    wait_converged,
    workloads,
)
from tests.realcluster.conftest import register
from tests.realcluster.controlplane import REPO, LoopbackPlane, wait_until
from tests.realcluster.nodes import NodeAgents

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]
PLANES = ("real", "sim")
"""The backends each scenario runs on (conftest.py): the real control plane and `sim --serve`."""

EXAMPLE = REPO / "examples" / "cluster.yaml"
TEAMS = REPO / "examples" / "teams" / "teams.yaml"
POOL_NODE = "gpu-no-cpu-info"
"""The example's H100 node: one pool of 8 cards, research 50%, serving 30% (borrow: false),
the rest the Cohort's own."""


def _queue_for(plane: LoopbackPlane, namespace: str) -> tuple[str, str]:
    """(LocalQueue, ClusterQueue) of the H100 pool in *namespace*."""
    flavors = {f["metadata"]["name"]: f for f in get_all(plane, "resourceflavors.kueue.x-k8s.io")}
    node = json.loads(plane.kubectl_run("get", "node", POOL_NODE, "-o", "json"))
    labels = node["metadata"]["labels"]
    for local in get_all(plane, "localqueues.kueue.x-k8s.io", namespaced=True):
        if local["metadata"]["namespace"] != namespace:
            continue
        cluster_queue = json.loads(
            plane.kubectl_run("get", "clusterqueue", local["spec"]["clusterQueue"], "-o", "json")
        )
        for group in cluster_queue["spec"]["resourceGroups"]:
            if "nvidia.com/gpu" not in group["coveredResources"]:
                continue
            for entry in group["flavors"]:
                selector = (flavors[entry["name"]]["spec"].get("nodeLabels")) or {}
                if selector and all(labels.get(k) == v for k, v in selector.items()):
                    return local["metadata"]["name"], cluster_queue["metadata"]["name"]
    raise AssertionError(f"no H100 LocalQueue in {namespace}")


def _job(name: str, namespace: str, queue: str) -> dict[str, Any]:
    return device_job(name, namespace, queue)


def _admitted(workload: dict[str, Any]) -> bool:
    return is_admitted(workload)


@pytest.fixture(scope="module")
def teams_cluster(
    plane: LoopbackPlane, operator: Operator, agents: NodeAgents, portal: BlockingPortal
) -> Operator:
    nodes = load_nodes(EXAMPLE)
    plane.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            for ns in ("research", "serving")
        ]
    )
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "gpustack-teams", "namespace": SYSTEM_NAMESPACE},
                "data": {"teams.yaml": TEAMS.read_text()},
            }
        ]
    )
    register(portal, agents, nodes)
    operator.start_device_managers(
        n["metadata"]["name"]
        for n in nodes
        if SIM_DEVICES_ANNOTATION in (n["metadata"].get("annotations") or {})
    )
    operator.start_worker()
    wait_converged(plane, operator, f"--teams={TEAMS}")
    return operator


def test_an_owner_reclaims_what_a_borrowing_team_uses(
    plane: LoopbackPlane, teams_cluster: Operator
) -> None:
    research, _ = _queue_for(plane, "research")
    serving, _ = _queue_for(plane, "serving")
    cards = 8
    for index in range(cards):
        plane.kubectl_run(
            "apply", "-f", "-", stdin=json.dumps(_job(f"r{index}", "research", research))
        )
    # research runs on all eight cards: its own four, the Cohort's and serving's idle ones.
    wait_until(
        lambda: sum(_admitted(w) for w in workloads(plane, "research")) == cards,
        timeout=120,
        what="research admitted on every card (borrowing)",
    )
    plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(_job("s0", "serving", serving)))
    wait_until(
        lambda: any(_admitted(w) for w in workloads(plane, "serving")),
        timeout=120,
        what="serving's Job admitted within its share",
    )
    evicted = [
        w
        for w in workloads(plane, "research")
        if (c := condition(w, "Preempted")) is not None and c["status"] == "True"
    ]
    assert len(evicted) == 1, [w["metadata"]["name"] for w in evicted]
    preempted = condition(evicted[0], "Preempted")
    assert preempted is not None
    assert preempted["reason"] == "InCohortReclamation", preempted
    assert sum(_admitted(w) for w in workloads(plane, "research")) == cards - 1
