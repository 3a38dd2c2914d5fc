"""Queues changing kind (docs/teams.md, "Never more admitted than exists, meanwhile")."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from gpustack_operator.domain.chain.transition import (
    held_by,
    lending_nothing,
    less_held,
    own_quota,
)

FLAVOR = "f"


def queue(gpus: str, used: str | None = None) -> dict[str, Any]:
    resources = [
        {"name": "cpu", "nominalQuota": "16"},
        {"name": "memory", "nominalQuota": "64Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": gpus},
    ]
    obj: dict[str, Any] = {
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [{"name": FLAVOR, "resources": resources}],
                }
            ]
        }
    }
    if used is not None:
        usage = [
            {"name": FLAVOR, "resources": [{"name": "nvidia.com/gpu", "total": used}]},
        ]
        obj["status"] = {"flavorsReservation": usage, "flavorsUsage": usage}
    return obj


def gpus(obj: dict[str, Any]) -> str:
    (group,) = obj["spec"]["resourceGroups"]
    return str(group["flavors"][0]["resources"][2]["nominalQuota"])


def test_the_new_queue_gets_what_the_retiring_ones_do_not_hold() -> None:
    held = held_by([queue("4", used="3"), queue("2", used="2"), queue("2")])
    assert held == {(FLAVOR, "nvidia.com/gpu"): Fraction(5)}
    assert gpus(less_held(queue("8"), held)) == "3"
    assert gpus(less_held(queue("4"), held)) == "0", "never below 0"


def test_a_retiring_queue_lends_nothing_and_a_cohort_quota_counts() -> None:
    spec = lending_nothing(queue("8")["spec"])
    limits = {r.get("lendingLimit") for r in spec["resourceGroups"][0]["flavors"][0]["resources"]}
    assert limits == {"0"}
    assert own_quota(queue("2")) == {
        (FLAVOR, "cpu"): 16,
        (FLAVOR, "memory"): 64 * 2**30,
        (FLAVOR, "nvidia.com/gpu"): 2,
    }
