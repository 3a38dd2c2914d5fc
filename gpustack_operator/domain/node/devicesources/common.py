"""Helpers shared by the label sources: allocatable counts and small label parsers."""

from __future__ import annotations

from collections.abc import Mapping

from gpustack_operator.domain.labels import INSTANCE_TYPE_LABEL
from gpustack_operator.domain.quantities import parse_count, parse_quantity


def allocatable_count(allocatable: Mapping[str, object], resource: str) -> int:
    """Whole devices of *resource* in ``status.allocatable`` (0 when absent or not positive)."""
    quantity = parse_quantity(allocatable.get(resource))
    if quantity is None or quantity <= 0:
        return 0
    return int(quantity)


def label_count(labels: Mapping[str, str], key: str) -> int | None:
    """A positive integer label (``"8"``), else ``None``."""
    return parse_count(labels.get(key))


def instance_family(labels: Mapping[str, str]) -> str:
    """The cloud instance family: ``trn1`` of ``trn1.32xlarge`` (``""`` without the kubelet's
    well-known ``node.kubernetes.io/instance-type`` label)."""
    return labels.get(INSTANCE_TYPE_LABEL, "").partition(".")[0]
