"""Queues that change kind without over-admitting (docs/teams.md, "Moving a pool to teams,
and back").

When a pool's queues change kind (teams declared or removed, a team dropped), the queues
that retire keep what Kueue has admitted in them until it finishes; the queues that replace
them are given only what the retiring ones do not hold, and reach the whole pool as the old
work finishes. Pure functions: the ClusterQueue and Cohort reconcilers read the retiring
queues' ``status`` from their cache and call these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, Final

from gpustack_operator.domain.chain.kueueusage import Held, held_in
from gpustack_operator.domain.quantities import (
    format_binary_quantity,
    format_decimal_quantity,
    parse_quantity,
)

_BINARY: Final = ("memory", "ephemeral-storage")


def held_by(queues: Iterable[Mapping[str, Any]]) -> Held:
    """What *queues* hold together."""
    total: Held = {}
    for queue in queues:
        for key, amount in held_in(queue).items():
            total[key] = total.get(key, Fraction(0)) + amount
    return total


def own_quota(cohort: Mapping[str, Any] | None) -> Held:
    """A Cohort's own nominal quota (``spec.resourceGroups``), per flavor and resource: what
    its queues may borrow besides each other's. Of a ClusterQueue (the same field), its
    whole nominal quota."""
    found: Held = {}
    spec = cohort.get("spec") if isinstance(cohort, Mapping) else None
    for group in (spec.get("resourceGroups") if isinstance(spec, Mapping) else None) or ():
        for flavor in group.get("flavors") or ():
            for resource in flavor.get("resources") or ():
                amount = parse_quantity(resource.get("nominalQuota"))
                if amount is not None and amount > 0:
                    found[(str(flavor.get("name")), str(resource.get("name")))] = amount
    return found


def _render(resource: str, amount: Fraction) -> str:
    value = max(0, int(amount))  # whole units, rounded down: never more than is free
    if resource in _BINARY or resource.startswith("hugepages-"):
        return format_binary_quantity(value)
    return format_decimal_quantity(value)


def less_held(queue: Mapping[str, Any], held: Held) -> dict[str, Any]:
    """*queue* (a desired ClusterQueue) with each nominal quota lowered by what *held* says
    retiring queues hold of that flavor and resource, never below 0: what its replacements
    may be given while the old work runs."""
    spec = dict(queue.get("spec") or {})
    groups = []
    for group in spec.get("resourceGroups") or ():
        flavors = []
        for flavor in group.get("flavors") or ():
            resources = []
            for resource in flavor.get("resources") or ():
                key = (str(flavor.get("name")), str(resource.get("name")))
                nominal = parse_quantity(resource.get("nominalQuota"))
                if key in held and nominal is not None:
                    resource = {
                        **resource,
                        "nominalQuota": _render(key[1], nominal - held[key]),
                    }
                resources.append(resource)
            flavors.append({**flavor, "resources": resources})
        groups.append({**group, "flavors": flavors})
    spec["resourceGroups"] = groups
    return {**queue, "spec": spec}


def lending_nothing(spec: Mapping[str, Any]) -> dict[str, Any]:
    """*spec* of a retiring queue with ``lendingLimit: 0`` on every resource: its unused
    quota is not lent to the queues that replace it in the Cohort."""
    groups = []
    for group in spec.get("resourceGroups") or ():
        flavors = [
            {
                **flavor,
                "resources": [{**r, "lendingLimit": "0"} for r in flavor.get("resources") or ()],
            }
            for flavor in group.get("flavors") or ()
        ]
        groups.append({**group, "flavors": flavors})
    return {**spec, "resourceGroups": groups}
