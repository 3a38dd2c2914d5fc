"""A node's device amounts as the queues read them (docs/devices.md, "Quota resources"):
the whole devices in ``status.allocatable`` and ``status.capacity`` and each device pool's
labels, parsed once per Node version (the node model holds them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from gpustack_operator.domain.labels import (
    SUFFIX_COUNT,
    SUFFIX_DRA,
    SUFFIX_RESOURCE,
    accelerated_key,
)
from gpustack_operator.domain.node.devicesources.merge import decode_resource
from gpustack_operator.domain.nodeview import (
    labels_of,
    status_field,
)
from gpustack_operator.domain.quantities import (
    parse_count,
    parse_quantity,
)

HOST_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True, slots=True)
class PoolLabels:
    """What one device pool's labels (``<akey>.…``) say about its amount."""

    resource: str
    """The ``.resource`` label, decoded (``""``: none; the manufacturer's resource)."""
    dra: bool
    """A DRA pool (``.dra``): no allocatable count, its ``.count`` is the amount."""
    installed: int
    """The ``.count`` label (0 when absent)."""


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """A node's device amounts as the queues read them, parsed once (the node model holds
    them). Device resources are extended resources, whose names always hold a ``/``."""

    allocatable: Mapping[str, int]
    """Whole devices per resource in ``status.allocatable`` (positive amounts only)."""
    capacity: Mapping[str, int]
    """The same for ``status.capacity``."""
    advertised: frozenset[str]
    """Every device resource either lists, even at 0."""
    pools: Mapping[str, PoolLabels]
    """Per device key (``akey``) of the node's pools."""

    def pool(self, akey: str) -> PoolLabels:
        return self.pools.get(akey, _NO_POOL)


_NO_POOL: Final = PoolLabels("", False, 0)


def _whole(values: Mapping[str, object]) -> dict[str, int]:
    """Positive whole amounts (truncated) of the device resources in *values*."""
    out: dict[str, int] = {}
    for resource, value in values.items():
        if "/" in resource:
            quantity = parse_quantity(value)
            if quantity is not None and quantity.numerator > 0:
                out[resource] = quantity.numerator // quantity.denominator  # int(), truncating
    return out


def node_devices(node: object, akeys: Iterable[str]) -> NodeDevices:
    """:class:`NodeDevices` of *node* for the device pools *akeys*."""
    if isinstance(node, NodeDevices):
        return node
    labels = labels_of(node)
    allocatable = status_field(node, "allocatable")
    capacity = status_field(node, "capacity")
    return NodeDevices(
        allocatable=_whole(allocatable),
        capacity=_whole(capacity),
        advertised=frozenset(r for r in (*allocatable, *capacity) if "/" in r),
        pools={
            akey: PoolLabels(
                pool_resource_label(labels, akey),
                labels.get(accelerated_key(akey, SUFFIX_DRA)) == "true",
                parse_count(labels.get(accelerated_key(akey, SUFFIX_COUNT))) or 0,
            )
            for akey in akeys
        },
    )


DevicesOf = Callable[[object], NodeDevices]
"""Where a caller's node device amounts come from (the node model, or :func:`node_devices`)."""


def pool_resource_label(labels: Mapping[str, str], akey: str) -> str:
    return decode_resource(labels.get(accelerated_key(akey, SUFFIX_RESOURCE), ""))
