"""What Kueue reports a ClusterQueue holds: the one reader of its usage ``status``.

Kueue v0.19.2 (``apis/kueue/v1beta2/clusterqueue_types.go``, the same fields in v1beta1)
reports per flavor and resource the quota reserved (``status.flavorsReservation``: reserved
includes admitted) and used by admitted workloads (``status.flavorsUsage``), each with a
``total`` and the ``borrowed`` part, and counts the workloads reserving quota
(``reservingWorkloads``) and admitted (``admittedWorkloads``). Deleting a queue, lowering
quotas while queues change kind, flavors kept for work still running and ``queues``' borrowed
amounts all read it here (docs/teams.md, docs/node-lifecycle.md). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from gpustack_operator.domain.quantities import parse_quantity

RESERVATION: Final = "flavorsReservation"
USAGE: Final = "flavorsUsage"
USAGE_FIELDS: Final = (RESERVATION, USAGE)
RESERVING: Final = "reservingWorkloads"
ADMITTED: Final = "admittedWorkloads"
ACTIVE: Final = "Active"
"""The ClusterQueue condition Kueue writes with every status write, its
``observedGeneration`` the generation it was computed for."""
STOPPED: Final = ("Hold", "HoldAndDrain")
"""``spec.stopPolicy`` values that stop Kueue admitting to a queue."""


@dataclass(frozen=True)
class Amount:
    """One resource of one flavor in one of the two usage fields."""

    field: str
    """:data:`RESERVATION` or :data:`USAGE`."""
    flavor: str
    resource: str
    total: Fraction | None
    """``None``: present but unparsable (count it as in use); an absent amount is 0."""
    borrowed: Fraction | None


@dataclass(frozen=True)
class QueueUsage:
    """A ClusterQueue's usage as Kueue reports it (all zero without a status)."""

    reserving: int
    admitted: int
    amounts: tuple[Amount, ...]
    flavors: frozenset[str]
    """Every flavor named in either field, with or without resources."""


def _amount(resource: Mapping[str, Any], key: str) -> Fraction | None:
    return parse_quantity(resource[key]) if key in resource else Fraction(0)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def queue_usage(cluster_queue: Mapping[str, Any] | None) -> QueueUsage:
    """Read *cluster_queue*'s usage status; entries that are not maps are skipped."""
    status = cluster_queue.get("status") if isinstance(cluster_queue, Mapping) else None
    if not isinstance(status, Mapping):
        return QueueUsage(0, 0, (), frozenset())
    amounts: list[Amount] = []
    flavors: set[str] = set()
    for field in USAGE_FIELDS:
        for flavor in status.get(field) or ():
            if not isinstance(flavor, Mapping):
                continue
            name = str(flavor.get("name") or "")
            if name:
                flavors.add(name)
            for resource in flavor.get("resources") or ():
                if isinstance(resource, Mapping):
                    amounts.append(
                        Amount(
                            field,
                            str(flavor.get("name")),
                            str(resource.get("name")),
                            _amount(resource, "total"),
                            _amount(resource, "borrowed"),
                        )
                    )
    return QueueUsage(
        _count(status.get(RESERVING)),
        _count(status.get(ADMITTED)),
        tuple(amounts),
        frozenset(flavors),
    )


def usage_is_final(cluster_queue: Mapping[str, Any]) -> bool:
    """Whether *cluster_queue*'s usage status counts everything it will ever hold: Kueue
    stopped admitting to it (held, or being deleted) and wrote its status since.

    Kueue v0.19.2 writes a ClusterQueue's usage a moment after it admits (the ClusterQueue
    controller is asked after ``UpdatesBatchPeriod``, one second: kubernetes-sigs/kueue
    v0.19.2, pkg/controller/core/clusterqueue_controller.go, ``NotifyWorkloadUpdate`` and
    ``updateCqStatusIfChanged``), each write stamping its ``Active`` condition with the
    generation it saw; holding or deleting the queue raises that generation. So only a
    status written for the stopped spec is final: before, a just-admitted Workload may be
    missing from it (docs/teams.md, "Never more admitted than exists, meanwhile"). A queue
    Kueue never wrote a status for is final too: nothing can be admitted to a queue Kueue
    has not taken in.
    """
    meta = cluster_queue.get("metadata")
    status = cluster_queue.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    active = next(
        (c for c in conditions or () if isinstance(c, Mapping) and c.get("type") == ACTIVE),
        None,
    )
    if active is None:
        return True
    spec = cluster_queue.get("spec")
    stopped = isinstance(spec, Mapping) and spec.get("stopPolicy") in STOPPED
    deleting = isinstance(meta, Mapping) and bool(meta.get("deletionTimestamp"))
    if not (stopped or deleting):
        return False
    generation = _count(meta.get("generation")) if isinstance(meta, Mapping) else 0
    return _count(active.get("observedGeneration")) >= generation


def usage_fields(cluster_queue: Mapping[str, Any]) -> tuple[object, object]:
    """The two usage fields as Kueue wrote them: compare them to see a usage change without
    reading them."""
    status = cluster_queue.get("status")
    if not isinstance(status, Mapping):
        return None, None
    return status.get(RESERVATION), status.get(USAGE)


def has_reservations(cluster_queue: Mapping[str, Any]) -> bool:
    """Whether Kueue reports quota reserved or used in this queue, or workloads in it.

    Any non-zero ``total`` or ``borrowed`` in either field counts, as does a workload holding
    a reservation or admitted (pending workloads hold nothing: they could never be admitted
    without flavors). An unparsable amount counts as in use: deleting a queue that may hold
    work is the mistake to avoid.
    """
    usage = queue_usage(cluster_queue)
    if usage.reserving > 0 or usage.admitted > 0:
        return True
    return any(
        amount is None or amount != 0 for a in usage.amounts for amount in (a.total, a.borrowed)
    )


def flavor_in_use(cluster_queue: Mapping[str, Any], flavor: str) -> bool:
    """Whether *cluster_queue*'s status reports anything reserved or used in *flavor*."""
    return any(
        a.flavor == flavor and (a.total is None or a.total != 0)
        for a in queue_usage(cluster_queue).amounts
    )


Held = dict[tuple[str, str], Fraction]
"""(flavor, resource) -> amount Kueue reports reserved."""


def held_in(queue: Mapping[str, Any]) -> Held:
    """What Kueue reports *queue* holds, per flavor and resource: the larger of its reserved
    and used totals (reserved includes admitted; a stale status may carry either)."""
    found: Held = {}
    for a in queue_usage(queue).amounts:
        if a.total is None or a.total <= 0:
            continue
        key = (a.flavor, a.resource)
        found[key] = max(found.get(key, Fraction(0)), a.total)
    return found


def in_use(queue: Mapping[str, Any] | None) -> Held:
    """What Kueue reports admitted workloads use in *queue* (``status.flavorsUsage``
    totals), per flavor and resource; zero amounts left out."""
    return {
        (a.flavor, a.resource): a.total
        for a in queue_usage(queue).amounts
        if a.field == USAGE and a.total
    }


def borrowed(queue: Mapping[str, Any], resource: str) -> Fraction:
    """What admitted workloads in *queue* borrow of *resource*, over its flavors."""
    return sum(
        (
            a.borrowed or Fraction(0)
            for a in queue_usage(queue).amounts
            if a.field == USAGE and a.resource == resource
        ),
        Fraction(0),
    )
