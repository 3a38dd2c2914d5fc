"""Kueue's usage status has one reader (domain/chain/kueueusage.py): deleting a queue, lowering
quotas while queues change kind, keeping a flavor for running work and ``queues``' borrowed
amounts read the same amounts."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.domain.chain.kueueusage import (
    borrowed,
    flavor_in_use,
    has_reservations,
    held_in,
    in_use,
    queue_usage,
    usage_is_final,
)
from gpustack_operator.domain.chain.queues import quota_below_usage

REPO = Path(__file__).resolve().parents[3]


def queue(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "q"},
        "spec": {
            "resourceGroups": [
                {
                    "flavors": [
                        {"name": "a", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}
                    ]
                }
            ]
        },
        "status": status,
    }


def resources(*entries: dict[str, Any]) -> list[dict[str, Any]]:
    return list(entries)


def test_every_reading_agrees_on_one_status() -> None:
    q = queue(
        flavorsReservation=[
            {"name": "a", "resources": [{"name": "nvidia.com/gpu", "total": "6", "borrowed": "0"}]},
            {"name": "b", "resources": []},
        ],
        flavorsUsage=[
            {"name": "a", "resources": [{"name": "nvidia.com/gpu", "total": "4", "borrowed": "2"}]},
            "not a map",
        ],
        reservingWorkloads=2,
        admittedWorkloads=1,
    )
    usage = queue_usage(q)
    assert (usage.reserving, usage.admitted) == (2, 1)
    assert usage.flavors == {"a", "b"}
    assert held_in(q) == {("a", "nvidia.com/gpu"): Fraction(6)}
    assert in_use(q) == {("a", "nvidia.com/gpu"): Fraction(4)}
    assert borrowed(q, "nvidia.com/gpu") == 2
    assert has_reservations(q)
    assert flavor_in_use(q, "a") and not flavor_in_use(q, "b")
    smaller = queue()
    smaller["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 3
    assert quota_below_usage(smaller, q) == ["a/nvidia.com/gpu: 3 < 4 in use"]


@pytest.mark.parametrize(
    ("status", "reserved", "in_a"),
    [
        ({}, False, False),
        ({"reservingWorkloads": 1}, True, False),
        ({"admittedWorkloads": True}, False, False),  # not a count
        ({"flavorsUsage": [{"name": "a", "resources": [{"name": "cpu"}]}]}, False, False),
        ({"flavorsUsage": [{"name": "a", "resources": [{"name": "cpu", "total": "x"}]}]},
         True, True),
        ({"flavorsReservation": [{"name": "a", "resources": [{"name": "cpu", "borrowed": "1"}]}]},
         True, False),
    ],
)  # fmt: skip
def test_absent_amounts_are_zero_and_unparsable_ones_in_use(
    status: dict[str, Any], reserved: bool, in_a: bool
) -> None:
    """Deleting a queue that may hold work is the mistake to avoid (docs/architecture.md)."""
    q = queue(**status)
    assert has_reservations(q) is reserved
    assert flavor_in_use(q, "a") is in_a
    assert not held_in(q) and not in_use(q)


def test_no_other_product_module_reads_the_usage_fields() -> None:
    """Only domain/chain/kueueusage.py names Kueue's usage fields; the gateway forwards Kueue's
    status to its clients as Kueue wrote it (summed per resource, docs/worker-gateway.md) and
    decides nothing from it."""
    fields = re.compile(
        r"\"(flavorsUsage|flavorsReservation|reservingWorkloads|admittedWorkloads)\""
    )
    allowed = {"gpustack_operator/domain/chain/kueueusage.py", "gpustack_operator/gateway/pools.py"}
    readers = sorted(
        str(path.relative_to(REPO))
        for root in ("gpustack_operator", "controllers")
        for path in (REPO / root).rglob("*.py")
        if str(path.relative_to(REPO)) not in allowed
        and fields.search(path.read_text(encoding="utf-8"))
    )
    assert not readers, "modules that read Kueue's usage status themselves: " + ", ".join(readers)


def reported(
    *, generation: int, observed: int | None, stop: str | None = None, deleting: bool = False
) -> dict[str, Any]:
    """A queue at *generation* whose Active condition Kueue stamped with *observed*
    (``None``: Kueue never wrote its status)."""
    obj = queue(flavorsReservation=[])
    obj["metadata"]["generation"] = generation
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-11-29T14:07:39Z"
    if stop is not None:
        obj["spec"]["stopPolicy"] = stop
    if observed is not None:
        active = {"type": "Active", "status": "False", "observedGeneration": observed}
        obj["status"]["conditions"] = [active]
    return obj


@pytest.mark.parametrize(
    ("state", "final"),
    [
        # Admitting: a Workload admitted after this status is missing from it.
        (reported(generation=1, observed=1), False),
        # Held, but Kueue's status is older than the hold: it may miss the last admission.
        (reported(generation=2, observed=1, stop="Hold"), False),
        (reported(generation=2, observed=1, deleting=True), False),
        # Kueue reported on the stopped spec: nothing more can be admitted since.
        (reported(generation=2, observed=2, stop="Hold"), True),
        (reported(generation=2, observed=2, stop="HoldAndDrain"), True),
        (reported(generation=3, observed=3, deleting=True), True),
        # Never taken in by Kueue: nothing could be admitted to it.
        (reported(generation=1, observed=None), True),
    ],
)
def test_usage_is_final_only_once_kueue_reported_on_the_stopped_queue(
    state: dict[str, Any], final: bool
) -> None:
    """Kueue writes a queue's usage a moment after it admits (docs/teams.md, "Never more
    admitted than exists, meanwhile"): only a status written for a held or deleted spec
    counts everything the queue holds."""
    assert usage_is_final(state) is final
