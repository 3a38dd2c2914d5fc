"""Pool entries: what one ClusterQueue offers, in a shape clients need no Kueue to read.

A pool is one ClusterQueue of one cluster: its cohort, the device it serves (from the
``note.gpustack.ai/*`` annotations the worker writes, see docs/labels.md, else parsed from the
queue's name), the per-device unit (CPU and memory that come with one card), the nominal
quotas summed over its flavors, and the usage Kueue reports in the queue's status. Pure
functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpustack_operator.domain.chain.queues import cluster_queue_cohort
from gpustack_operator.domain.labels import note
from gpustack_operator.domain.nodeview import annotations_of, name_of
from gpustack_operator.domain.profiles import parse_node_profile
from gpustack_operator.domain.quantities import sum_quantities

__all__ = ["pool_entry", "sum_quantities"]

JSON = dict[str, Any]


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _flavors(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        _mapping(flavor)
        for group in _list(spec.get("resourceGroups"))
        for flavor in _list(_mapping(group).get("flavors"))
    ]


def _nominal(spec: Mapping[str, Any]) -> dict[str, str]:
    return sum_quantities(
        (str(_mapping(res).get("name", "")), _mapping(res).get("nominalQuota"))
        for flavor in _flavors(spec)
        for res in _list(flavor.get("resources"))
    )


def _status_usage(status: Mapping[str, Any], field: str) -> dict[str, str] | None:
    """``status.flavorsUsage`` / ``flavorsReservation`` summed over flavors; None if absent."""
    if field not in status:
        return None
    return sum_quantities(
        (str(_mapping(res).get("name", "")), _mapping(res).get("total"))
        for flavor in _list(status.get(field))
        for res in _list(_mapping(flavor).get("resources"))
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _int_text(value: str) -> int | None:
    return int(value) if value.isdigit() else None


def pool_entry(cluster: str, cluster_queue: Mapping[str, Any]) -> JSON:
    """The pool a ClusterQueue of *cluster* describes (see the module docstring)."""
    name = name_of(cluster_queue)
    notes = annotations_of(cluster_queue)
    profile = parse_node_profile(name)
    spec = _mapping(cluster_queue.get("spec"))
    status = _mapping(cluster_queue.get("status"))

    acceleratable = notes.get(note("acceleratable"), "").lower() == "true"
    if note("acceleratable") not in notes and profile is not None:
        acceleratable = profile.acceleratable
    manufacturer = notes.get(note("manufacturer")) or (profile.manufacturer if profile else "")
    unit: JSON = {
        "cpu": notes.get(note("unitCPU")) or (str(profile.cpu) if profile else None),
        "memory": notes.get(note("unitRAM")) or (f"{profile.ram}Gi" if profile else None),
    }
    if acceleratable:
        unit["accelerators"] = profile.accelerators if profile and profile.accelerators else 1
        sliced = _int_text(notes.get(note("slicedAccelerator"), ""))
        if sliced is None and profile is not None:
            sliced = profile.sliced
        if sliced:
            unit["slices"] = sliced

    workloads: JSON | None = None
    if any(k in status for k in ("pendingWorkloads", "reservingWorkloads", "admittedWorkloads")):
        workloads = {
            "pending": _count(status.get("pendingWorkloads")),
            "reserving": _count(status.get("reservingWorkloads")),
            "admitted": _count(status.get("admittedWorkloads")),
        }
    return {
        "cluster": cluster,
        "name": name,
        "cohort": cluster_queue_cohort(cluster_queue),
        "acceleratable": acceleratable,
        "manufacturer": manufacturer,
        "product": notes.get(note("product"), ""),
        "family": notes.get(note("family"), ""),
        "unit": unit,
        "flavors": [str(f.get("name", "")) for f in _flavors(spec)],
        "nominalQuota": _nominal(spec),
        "usage": _status_usage(status, "flavorsUsage"),
        "reservation": _status_usage(status, "flavorsReservation"),
        "workloads": workloads,
    }
