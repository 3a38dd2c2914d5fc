"""Scenario d on real Kueue: teams. A team that borrows the idle devices of the others is
preempted by Kueue when an owner submits work within its share (docs/teams.md, "Borrowing and
reclaiming"): the borrower's Workload is evicted for ``InCohortReclamation`` and the owner's is
admitted. Beside it (docs/realcluster.md): a team queue of a sliced pool borrows the Cohort's
remainder; the Pods of a team queue whose name was cut to a DNS label carry
``kueue.x-k8s.io/cluster-queue-name``; a driver upgrade on a node of a team pool preempts no
one (docs/node-lifecycle.md, "Team quotas through maintenance")."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal

from gpustack_operator.domain.node.simdevices import SIM_DEVICES_ANNOTATION
from tests.realcluster.cluster import (
    SYSTEM_NAMESPACE,
    Operator,
    condition,
    device_job,
    get_all,
    is_admitted,
    load_nodes,
    wait_converged,
    workload_of,
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
SLICED_NODE = "gpu-a10g-sliced"
"""The example's A10G node: 32 slices; research 16, serving 9 (borrow: false), the Cohort 7."""
NPU_NODE = "npu-kunpeng"
"""The example's Ascend node: its pool's name is a DNS label of 53 characters, so the team
queue ``<pool>-research`` is cut to 63 with a hash (docs/naming.md, "Derived names")."""
WIDE_T4 = ("gpu-t4-wide-1", "gpu-t4-wide-2")
"""Two T4 nodes of four cards added to the example: a team pool of 8 (research 4, serving 2,
interns 1, the Cohort 1) that planned maintenance halves."""
TIMERS = ("--soft-grace=2s", "--join-window=3s", "--maintenance-grace=2s")
UPGRADE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/cluster-queue-name"


def _wide_t4_nodes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    t4 = next(n for n in nodes if n["metadata"]["name"] == "gpu-t4-1")
    out = []
    for name in WIDE_T4:
        node = copy.deepcopy(t4)
        node["metadata"]["name"] = name
        annotations = node["metadata"]["annotations"]
        devices = json.loads(annotations[SIM_DEVICES_ANNOTATION])
        devices[0]["count"] = 4
        annotations[SIM_DEVICES_ANNOTATION] = json.dumps(devices)
        capacity = {"cpu": "12", "memory": "48Gi", "ephemeral-storage": "100Gi"}
        node["status"]["capacity"] = capacity
        node["status"]["allocatable"] = dict(capacity)
        out.append(node)
    return out


def _queue_for(
    plane: LoopbackPlane,
    namespace: str,
    node_name: str = POOL_NODE,
    resource: str = "nvidia.com/gpu",
) -> tuple[str, str]:
    """(LocalQueue, ClusterQueue) in *namespace* of the pool of *node_name*'s devices.

    A LocalQueue whose ClusterQueue is gone is skipped: while teams are switched, a retired
    team queue can be deleted a moment before the LocalQueue that named it."""
    flavors = {f["metadata"]["name"]: f for f in get_all(plane, "resourceflavors.kueue.x-k8s.io")}
    node = json.loads(plane.kubectl_run("get", "node", node_name, "-o", "json"))
    labels = node["metadata"]["labels"]
    locals_ = [
        local
        for local in get_all(plane, "localqueues.kueue.x-k8s.io", namespaced=True)
        if local["metadata"]["namespace"] == namespace
    ]
    queues = {q["metadata"]["name"]: q for q in get_all(plane, "clusterqueues.kueue.x-k8s.io")}
    for local in locals_:
        cluster_queue = queues.get(local["spec"]["clusterQueue"])
        if cluster_queue is None:
            continue
        for group in cluster_queue["spec"]["resourceGroups"]:
            if resource not in group["coveredResources"]:
                continue
            for entry in group["flavors"]:
                selector = (flavors[entry["name"]]["spec"].get("nodeLabels")) or {}
                if selector and all(labels.get(k) == v for k, v in selector.items()):
                    return local["metadata"]["name"], cluster_queue["metadata"]["name"]
    raise AssertionError(f"no LocalQueue of {node_name}'s {resource} in {namespace}")


def _job(name: str, namespace: str, queue: str) -> dict[str, Any]:
    return device_job(name, namespace, queue)


def _admitted(workload: dict[str, Any]) -> bool:
    return is_admitted(workload)


@pytest.fixture(scope="module")
def teams_cluster(
    plane: LoopbackPlane, operator: Operator, agents: NodeAgents, portal: BlockingPortal
) -> Operator:
    nodes = load_nodes(EXAMPLE)
    nodes += _wide_t4_nodes(nodes)
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
    operator.start_worker(*TIMERS)
    wait_converged(plane, operator, f"--teams={TEAMS}", *TIMERS)
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


def _slices_job(name: str, namespace: str, queue: str, slices: int) -> dict[str, Any]:
    return device_job(name, namespace, queue, cards=slices)


