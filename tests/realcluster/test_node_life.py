"""Scenario e on real Kueue: quotas that follow each node's life (docs/node-lifecycle.md).

A cordoned node leaves its pool's quota after the soft grace and comes back after the join
window; work Kueue admitted before stays admitted when the quota drops below it (Kueue evicts
nothing for a lower quota), and new work waits until the quota is back. A pool whose nodes are
all in a driver upgrade is put on Hold: admitted work keeps running, new work waits
(docs/realcluster.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal

from gpustack_operator.domain.node.simdevices import SIM_DEVICES_ANNOTATION
from tests.realcluster.cluster import (
    Operator,
    condition,
    device_job,
    get_all,
    is_admitted,
    load_nodes,
    wait_converged,
    workload_of,
)
from tests.realcluster.conftest import register
from tests.realcluster.controlplane import REPO, LoopbackPlane, wait_until
from tests.realcluster.nodes import NodeAgents

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]
PLANES = ("real", "sim")
"""The backends each scenario runs on (conftest.py): the real control plane and `sim --serve`."""

EXAMPLE = REPO / "examples" / "cluster.yaml"
T4_QUEUE = "gpustack-fnv64-6e2ada8e7ab9ade3"
"""The LocalQueue of the example's T4 pool (gpu-t4-1 and gpu-t4-2, two cards each), as
docs/workloads.md names it."""
T4_NODES = ("gpu-t4-1", "gpu-t4-2")
NAMESPACE = "default"
TIMERS = ("--soft-grace=2s", "--join-window=3s", "--maintenance-grace=2s")
UPGRADE_LABEL = "nvidia.com/gpu-driver-upgrade-state"


@pytest.fixture(scope="module")
def life_cluster(
    plane: LoopbackPlane, operator: Operator, agents: NodeAgents, portal: BlockingPortal
) -> Operator:
    nodes = load_nodes(EXAMPLE)
    register(portal, agents, nodes)
    operator.start_device_managers(
        n["metadata"]["name"]
        for n in nodes
        if SIM_DEVICES_ANNOTATION in (n["metadata"].get("annotations") or {})
    )
    operator.start_worker(*TIMERS)
    wait_converged(plane, operator, *TIMERS)
    return operator


def _cluster_queue(plane: LoopbackPlane) -> dict[str, Any]:
    local = json.loads(
        plane.kubectl_run("get", "localqueue", T4_QUEUE, "-n", NAMESPACE, "-o", "json")
    )
    return dict(
        json.loads(
            plane.kubectl_run("get", "clusterqueue", local["spec"]["clusterQueue"], "-o", "json")
        )
    )


def _gpu_quota(queue: dict[str, Any]) -> int:
    total = 0
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                if resource["name"] == "nvidia.com/gpu":
                    total += int(str(resource["nominalQuota"]))
    return total


def _job(name: str) -> dict[str, Any]:
    return device_job(name, NAMESPACE, T4_QUEUE)


def _workload_of(plane: LoopbackPlane, job: str) -> dict[str, Any] | None:
    return workload_of(plane, job)


def _admitted(plane: LoopbackPlane, job: str) -> bool:
    return is_admitted(workload_of(plane, job))


def test_a_cordon_moves_the_quota_and_kueue_keeps_what_it_admitted(
    plane: LoopbackPlane, life_cluster: Operator
) -> None:
    assert _gpu_quota(_cluster_queue(plane)) == 4
    for index in range(3):
        plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(_job(f"before-{index}")))
    wait_until(
        lambda: all(_admitted(plane, f"before-{i}") for i in range(3)),
        timeout=90,
        what="three Jobs admitted on four cards",
    )
    plane.kubectl_run("cordon", T4_NODES[0])
    wait_until(
        lambda: _gpu_quota(_cluster_queue(plane)) == 2, timeout=60, what="the quota at 2 cards"
    )
    # Kueue evicts nothing when a quota drops below what it admitted.
    assert all(_admitted(plane, f"before-{i}") for i in range(3))
    plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(_job("after-cordon")))
    wait_until(
        lambda: (
            (c := condition(_workload_of(plane, "after-cordon"), "QuotaReserved")) is not None
            and c["status"] == "False"
        ),
        timeout=60,
        what="the new Job waiting for quota",
    )
    assert not _admitted(plane, "after-cordon")
    plane.kubectl_run("uncordon", T4_NODES[0])
    wait_until(
        lambda: _gpu_quota(_cluster_queue(plane)) == 4, timeout=60, what="the quota back at 4"
    )
    wait_until(
        lambda: _admitted(plane, "after-cordon"), timeout=90, what="the waiting Job admitted"
    )


def test_a_pool_in_a_driver_upgrade_is_held_and_keeps_running_what_it_admitted(
    plane: LoopbackPlane, life_cluster: Operator
) -> None:
    admitted_before = [
        w["metadata"]["name"]
        for w in get_all(plane, "workloads.kueue.x-k8s.io", namespaced=True)
        if (c := condition(w, "Admitted")) is not None and c["status"] == "True"
    ]
    for node in T4_NODES:
        plane.kubectl_run("label", "--overwrite", "node", node, f"{UPGRADE_LABEL}=cordon-required")
    wait_until(
        lambda: _cluster_queue(plane)["spec"].get("stopPolicy") == "Hold",
        timeout=60,
        what="the pool's ClusterQueue on Hold",
    )
    plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(_job("during-upgrade")))
    wait_until(
        lambda: _workload_of(plane, "during-upgrade") is not None,
        timeout=60,
        what="the new Job's Workload",
    )
    # Held: Kueue reports the queue inactive and admits nothing new; what it admitted stays.
    if not plane.differs("ClusterQueue `Active` condition"):
        wait_until(
            lambda: any(
                c["type"] == "Active" and c["status"] == "False"
                for c in (_cluster_queue(plane).get("status") or {}).get("conditions") or []
            ),
            timeout=60,
            what="Kueue reporting the held queue inactive",
        )
    else:  # the stand-in keeps the Workload pending with Kueue's message instead
        wait_until(
            lambda: (
                (c := condition(_workload_of(plane, "during-upgrade"), "QuotaReserved")) is not None
                and c["status"] == "False"
            ),
            timeout=60,
            what="the new Job's Workload pending on the held queue",
        )
    assert not _admitted(plane, "during-upgrade")
    still = {
        w["metadata"]["name"]
        for w in get_all(plane, "workloads.kueue.x-k8s.io", namespaced=True)
        if (c := condition(w, "Admitted")) is not None and c["status"] == "True"
    }
    assert set(admitted_before) <= still
    for node in T4_NODES:
        plane.kubectl_run("label", "node", node, f"{UPGRADE_LABEL}-")
    wait_until(
        lambda: _cluster_queue(plane)["spec"].get("stopPolicy") in (None, "None"),
        timeout=60,
        what="the Hold lifted",
    )
