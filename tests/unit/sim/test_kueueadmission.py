"""Kueue's admission rules as the sim's stand-in applies them (docs/simulator.md, "Kueue
admission stand-in"): transformations, flavor order, fungibility, quota and cohort borrowing."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from gpustack_sim.standins.kueueadmission import (
    ClusterQueueView,
    apply_transformations,
    assign,
    pod_requests,
    transformations_from_config,
)

CREDITS = "credits.gpustack.ai/nvidia"


def cq(
    name: str,
    flavors: dict[str, dict[str, Any]],
    *,
    cohort: str | None = None,
    covered: tuple[str, ...] = ("cpu", "nvidia.com/gpu"),
    when_can_borrow: str = "MayStopSearch",
    stop: str | None = None,
) -> ClusterQueueView:
    """A ClusterQueue with one resource group; flavors map name -> {resource: quota dict}."""
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "flavorFungibility": {"whenCanBorrow": when_can_borrow},
        "resourceGroups": [
            {
                "coveredResources": list(covered),
                "flavors": [
                    {"name": f, "resources": [{"name": r, **q} for r, q in res.items()]}
                    for f, res in flavors.items()
                ],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    if stop:
        spec["stopPolicy"] = stop
    return ClusterQueueView.from_object({"metadata": {"name": name}, "spec": spec})


def gpus(n: int, cpu: int = 1) -> dict[str, Fraction]:
    return {"cpu": Fraction(cpu), "nvidia.com/gpu": Fraction(n)}


def q(nominal: int, **limits: int) -> dict[str, Any]:
    return {"nominalQuota": str(nominal), **{k: str(v) for k, v in limits.items()}}


def test_first_flavor_with_room_is_assigned() -> None:
    queue = cq(
        "a",
        {"f1": {"cpu": q(8), "nvidia.com/gpu": q(1)}, "f2": {"cpu": q(8), "nvidia.com/gpu": q(4)}},
    )
    result = assign(
        queue, [queue], {"a": {("f1", "nvidia.com/gpu"): Fraction(1)}}, [("main", gpus(1))]
    )
    assert result.fits
    assert result.flavors["main"] == {"cpu": "f2", "nvidia.com/gpu": "f2"}


def test_too_big_a_request_waits_with_kueues_message() -> None:
    queue = cq("a", {"t4": {"cpu": q(8), "nvidia.com/gpu": q(2)}})
    result = assign(queue, [queue], {}, [("main", gpus(3))])
    assert result.message == (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
        "flavor t4, previously considered podsets requests (0) + current podset request (3) "
        "> maximum capacity (2)"
    )
    busy = assign(
        queue, [queue], {"a": {("t4", "nvidia.com/gpu"): Fraction(2)}}, [("main", gpus(1))]
    )
    assert (
        "insufficient unused quota for nvidia.com/gpu in flavor t4, 1 more needed" in busy.message
    )


def test_a_resource_the_queue_does_not_cover_is_unavailable() -> None:
    queue = cq("cpu-pool", {"c": {"cpu": q(8)}}, covered=("cpu",))
    result = assign(queue, [queue], {}, [("main", gpus(1))])
    assert result.message == (
        "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in "
        "ClusterQueue"
    )


def test_borrowing_limit_zero_keeps_a_sliced_queue_to_its_own_quota() -> None:
    sliced = cq(
        "sliced",
        {"f": {"cpu": q(8, borrowingLimit=0), "nvidia.com/gpu": q(1, borrowingLimit=0)}},
        cohort="c",
    )
    other = cq("whole", {"f": {"cpu": q(8), "nvidia.com/gpu": q(4)}}, cohort="c")
    members = [sliced, other]
    refused = assign(sliced, members, {}, [("main", gpus(2))])
    assert "> maximum capacity (1)" in refused.message
    borrowing = assign(other, members, {}, [("main", gpus(5))])
    assert borrowing.fits  # the unlimited queue borrows the sliced one's idle card


def test_lending_limit_caps_what_the_cohort_may_borrow() -> None:
    lender = cq("lender", {"f": {"cpu": q(8), "nvidia.com/gpu": q(4, lendingLimit=1)}}, cohort="c")
    borrower = cq("borrower", {"f": {"cpu": q(8), "nvidia.com/gpu": q(1)}}, cohort="c")
    members = [lender, borrower]
    assert assign(borrower, members, {}, [("main", gpus(2))]).fits
    assert "> maximum capacity (2)" in assign(borrower, members, {}, [("main", gpus(3))]).message


def test_flavor_fungibility_try_next_flavor_prefers_a_flavor_without_borrowing() -> None:
    flavors = {
        "f1": {"cpu": q(8), "nvidia.com/gpu": q(1)},
        "f2": {"cpu": q(8), "nvidia.com/gpu": q(2)},
    }
    lender = cq("lender", {"f1": {"cpu": q(8), "nvidia.com/gpu": q(4)}}, cohort="c")
    stop = cq("a", flavors, cohort="c")
    try_next = cq("a", flavors, cohort="c", when_can_borrow="TryNextFlavor")
    assert (
        assign(stop, [stop, lender], {}, [("main", gpus(2))]).flavors["main"]["nvidia.com/gpu"]
        == "f1"
    )
    chosen = assign(try_next, [try_next, lender], {}, [("main", gpus(2))])
    assert chosen.flavors["main"]["nvidia.com/gpu"] == "f2"


def test_stop_policy_hold_marks_the_queue_stopped() -> None:
    assert cq("a", {}, stop="Hold").stopped and cq("a", {}, stop="HoldAndDrain").stopped
    assert not cq("a", {}, stop="None").stopped


def test_transformations_replace_and_retain() -> None:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "resources": {
            "transformations": [
                {"input": "nvidia.com/gpu", "strategy": "Replace", "outputs": {CREDITS: "1"}},
                {"input": "amd.com/gpu", "outputs": {"credits.gpustack.ai/amd": "2"}},
            ]
        },
    }
    transforms = transformations_from_config(config)
    requests = {"cpu": Fraction(1), "nvidia.com/gpu": Fraction(2), "amd.com/gpu": Fraction(1)}
    assert apply_transformations(requests, transforms) == {
        "cpu": Fraction(1),
        CREDITS: Fraction(2),
        "amd.com/gpu": Fraction(1),
        "credits.gpustack.ai/amd": Fraction(2),
    }
    assert transformations_from_config(None) == {}


def test_pod_requests_sum_containers_and_take_the_larger_init_container() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"resources": {"limits": {"nvidia.com/gpu": "1"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
    }
    assert pod_requests(spec) == {
        "cpu": Fraction(2),
        "memory": Fraction(2**30),
        "nvidia.com/gpu": Fraction(1),
    }
