"""Teams end to end with Jobs (docs/teams.md, "Borrowing and reclaiming"): team A borrows the
idle quota of team B; B's Job then reclaims it, preempting A's, as Kueue's classic preemption
does within a cohort (docs/simulator.md, "Kueue admission stand-in")."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import anyio
import pytest

from gpustack_operator.commands.queues import pool_rows, render_table
from gpustack_operator.domain.chain.teams import POOL_ANNOTATION, parse_teams
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.profiles import local_queue_name
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.worker.support import MANUFACTURERS, fast_config, node

pytestmark = pytest.mark.anyio

KUEUE = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TEAMS = """
teams:
  - name: team-a
    namespaces: [team-a]
    shares: [{pools: {manufacturer: nvidia}, share: 50%}]
  - name: team-b
    namespaces: [team-b]
    shares: [{pools: {manufacturer: nvidia}, share: 50%}]
"""


def job(name: str, namespace: str, queue: str, gpus: int) -> dict[str, Any]:
    requests = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": requests}}
                    ],
                }
            },
        },
    }


def workload(cluster: SimCluster, namespace: str, job_name: str) -> dict[str, Any] | None:
    for wl in cluster.sim.store.list(KUEUE, "Workload", namespace=namespace):
        if any(o["name"] == job_name for o in wl["metadata"].get("ownerReferences", [])):
            return dict(wl)
    return None


def condition(wl: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for cond in ((wl or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return {}


async def until(cluster: SimCluster, namespace: str, job_name: str, check: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        wl = workload(cluster, namespace, job_name)
        if wl is not None and check(wl):
            return wl
        assert time.monotonic() < deadline, f"{namespace}/{job_name}: {wl}"
        await anyio.sleep(0.05)


def admitted(wl: dict[str, Any]) -> bool:
    return condition(wl, "QuotaReserved").get("status") == "True"


async def test_a_team_borrows_idle_quota_and_the_owner_reclaims_it() -> None:
    policy = ChainPolicy(manufacturers=MANUFACTURERS)
    policy = replace(policy, teams=parse_teams(TEAMS, policy.manufacturers))
    nodes = [node("gpu-h100", cpu="64", memory="512Gi", cards=("NVIDIA H100", 8))]
    config = fast_config(policy=policy)
    async with SimCluster(nodes, ["team-a", "team-b"], worker_config=config) as cluster:
        await cluster.converge(45)
        store = cluster.sim.store
        team_queues = [
            q
            for q in store.list(KUEUE, "ClusterQueue")
            if (q["metadata"].get("annotations") or {}).get(POOL_ANNOTATION)
        ]
        assert len(team_queues) == 2
        pool = team_queues[0]["metadata"]["annotations"][POOL_ANNOTATION]
        queue = local_queue_name(pool)  # the pool's usual LocalQueue name, in both namespaces

        # Team A asks for 6 of the 8 cards: 4 of its own and 2 borrowed from idle team B.
        store.create(job("a-big", "team-a", queue, 6))
        wl_a = await until(cluster, "team-a", "a-big", admitted)
        assert wl_a["status"]["admission"]["clusterQueue"] == f"{pool}-team-a"
        status_a = store.get(KUEUE, "ClusterQueue", f"{pool}-team-a")
        assert status_a is not None
        gpu = next(
            r
            for f in status_a["status"]["flavorsUsage"]
            for r in f["resources"]
            if r["name"] == "nvidia.com/gpu"
        )
        assert gpu == {"name": "nvidia.com/gpu", "total": "6", "borrowed": "2"}
        # What `queues -n team-a` shows (docs/teams.md, "What plan and queues show").
        rows = pool_rows(
            store.list(KUEUE, "ClusterQueue"), store.list(KUEUE, "LocalQueue", namespace="team-a")
        )
        row = next(r for r in rows if r["localQueue"] == queue)
        assert (row["team"], row["share"], row["quota"], row["borrowed"]) == (
            "team-a",
            "50%",
            "4",
            "2",
        )
        assert row["borrows"] and row["lends"]
        assert render_table(rows).splitlines()[0].split()[-3:] == ["TEAM", "SHARE", "BORROWED"]

        # Team B wants its 4 back: A's Job is preempted, B's admitted within its quota.
        store.create(job("b-own", "team-b", queue, 4))
        wl_b = await until(cluster, "team-b", "b-own", admitted)
        assert wl_b["status"]["admission"]["clusterQueue"] == f"{pool}-team-b"
        wl_a = await until(cluster, "team-a", "a-big", lambda w: not admitted(w))
        assert condition(wl_a, "Evicted")["reason"] == "Preempted"
        assert condition(wl_a, "Preempted")["reason"] == "InCohortReclamation"
        # Kueue v0.19.2's message (pkg/scheduler/preemption/preemption.go, preemptionMessage)
        cohort = status_a["spec"]["cohortName"]
        assert condition(wl_a, "Preempted")["message"] == (
            f"Preempted to accommodate a workload (UID: {wl_b['metadata']['uid']}, JobUID: "
            f"{wl_b['metadata']['labels']['kueue.x-k8s.io/job-uid']}) due to reclamation within "
            f"the cohort; preemptor path: /{cohort}/{pool}-team-b; preemptee path: "
            f"/{cohort}/{pool}-team-a"
        )
        reasons = {
            (e["involvedObject"]["name"], e["reason"])
            for e in store.list("v1", "Event", "team-a") + store.list("v1", "Event", "team-b")
        }
        assert {
            (wl_a["metadata"]["name"], "EvictedDueToPreempted"),
            (wl_a["metadata"]["name"], "Preempted"),
            (wl_b["metadata"]["name"], "PreemptedWorkload"),
            ("a-big", "Stopped"),
        } <= reasons, reasons
        assert "admission" not in wl_a["status"]
        a_job = store.get("batch/v1", "Job", "a-big", "team-a")
        assert a_job is not None and a_job["spec"]["suspend"] is True
        # A's Job now waits: 4 cards are free, it asks for 6.
        wl_a = await until(
            cluster,
            "team-a",
            "a-big",
            lambda w: (
                "insufficient unused quota" in condition(w, "QuotaReserved").get("message", "")
            ),
        )
        b_job = store.get("batch/v1", "Job", "b-own", "team-b")
        assert b_job is not None and b_job["spec"]["suspend"] is False
