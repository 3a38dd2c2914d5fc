"""``sim --demo-jobs`` on a chain with teams: one team borrows, the owner reclaims.

docs/teams.md, "See it in the simulator": in the shared pool with the most devices, a team
that borrows asks for every device it can reach (its own, what the other teams lend, the
Cohort's own quota) and is admitted by borrowing; then a team that lends asks for its own
share, and Kueue's stand-in preempts the borrower to give it back (reclaimWithinCohort). The
teams, pools and LocalQueues come from the converged chain, as ``queues`` sees them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpustack_operator.commands.queues import pool_rows
from gpustack_operator.domain.chain.teams import POOL_ANNOTATION
from gpustack_operator.domain.nodeview import annotations_of
from gpustack_sim.demojobs import (
    DemoJob,
    _unit_requests,
    _whole,
    _workload_of,
    job_manifest,
    outcome,
)

if TYPE_CHECKING:
    from gpustack_sim.cluster.cluster import SimCluster

_POLL = 0.05


@dataclass(frozen=True)
class TeamDemo:
    borrower: DemoJob
    owner: DemoJob
    resource: str
    pool: str


def _cohort_own(cohort: Mapping[str, Any] | None, resource: str) -> int:
    return sum(
        _whole(r.get("nominalQuota", "0"))
        for g in ((cohort or {}).get("spec") or {}).get("resourceGroups") or []
        for f in g.get("flavors") or []
        for r in f.get("resources") or []
        if r.get("name") == resource
    )


def pick_team_demo(
    cluster_queues: list[dict[str, Any]],
    local_queues: list[dict[str, Any]],
    cohorts: list[dict[str, Any]],
) -> TeamDemo | None:
    """The two Jobs of the demo, or ``None`` when no shared pool has a team that borrows
    and another that lends a share of at least one device."""
    queues = {cq["metadata"]["name"]: cq for cq in cluster_queues}
    by_cohort = {c["metadata"]["name"]: c for c in cohorts}
    rows = [r for r in pool_rows(cluster_queues, local_queues) if r.get("team")]
    rows.sort(key=lambda r: (r["namespace"], r["localQueue"]))
    pools: dict[str, dict[str, dict[str, Any]]] = {}  # pool -> team -> its first row
    for row in rows:
        pool = annotations_of(queues[row["clusterQueue"]]).get(POOL_ANNOTATION, "")
        pools.setdefault(pool, {}).setdefault(row["team"], row)
    best: tuple[int, TeamDemo] | None = None
    for pool, teams in sorted(pools.items()):
        any_row = next(iter(teams.values()))
        resource = str(any_row["resource"])
        spec = queues[any_row["clusterQueue"]]["spec"]
        cohort = by_cohort.get(spec.get("cohortName") or spec.get("cohort") or "")
        for borrower in (t for t in teams.values() if t["borrows"]):
            owners = [
                t for t in teams.values() if t is not borrower and t["lends"] and _whole(t["quota"])
            ]
            if not owners:
                continue
            owner = owners[0]
            lent = sum(
                _whole(t["quota"]) for t in teams.values() if t is not borrower and t["lends"]
            )
            reach = _whole(borrower["quota"]) + lent + _cohort_own(cohort, resource)
            unit = _unit_requests(queues[borrower["clusterQueue"]])
            demo = TeamDemo(
                borrower=DemoJob(
                    "demo-borrow",
                    str(borrower["localQueue"]),
                    str(borrower["namespace"]),
                    {**unit, resource: str(reach)},
                ),
                owner=DemoJob(
                    "demo-reclaim",
                    str(owner["localQueue"]),
                    str(owner["namespace"]),
                    {**unit, resource: str(_whole(owner["quota"]))},
                ),
                resource=resource,
                pool=pool,
            )
            if best is None or reach > best[0]:
                best = (reach, demo)
            break
    return best[1] if best is not None else None


def _condition(wl: Mapping[str, Any] | None, kind: str) -> dict[str, Any]:
    for cond in ((wl or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


async def _until(what: str, deadline: float, check: Callable[[], str | None]) -> str:
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"the team demo: {what} did not happen in time: raise --timeout")
        await asyncio.sleep(_POLL)


async def run_team_demo(cluster: SimCluster, seconds: float, api: str) -> str | None:
    """Run the demo; ``None`` when the chain offers none (then the usual demo runs)."""
    store = cluster.sim.store
    demo = pick_team_demo(
        store.list(api, "ClusterQueue"), store.list(api, "LocalQueue"), store.list(api, "Cohort")
    )
    if demo is None:
        return None
    deadline = time.monotonic() + seconds

    def decided(job: DemoJob, admitted: bool) -> Callable[[], str | None]:
        def check() -> str | None:
            wl = _workload_of(store.list(api, "Workload"), job)
            live = store.get("batch/v1", "Job", job.name, job.namespace)
            found = outcome(wl, live)
            if found is None or found.startswith("waiting") == admitted:
                return None
            return found

        return check

    store.create(job_manifest(demo.borrower))
    first = await _until("the borrowing Job's admission", deadline, decided(demo.borrower, True))
    borrowed = _borrowed(store.list(api, "ClusterQueue"), demo.borrower, store, api, demo.resource)
    store.create(job_manifest(demo.owner))
    second = await _until("the owner's admission", deadline, decided(demo.owner, True))

    def evicted() -> str | None:
        wl = _workload_of(store.list(api, "Workload"), demo.borrower)
        preempted = _condition(wl, "Preempted")
        waiting = _condition(wl, "QuotaReserved")
        if preempted.get("status") != "True" or waiting.get("status") != "False":
            return None
        return f"preempted ({preempted.get('reason')}): {preempted.get('message')}"

    third = await _until("the borrower's preemption", deadline, evicted)
    lines = [f"Teams (--demo-jobs; docs/teams.md): pool {demo.pool}"]
    for job, result in ((demo.borrower, first), (demo.owner, second)):
        asks = " ".join(f"{k}={v}" for k, v in sorted(job.requests.items()))
        lines.append(f"  {job.name}  queue {job.queue} in {job.namespace}  asks {asks}")
        lines.append(f"    {result}")
        if job is demo.borrower:
            lines.append(f"    borrowing {borrowed} {demo.resource} its team does not own")
    lines.append(f"  {demo.borrower.name}  then {third}")
    return "\n".join(lines) + "\n"


def _borrowed(
    cluster_queues: list[dict[str, Any]], job: DemoJob, store: Any, api: str, resource: str
) -> str:
    """What the queue of *job*'s Workload reports as borrowed of *resource* (status)."""
    wl = _workload_of(store.list(api, "Workload"), job)
    name = ((wl or {}).get("status") or {}).get("admission", {}).get("clusterQueue", "")
    for cq in cluster_queues:
        if cq["metadata"]["name"] != name:
            continue
        for flavor in (cq.get("status") or {}).get("flavorsUsage") or []:
            for r in flavor.get("resources") or []:
                if r.get("name") == resource:
                    return str(r.get("borrowed", "0"))
    return "?"
