"""Kueue's cohort rules as the sim's stand-in applies them (docs/simulator.md, "Kueue
admission stand-in"): a Cohort's own quota, borrowing and lending limits, reclaim within the
cohort."""

from __future__ import annotations

from fractions import Fraction

from gpustack_sim.standins.kueueadmission import ClusterQueueView, assign
from gpustack_sim.standins.kueuecohort import (
    Admitted,
    borrows,
    cohort_quotas,
    reclaim_policy,
    reclaim_targets,
)

from .test_kueueadmission import cq, gpus, q

FLAVOR = "h100"


def team(name: str, nominal: int, **limits: int) -> ClusterQueueView:
    return cq(name, {FLAVOR: {"cpu": q(100), "nvidia.com/gpu": q(nominal, **limits)}}, cohort="c")


def used(**per_queue: int) -> dict[str, dict[tuple[str, str], Fraction]]:
    return {n: {(FLAVOR, "nvidia.com/gpu"): Fraction(v)} for n, v in per_queue.items()}


def admitted(name: str, queue: str, gpu: int, at: str, priority: int = 0) -> Admitted:
    return Admitted(
        key=("ns", name),
        cluster_queue=queue,
        priority=priority,
        admitted_at=at,
        usage={(FLAVOR, "nvidia.com/gpu"): Fraction(gpu)},
    )


def test_a_cohorts_own_quota_is_shared_by_its_queues() -> None:
    cohort = {
        "metadata": {"name": "c"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "2"}],
                        }
                    ],
                }
            ]
        },
    }
    own = cohort_quotas([cohort, {"metadata": {"name": "empty"}, "spec": {}}])
    assert own == {"c": {(FLAVOR, "nvidia.com/gpu"): Fraction(2)}}
    a, b = team("a", 3), team("b", 3)
    # 3 of a's own + 3 idle of b + 2 of the Cohort's: 8 at most.
    assert assign(a, [a, b], {}, [("main", gpus(8))], own["c"]).fits
    assert not assign(a, [a, b], {}, [("main", gpus(9))], own["c"]).fits
    assert not assign(a, [a, b], {}, [("main", gpus(8))]).fits


def test_borrowing_and_lending_limits() -> None:
    a, b = team("a", 4, borrowingLimit=1), team("b", 4)
    assert assign(a, [a, b], {}, [("main", gpus(5))]).fits
    assert not assign(a, [a, b], {}, [("main", gpus(6))]).fits  # nominal 4 + borrowing 1
    a, b = team("a", 4), team("b", 4, lendingLimit=0)
    assert not assign(a, [a, b], {}, [("main", gpus(5))]).fits  # b lends nothing
    result = assign(a, [a, b], {}, [("main", gpus(4))])
    assert result.fits and not borrows(a, {}, result)


def test_the_owner_reclaims_what_another_team_borrows() -> None:
    a, b = team("a", 4), team("b", 4)
    members = {"a": a, "b": b}
    usage = used(a=6)
    running = [
        admitted("a-1", "a", 2, "2026-01-01T00:00:01Z"),
        admitted("a-2", "a", 4, "2026-01-01T00:00:02Z"),
    ]
    wanted = [("main", gpus(4))]

    def fits(u: dict[str, dict[tuple[str, str], Fraction]]) -> bool:
        return assign(b, [a, b], u, wanted).fits

    assert not fits(usage)  # 2 cards free, b asks 4
    # Most recently admitted first: a-2 alone makes room (a-1 is not needed).
    targets = reclaim_targets(b, "Any", 0, wanted, members, usage, running, fits)
    assert [t.key for t in targets] == [("ns", "a-2")]
    # Kueue's default Never, and LowerPriority against an equal priority: no preemption.
    assert reclaim_targets(b, "Never", 0, wanted, members, usage, running, fits) == []
    assert reclaim_targets(b, "LowerPriority", 0, wanted, members, usage, running, fits) == []
    targets = reclaim_targets(b, "LowerPriority", 1, wanted, members, usage, running, fits)
    assert [t.key for t in targets] == [("ns", "a-2")]


def test_no_reclaim_beyond_the_owners_nominal_quota_or_from_a_queue_within_its_own() -> None:
    a, b = team("a", 4), team("b", 4)
    members = {"a": a, "b": b}
    running = [admitted("a-1", "a", 4, "2026-01-01T00:00:01Z")]
    usage = used(a=4, b=4)
    wanted = [("main", gpus(1))]

    def fits(u: dict[str, dict[tuple[str, str], Fraction]]) -> bool:
        return assign(b, [a, b], u, wanted).fits

    # b would go above its nominal quota: borrowing never preempts (reclaim only).
    assert reclaim_targets(b, "Any", 0, wanted, members, usage, running, fits) == []
    # a is within its own quota: nothing of it is b's to take back.
    assert reclaim_targets(b, "Any", 0, wanted, members, used(a=4), running, fits) == []


def test_reclaim_policy_defaults_to_never() -> None:
    assert reclaim_policy({"spec": {}}) == "Never"
    assert reclaim_policy({"spec": {"preemption": {"reclaimWithinCohort": "Any"}}}) == "Any"
