"""Kueue's cohort rules as the simulator's Kueue stand-in applies them (a test double).

What team queues need (docs/teams.md): a Cohort's own ``nominalQuota`` as a shared pool of
its ClusterQueues, the order Kueue tries pending Workloads in (those that fit without
borrowing first), and classic preemption's reclaim within the cohort: a ClusterQueue below
its nominal quota takes back what others borrow from it. Pure functions of plain objects;
:mod:`gpustack_sim.standins.kueue` calls them. Each rule and its Kueue source is listed in
docs/simulator.md, "Kueue admission stand-in"; messages and condition reasons follow Kueue
v0.19.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpustack_operator.domain.quantities import parse_quantity
from gpustack_sim.standins.kueueadmission import Assignment, ClusterQueueView, Usage

__all__ = [
    "Admitted",
    "borrows",
    "cohort_quotas",
    "eviction_conditions",
    "preemption_message",
    "reclaim_policy",
    "reclaim_targets",
]

Requests = Sequence[tuple[str, Mapping[str, Fraction]]]
"""(pod set, resource -> amount) as :func:`~gpustack_sim.standins.kueueadmission.assign`
takes them."""


def cohort_quotas(cohorts: Iterable[Mapping[str, Any]]) -> dict[str, Usage]:
    """Each Cohort's own ``nominalQuota`` by (flavor, resource): Kueue adds it to what the
    cohort's ClusterQueues share; a Cohort without a parent lends all of it to them."""
    out: dict[str, Usage] = {}
    for cohort in cohorts:
        quotas: Usage = {}
        for group in (cohort.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for res in flavor.get("resources") or []:
                    amount = parse_quantity(res.get("nominalQuota", 0)) or Fraction(0)
                    quotas[(str(flavor["name"]), str(res["name"]))] = amount
        if quotas:
            out[str(cohort["metadata"]["name"])] = quotas
    return out


def reclaim_policy(cluster_queue: Mapping[str, Any]) -> str:
    """``spec.preemption.reclaimWithinCohort``: ``Never`` (Kueue's default), ``LowerPriority``
    or ``Any``."""
    preemption = (cluster_queue.get("spec") or {}).get("preemption") or {}
    return str(preemption.get("reclaimWithinCohort") or "Never")


def borrows(cq: ClusterQueueView, usage: Mapping[str, Usage], assignment: Assignment) -> bool:
    """Whether admitting *assignment* takes *cq* above its nominal quota somewhere."""
    used = dict(usage.get(cq.name, {}))
    for podset, flavors in assignment.flavors.items():
        for resource, flavor in flavors.items():
            key = (flavor, resource)
            used[key] = used.get(key, Fraction(0)) + assignment.usage[podset][resource]
            quota = cq.quota(flavor, resource)
            if quota is not None and used[key] > quota.nominal:
                return True
    return False


@dataclass(frozen=True)
class Admitted:
    """An admitted Workload as preemption sees it."""

    key: tuple[str, str]
    """(namespace, name)"""
    cluster_queue: str
    priority: int
    admitted_at: str
    """``QuotaReserved``'s lastTransitionTime: the most recent is preempted first."""
    usage: Usage


def _totals(requests: Requests) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    for _, per in requests:
        for resource, amount in per.items():
            total[resource] = total.get(resource, Fraction(0)) + amount
    return total


def _within_nominal_flavor(
    cq: ClusterQueueView, usage: Mapping[str, Usage], wanted: Mapping[str, Fraction]
) -> str | None:
    """The first flavor where *wanted* fits *cq*'s nominal quota on top of its usage: only
    then may it reclaim (Kueue, classic preemption: the preemptor's queue stays within its
    nominal quota)."""
    used = usage.get(cq.name, {})
    for group in cq.groups:
        asked = {r: a for r, a in wanted.items() if r in group.covered}
        if not asked:
            continue
        for flavor, quotas in group.flavors:
            if all(
                r in quotas and used.get((flavor, r), Fraction(0)) + a <= quotas[r].nominal
                for r, a in asked.items()
            ):
                return flavor
    return None


def _is_borrowing(
    view: ClusterQueueView, usage: Mapping[str, Usage], flavor: str, resources: Iterable[str]
) -> bool:
    used = usage.get(view.name, {})
    for resource in resources:
        quota = view.quota(flavor, resource)
        if quota is not None and used.get((flavor, resource), Fraction(0)) > quota.nominal:
            return True
    return False


def _without(usage: Mapping[str, Usage], victims: Iterable[Admitted]) -> dict[str, Usage]:
    out = {cq: dict(per) for cq, per in usage.items()}
    for victim in victims:
        per = out.setdefault(victim.cluster_queue, {})
        for key, amount in victim.usage.items():
            per[key] = per.get(key, Fraction(0)) - amount
    return out


def reclaim_targets(
    cq: ClusterQueueView,
    policy: str,
    priority: int,
    requests: Requests,
    members: Mapping[str, ClusterQueueView],
    usage: Mapping[str, Usage],
    admitted: Iterable[Admitted],
    fits: Callable[[Mapping[str, Usage]], bool],
) -> list[Admitted]:
    """The Workloads to preempt so a Workload of *cq* (at *priority*) fits, by Kueue's
    classic preemption restricted to reclaiming within the cohort; ``[]`` when it may not
    or cannot. *members* are the cohort's ClusterQueues by name, *fits* tells whether the
    Workload fits a given usage.

    Candidates are admitted Workloads of other ClusterQueues of the cohort that borrow in
    the flavor and resources it needs (``LowerPriority``: of lower priority only), lowest
    priority first, then the most recently admitted; they are taken greedily while their
    queue still borrows, until the Workload fits; then each is put back, last first, if
    the Workload fits without it.
    """
    if policy not in ("Any", "LowerPriority") or cq.cohort is None:
        return []
    wanted = _totals(requests)
    flavor = _within_nominal_flavor(cq, usage, wanted)
    if flavor is None:
        return []
    candidates = [
        a
        for a in admitted
        if a.cluster_queue != cq.name
        and a.cluster_queue in members
        and any(k[0] == flavor and k[1] in wanted for k in a.usage)
        and (policy == "Any" or a.priority < priority)
    ]
    candidates.sort(key=lambda a: (a.priority, _reverse(a.admitted_at), a.key))
    targets: list[Admitted] = []
    current = _without(usage, ())
    for candidate in candidates:
        view = members[candidate.cluster_queue]
        if not _is_borrowing(view, current, flavor, wanted):
            continue
        targets.append(candidate)
        current = _without(usage, targets)
        if fits(current):
            break
    else:
        return []
    for victim in reversed(list(targets)):
        rest = [t for t in targets if t is not victim]
        if fits(_without(usage, rest)):
            targets = rest
    return targets


def _reverse(timestamp: str) -> tuple[int, ...]:
    """Sorts RFC 3339 times newest first."""
    return tuple(-ord(c) for c in timestamp)


def preemption_message(
    preemptor_uid: str, job_uid: str, preemptor_path: str, preemptee_path: str
) -> str:
    """Kueue v0.19's message for a Workload preempted to reclaim quota within the cohort
    (``pkg/scheduler/preemption/preemption.go``, ``preemptionMessage``); a path is
    ``/<cohort>/<ClusterQueue>`` (``buildCQPath``)."""
    return (
        f"Preempted to accommodate a workload (UID: {preemptor_uid or 'UNKNOWN'}, "
        f"JobUID: {job_uid or 'UNKNOWN'}) due to reclamation within the cohort; "
        f"preemptor path: {preemptor_path or 'UNKNOWN'}; preemptee path: "
        f"{preemptee_path or 'UNKNOWN'}"
    )


def eviction_conditions(message: str) -> list[tuple[str, str, str, str]]:
    """(type, status, reason, message) Kueue sets on a Workload preempted to reclaim quota
    within the cohort; *message* is :func:`preemption_message`'s."""
    return [
        ("Evicted", "True", "Preempted", message),
        ("Preempted", "True", "InCohortReclamation", message),
        ("QuotaReserved", "False", "Preempted", message),
        ("Admitted", "False", "NoReservation", "The workload has no reservation"),
    ]
