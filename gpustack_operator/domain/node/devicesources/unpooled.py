"""Allocatable extended resources that feed no pool (docs/devices.md, "Why a device gets no
pool").

A device plugin can advertise devices that no label names (a managed cloud's plugin without
NVIDIA GPU Feature Discovery, a plugin this project has no source for). Every such resource
gets a reason naming what is missing and the fix, so that no device is passed over in silence
(and, through ``merge.judged_diagnostics``, none before the node's sources had their chance).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.devicesources.common import allocatable_count
from gpustack_operator.domain.node.devicesources.model import (
    MODEL_UNKNOWN,
    UNKNOWN_RESOURCE,
    Diagnostic,
)

SOURCE: Final = "allocatable"
AKS_ACCELERATOR_LABEL: Final = "kubernetes.azure.com/accelerator"
# What names the model of a manufacturer's cards when its device plugin alone runs.
_LABELLERS: Final[Mapping[str, str]] = {
    "nvidia": "NVIDIA GPU Feature Discovery (GFD; part of the NVIDIA GPU Operator)",
    "amd": "the AMD GPU Operator's node labeller",
}


def is_extended_resource(name: str) -> bool:
    """A vendor's extended resource: ``<domain>/<name>`` outside ``*kubernetes.io``."""
    domain, sep, _ = name.partition("/")
    return bool(sep) and not domain.endswith("kubernetes.io")


def _model_unknown(
    resource: str, count: int, manufacturer: Manufacturer, labels: Mapping[str, str]
) -> Diagnostic:
    fixes = [f"run gpustack-operator's device manager for {manufacturer.name} on the node"]
    if manufacturer.name in _LABELLERS:
        fixes.insert(0, f"install {_LABELLERS[manufacturer.name]}")
    aks = labels.get(AKS_ACCELERATOR_LABEL, "")
    cause = (
        f"AKS marks the node {AKS_ACCELERATOR_LABEL}={aks} but no label names the card model"
        if aks
        else "its device plugin advertises them but no label names the model"
    )
    detail = f"{resource} ({count}): {cause}: {', or '.join(fixes)}"
    return Diagnostic(SOURCE, MODEL_UNKNOWN, detail, resource)


def unpooled_resources(
    labels: Mapping[str, str],
    allocatable: Mapping[str, object],
    manufacturers: Mapping[str, Manufacturer],
    accounted: Iterable[str],
) -> list[Diagnostic]:
    """One reason per positive allocatable extended resource not in *accounted* (the
    resources pools use and reasons already explain)."""
    done = set(accounted)
    by_resource = {m.resource_name: m for m in manufacturers.values()}
    problems = []
    for resource in sorted(allocatable):
        if resource in done or not is_extended_resource(resource):
            continue
        count = allocatable_count(allocatable, resource)
        if not count:
            continue
        manufacturer = by_resource.get(resource)
        if manufacturer is not None:
            problems.append(_model_unknown(resource, count, manufacturer, labels))
            continue
        detail = (
            f"{resource} ({count}): no device source of this project describes this resource, "
            "so it feeds no pool; if it is an accelerator, report it (docs/devices.md)"
        )
        problems.append(Diagnostic(SOURCE, UNKNOWN_RESOURCE, detail, resource))
    return problems
