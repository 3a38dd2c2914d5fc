"""Scenario h on real Kueue: teams switched on, off and on again while Jobs run on the H100
pool of ``examples/cluster.yaml`` (8 cards). At each step the chain comes to equal ``plan``
for the declaration in force once the retiring queues' work is gone, and never are more
cards admitted than the pool has, counted from Kueue's own admitted Workloads
(docs/teams.md, "Never more admitted than exists, meanwhile"; docs/realcluster.md)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal

from gpustack_operator.domain.node.simdevices import SIM_DEVICES_ANNOTATION
from tests.realcluster.cluster import (
    SYSTEM_NAMESPACE,
    Operator,
    condition,
    device_job,
    is_admitted,
    load_nodes,
    wait_converged,
    workloads,
)
from tests.realcluster.conftest import register
from tests.realcluster.controlplane import REPO, ControlPlane, wait_until
from tests.realcluster.nodes import NodeAgents
from tests.realcluster.test_teams import POOL_NODE, _queue_for

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

EXAMPLE = REPO / "examples" / "cluster.yaml"
TEAMS = REPO / "examples" / "teams" / "teams.yaml"
CARDS = 8
"""The H100 pool: one node of eight cards; research has 50% of it, serving 30%."""
GPU = "nvidia.com/gpu"


def admitted_cards(plane: ControlPlane) -> int:
    """Cards of every Workload that holds quota now, by Kueue's own admission record.

    A Workload that is Finished or no longer active (its Job deleted or done) keeps
    ``Admitted=True`` and its admission for a while, but Kueue v0.19.2 has already taken it out
    of its cache and freed its quota (kubernetes-sigs/kueue v0.19.2,
    pkg/controller/core/workload_controller.go, the update handler's finished-or-inactive case),
    so it is not counted: the next Job may be admitted in the same moment.
    """
    total = 0
    for workload in workloads(plane):
        finished = condition(workload, "Finished")
        if (
            not is_admitted(workload)
            or (finished is not None and finished["status"] == "True")
            or (workload.get("spec") or {}).get("active") is False
        ):
            continue
        admission = (workload.get("status") or {}).get("admission") or {}
        for assignment in admission.get("podSetAssignments") or []:
            usage = (assignment.get("resourceUsage") or {}).get(GPU)
            if usage is not None:
                total += int(str(usage))
    return total


class Watch:
    """The most cards admitted at any look, in a thread, for as long as a step runs."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.most = 0
        self.looks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.most = max(self.most, admitted_cards(self.plane))
                self.looks += 1
            except Exception:  # a kubectl call that failed under load: the next look counts
                pass
            self._stop.wait(0.5)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def teams_configmap() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gpustack-teams", "namespace": SYSTEM_NAMESPACE},
        "data": {"teams.yaml": TEAMS.read_text()},
    }


@pytest.fixture(scope="module")
def plain_cluster(
    plane: ControlPlane, operator: Operator, agents: NodeAgents, portal: BlockingPortal
) -> Iterator[Operator]:
    nodes = load_nodes(EXAMPLE)
    plane.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            for ns in ("research", "serving")
        ]
    )
    register(portal, agents, nodes)
    operator.start_device_managers(
        n["metadata"]["name"]
        for n in nodes
        if SIM_DEVICES_ANNOTATION in (n["metadata"].get("annotations") or {})
    )
    operator.start_worker()
    wait_converged(plane, operator)
    yield operator


def submit(plane: ControlPlane, name: str, namespace: str, cards: int) -> None:
    local, _ = _queue_for(plane, namespace)
    job = device_job(name, namespace, local, cards=cards)
    plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(job))


def admitted(plane: ControlPlane, namespace: str) -> int:
    return sum(is_admitted(w) for w in workloads(plane, namespace))


def finish(plane: ControlPlane, namespace: str) -> None:
    """The Jobs of *namespace* end (deleted, as a person cancelling them would)."""
    plane.kubectl_run("-n", namespace, "delete", "jobs", "--all", "--wait=false")
    wait_until(
        lambda: admitted(plane, namespace) == 0, timeout=120, what=f"{namespace}'s Jobs gone"
    )


def pending(plane: ControlPlane, namespace: str) -> bool:
    """Kueue looked at the Workload of *namespace* and did not admit it."""
    for workload in workloads(plane, namespace):
        for found in (workload.get("status") or {}).get("conditions") or []:
            if found["type"] == "QuotaReserved" and found["status"] == "False":
                return True
    return False


def test_teams_on_off_on_with_running_jobs_never_admits_more_than_exists(
    plane: ControlPlane, plain_cluster: Operator
) -> None:
    operator = plain_cluster
    assert POOL_NODE  # the pool's one node: its eight cards are the whole pool
    # Without teams, research takes every card of the pool.
    submit(plane, "before", "research", CARDS)
    wait_until(lambda: admitted(plane, "research") == 1, timeout=120, what="research on 8 cards")
    with Watch(plane) as watch:
        for step, with_teams in enumerate((True, False, True)):
            if with_teams:
                plane.apply([teams_configmap()])
            else:
                plane.kubectl_run("-n", SYSTEM_NAMESPACE, "delete", "configmap", "gpustack-teams")
            new, old = ("serving", "research") if with_teams else ("research", "serving")
            wait_until(
                lambda ns=new, t=with_teams: _queue_for(plane, ns)[1].endswith(f"-{ns}") == t,
                timeout=120,
                what=f"step {step}: {new}'s LocalQueue on its new queue",
            )
            # The old Job still runs on the retiring queue: a Job for the new queues that
            # fits the pool only once it ends (2 of serving's 30%; all 8 cards) must wait.
            submit(plane, f"step{step}", new, 2 if with_teams else CARDS)
            wait_until(
                lambda ns=new: pending(plane, ns),
                timeout=120,
                what=f"step {step}: Kueue holding {new}'s Job back",
            )
            assert admitted(plane, new) == 0, f"step {step}: admitted beside the old work"
            finish(plane, old)
            wait_until(
                lambda ns=new: admitted(plane, ns) == 1,
                timeout=120,
                what=f"step {step}: {new}'s Job admitted once the old work ended",
            )
            assert watch.most <= CARDS, f"step {step}: {watch.most} cards admitted of {CARDS}"
            wait_converged(plane, operator, *((f"--teams={TEAMS}",) if with_teams else ()))
    assert watch.looks > 10, "the admitted cards were looked at throughout"
    assert watch.most <= CARDS, f"{watch.most} cards admitted on a pool of {CARDS}"