def test_a_team_queue_of_a_sliced_pool_borrows_the_cohorts_remainder(
    plane: LoopbackPlane, teams_cluster: Operator
) -> None:
    """docs/teams.md, "What the operator builds": with serving on all its 9 slices, research
    (16 of its own) is admitted for 23: the 7 it borrows are the Cohort's remainder."""
    research, _ = _queue_for(plane, "research", SLICED_NODE)
    serving, _ = _queue_for(plane, "serving", SLICED_NODE)
    plane.kubectl_run(
        "apply", "-f", "-", stdin=json.dumps(_slices_job("s-sliced", "serving", serving, 9))
    )
    wait_until(
        lambda: is_admitted(workload_of(plane, "s-sliced", "serving")),
        timeout=120,
        what="serving's 9 slices admitted",
    )
    plane.kubectl_run(
        "apply", "-f", "-", stdin=json.dumps(_slices_job("r-sliced", "research", research, 23))
    )
    wait_until(
        lambda: is_admitted(workload_of(plane, "r-sliced", "research")),
        timeout=120,
        what="research's 23 slices admitted (7 borrowed from the Cohort's remainder)",
    )


def test_pods_of_a_team_queue_cut_to_a_dns_label_carry_its_name(
    plane: LoopbackPlane, teams_cluster: Operator
) -> None:
    """docs/naming.md, "Derived names": Kueue labels a Pod with its ClusterQueue's name only
    when that is a DNS label; the cut team queue name is one."""
    local, cluster_queue = _queue_for(plane, "research", NPU_NODE, "huawei.com/npu")
    assert cluster_queue.endswith("-research"), cluster_queue
    job = device_job("r-npu", "research", local)
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {
        "requests": {"cpu": "1", "memory": "1Gi", "huawei.com/npu": "1"},
        "limits": {"huawei.com/npu": "1"},
    }
    plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(job))

    def pods() -> list[dict[str, Any]]:
        return list(
            json.loads(
                plane.kubectl_run(
                    "get", "pods", "-n", "research", "-l", "job-name=r-npu", "-o", "json"
                )
            )["items"]
        )

    wait_until(lambda: bool(pods()), timeout=120, what="the Ascend Job's Pod created")
    (pod,) = pods()
    assert pod["metadata"]["labels"].get(QUEUE_NAME_LABEL) == cluster_queue, pod["metadata"]


def _team_gpus(plane: LoopbackPlane, cluster_queue: str) -> tuple[int, str]:
    queue = json.loads(plane.kubectl_run("get", "clusterqueue", cluster_queue, "-o", "json"))
    total = sum(
        int(str(r["nominalQuota"]))
        for g in queue["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
        if r["name"] == "nvidia.com/gpu"
    )
    note = (queue["metadata"].get("annotations") or {}).get("note.gpustack.ai/team-hold", "")
    return total, note


def test_maintenance_on_a_team_pool_preempts_no_one(
    plane: LoopbackPlane, teams_cluster: Operator
) -> None:
    """docs/node-lifecycle.md, "Team quotas through maintenance": research runs on its 4 T4
    cards; a driver upgrade on one of the pool's two nodes keeps every team's quota, so
    serving's Job within its share is admitted and no research Workload is preempted."""
    research, research_cq = _queue_for(plane, "research", WIDE_T4[0])
    serving, _ = _queue_for(plane, "serving", WIDE_T4[0])
    for index in range(4):
        plane.kubectl_run(
            "apply", "-f", "-", stdin=json.dumps(device_job(f"r-t4-{index}", "research", research))
        )
    wait_until(
        lambda: all(is_admitted(workload_of(plane, f"r-t4-{i}", "research")) for i in range(4)),
        timeout=120,
        what="research admitted on its 4 T4 cards",
    )
    assert _team_gpus(plane, research_cq) == (4, "")
    plane.kubectl_run("label", "node", WIDE_T4[1], f"{UPGRADE_LABEL}=cordon-required")
    # The worker has judged the upgrade once the grace is over: the quota is held (with its
    # note) or, without the hold, it dropped.
    wait_until(
        lambda: _team_gpus(plane, research_cq) != (4, ""),
        timeout=60,
        what="the worker's verdict on the driver upgrade",
    )
    plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(device_job("s-t4", "serving", serving)))
    wait_until(
        lambda: is_admitted(workload_of(plane, "s-t4", "serving")),
        timeout=120,
        what="serving's Job within its share admitted",
    )
    for index in range(4):
        workload = workload_of(plane, f"r-t4-{index}", "research")
        preempted = condition(workload, "Preempted")
        assert preempted is None or preempted["status"] != "True", preempted
        assert is_admitted(workload), f"r-t4-{index} lost its admission"
    gpus, note = _team_gpus(plane, research_cq)
    assert gpus == 4 and "driver-upgrade" in note, (gpus, note)
