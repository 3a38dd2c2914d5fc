"""Karpenter (AWS provider) instance labels -> GPU device pools (docs/devices.md, "EKS").

Karpenter labels every node it launches with the EC2 instance type's GPU facts:
``karpenter.k8s.aws/instance-gpu-name`` (lower case, ``a10g``, ``h100``), ``-count``,
``-memory`` (MiB per GPU) and ``-manufacturer``. The device plugin of that manufacturer
advertises the cards; without it there is nothing to queue for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gpustack_operator.domain.node.devicesources.common import allocatable_count, label_count
from gpustack_operator.domain.node.devicesources.model import NO_ALLOCATABLE, DevicePool, Diagnostic

SOURCE: Final = "karpenter"
PREFIX: Final = "karpenter.k8s.aws/instance-gpu-"
NAME_LABEL: Final = PREFIX + "name"
COUNT_LABEL: Final = PREFIX + "count"
MEMORY_LABEL: Final = PREFIX + "memory"
MANUFACTURER_LABEL: Final = PREFIX + "manufacturer"
# Karpenter's GPU manufacturer value -> (our manufacturer, its device plugin's resource, the
# vendor's product-name prefix).
MANUFACTURERS: Final[Mapping[str, tuple[str, str, str]]] = {
    "nvidia": ("nvidia", "nvidia.com/gpu", "NVIDIA"),
    "amd": ("amd", "amd.com/gpu", "AMD"),
}


def karpenter_pools(
    manufacturer: str, labels: Mapping[str, str], allocatable: Mapping[str, object]
) -> tuple[list[DevicePool], list[Diagnostic]]:
    """The *manufacturer*'s GPU pool Karpenter's labels describe, or why it has none."""
    name = labels.get(NAME_LABEL, "")
    known = MANUFACTURERS.get(labels.get(MANUFACTURER_LABEL, "").lower())
    if not name or known is None or known[0] != manufacturer:
        return [], []
    _, resource, vendor = known
    product = f"{vendor} {name.upper()}"
    count = label_count(labels, COUNT_LABEL)
    advertised = allocatable_count(allocatable, resource)
    if advertised == 0:
        detail = (
            f"{product}: no allocatable {resource}: install the {vendor} device plugin on the "
            "node (EKS-optimized accelerated AMIs and EKS Auto Mode run it)"
        )
        return [], [Diagnostic(SOURCE, NO_ALLOCATABLE, detail)]
    pool = DevicePool(
        source=SOURCE,
        manufacturer=manufacturer,
        product=product,
        count=count if count is not None else advertised,
        resource=resource,
        memory_mib=label_count(labels, MEMORY_LABEL) or 0,
    )
    return [pool], []
