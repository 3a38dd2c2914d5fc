"""Precedence between device sources, and their pools as ``acceleratable`` labels.

docs/devices.md, "Precedence": our agent's labels first, then vendor labels (GFD, the AMD
labeller); a manufacturer our agent describes on a node is taken from the agent alone, so
the same card is never counted twice. The pools of the other sources become the same
``acceleratable.feature.gpustack.ai/<aKey>.*`` labels our agent writes (docs/labels.md), which
the worker's NodeFeature carries; flavors, cohorts and queues are then built as for any node.

The worker publishes these labels itself and reads the Node back, so the derivation ignores
device labels of manufacturers our agent does not describe (they can only be the worker's
own, earlier output): the result depends on the vendor labels and allocatable alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpustack_operator.domain.devices import device_group_id
from gpustack_operator.domain.devicesources import amd, dra, gfd
from gpustack_operator.domain.devicesources.model import (
    DESCRIBED_BY_AGENT,
    DUPLICATE_KEY,
    UNKNOWN_VENDOR,
    DevicePool,
    Diagnostic,
)
from gpustack_operator.domain.labels import (
    ACCELERATABLE_PREFIX,
    SUFFIX_COMCAP,
    SUFFIX_CORES,
    SUFFIX_COUNT,
    SUFFIX_DRA,
    SUFFIX_DRIVER_VERSION,
    SUFFIX_FAMILY,
    SUFFIX_MEMORY,
    SUFFIX_PRODUCT,
    SUFFIX_RESOURCE,
    SUFFIX_RUNTIME_VERSION,
    SUFFIX_SLICED,
    accelerated_key,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.names import format_binary_si, sanitize_label_value
from gpustack_operator.domain.nodeview import labels_of, name_of, status_field
from gpustack_operator.domain.validation import is_valid_label_key

LabelSource = Callable[
    [Mapping[str, str], Mapping[str, object]], tuple[list[DevicePool], list[Diagnostic]]
]
# Vendor label sources in precedence order, with the manufacturer each describes.
VENDOR_SOURCES: Final[tuple[tuple[str, str, LabelSource], ...]] = (
    (gfd.MANUFACTURER, gfd.SOURCE, gfd.gfd_pools),
    (amd.MANUFACTURER, amd.SOURCE, amd.amd_pools),
)
# Node labels and allocatable resources the vendor sources read: a change to any of them can
# change the derived pools (the worker's Node predicate watches them).
VENDOR_LABEL_PREFIXES: Final = ("nvidia.com/", "amd.com/", "beta.amd.com/")
VENDOR_RESOURCE_PREFIXES: Final = ("nvidia.com/", "amd.com/")
_WORKER_SUFFIXES: Final = (".cpu", ".ram", ".storage", ".z-flavor", ".z-queue", ".z-cohort")
_RESOURCE_SEPARATOR: Final = "_"


@dataclass(frozen=True)
class DerivedDevices:
    """The pools the vendor sources give a node, their labels, and why devices got none."""

    pools: tuple[DevicePool, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    diagnostics: tuple[Diagnostic, ...] = ()


def encode_resource(resource: str) -> str:
    """A resource name as a label value: ``nvidia.com/mig-1g.10gb`` -> ``nvidia.com_mig-1g.10gb``.

    Label values cannot hold ``/``; a DNS domain cannot hold ``_``, so the first ``_`` marks
    where the ``/`` was (docs/labels.md, ``.resource``).
    """
    return resource.replace("/", _RESOURCE_SEPARATOR, 1)


def decode_resource(value: str) -> str:
    """The inverse of :func:`encode_resource`; ``""`` for a value that is not one."""
    domain, sep, name = value.partition(_RESOURCE_SEPARATOR)
    return f"{domain}/{name}" if sep and domain and name else ""


def _manufacturer_of(key: str) -> str:
    name = key[len(ACCELERATABLE_PREFIX) :]
    return name.split(".", 1)[0].split("-", 1)[0]


def agent_manufacturers(
    labels: Mapping[str, str], manufacturers: Mapping[str, Manufacturer]
) -> frozenset[str]:
    """Manufacturers our agent describes on the node: ``acceleratable.feature.gpustack.ai/<mfr>``
    is ``true`` (the worker never writes that label, so this cannot feed back)."""
    return frozenset(m for m in manufacturers if labels.get(accelerated_key(m)) == "true")


def is_derivable_label(key: str, agent: frozenset[str]) -> bool:
    """A device label the worker derives (and so replaces) for a manufacturer our agent does
    not describe. People's ``.sliced.partitions`` and the worker's capacity views are kept."""
    if not key.startswith(ACCELERATABLE_PREFIX) or key.endswith((*_WORKER_SUFFIXES, SUFFIX_SLICED)):
        return False
    return _manufacturer_of(key) not in agent


def _pool_labels(
    pool: DevicePool, manufacturer: Manufacturer, labels: dict[str, str]
) -> Diagnostic | None:
    mfr = pool.manufacturer
    akey_id = device_group_id(mfr, pool.product, pool.memory_mib)
    akey = accelerated_key(f"{mfr}-{akey_id}")
    if not is_valid_label_key(akey + SUFFIX_SLICED):
        return Diagnostic(pool.source, UNKNOWN_VENDOR, f"{pool.product}: no valid device key")
    if akey in labels:
        detail = f"{pool.product}: another pool of the node already has the key {akey_id}"
        return Diagnostic(pool.source, DUPLICATE_KEY, detail)
    mfr_key = accelerated_key(mfr)
    for suffix, raw in (
        (SUFFIX_DRIVER_VERSION, pool.driver_version),
        (SUFFIX_RUNTIME_VERSION, pool.runtime_version),
    ):
        value = sanitize_label_value(raw)
        if value:
            labels.setdefault(mfr_key + suffix, value)
    labels[akey] = "true"
    labels[akey + SUFFIX_PRODUCT] = sanitize_label_value(pool.product)
    labels[akey + SUFFIX_MEMORY] = format_binary_si(pool.memory_mib * 2**20)
    labels[akey + SUFFIX_CORES] = str(pool.cores)
    labels[akey + SUFFIX_COUNT] = str(pool.count)
    for suffix, raw in ((SUFFIX_FAMILY, pool.family), (SUFFIX_COMCAP, pool.compute_capability)):
        value = sanitize_label_value(raw)
        if value:
            labels[akey + suffix] = value
    if pool.sliced:
        labels[akey + SUFFIX_SLICED] = str(pool.sliced)
    if pool.resource != manufacturer.resource_name:
        labels[akey + SUFFIX_RESOURCE] = encode_resource(pool.resource)
    if pool.dra:
        labels[akey + SUFFIX_DRA] = "true"
    return None


def derive_devices(
    labels: Mapping[str, str],
    allocatable: Mapping[str, object],
    manufacturers: Mapping[str, Manufacturer],
    *,
    node_name: str = "",
    slices: Iterable[Mapping[str, Any]] = (),
) -> DerivedDevices:
    """The device pools vendor labels, then DRA, give a node our agent does not describe.

    Pure: *labels* are the Node's labels, *allocatable* its ``status.allocatable``, *slices*
    ResourceSlice objects (those of other nodes are ignored).
    """
    agent = agent_manufacturers(labels, manufacturers)
    pools: list[DevicePool] = []
    problems: list[Diagnostic] = []
    derived: dict[str, str] = {}
    described = set(agent)

    def add(found: Iterable[DevicePool], manufacturer: Manufacturer) -> None:
        for pool in found:
            problem = _pool_labels(pool, manufacturer, derived)
            if problem is None:
                pools.append(pool)
            else:
                problems.append(problem)

    for mfr, source, read in VENDOR_SOURCES:
        found, why = read(labels, allocatable)
        if mfr in agent:
            if found or why:
                detail = f"{mfr} devices are described by the gpustack device manager"
                problems.append(Diagnostic(source, DESCRIBED_BY_AGENT, detail))
            continue
        if found or why:
            described.add(mfr)
        manufacturer = manufacturers.get(mfr)
        if manufacturer is None:
            if found:
                problems.append(Diagnostic(source, UNKNOWN_VENDOR, f"{mfr} is not configured"))
            continue
        problems.extend(why)
        add(found, manufacturer)
    if node_name:
        found, why = dra.dra_pools(node_name, slices)
        problems.extend(why)
        for mfr in sorted({p.manufacturer for p in found}):
            mine = [p for p in found if p.manufacturer == mfr]
            manufacturer = manufacturers.get(mfr)
            if mfr in described:
                detail = f"{mfr} devices are already described by labels (docs/devices.md)"
                problems.append(Diagnostic(dra.SOURCE, DESCRIBED_BY_AGENT, detail))
            elif manufacturer is None:
                problems.append(Diagnostic(dra.SOURCE, UNKNOWN_VENDOR, f"{mfr} is not configured"))
            else:
                add(mine, manufacturer)
    return DerivedDevices(tuple(pools), dict(sorted(derived.items())), tuple(problems))


def effective_device_labels(
    labels: Mapping[str, str],
    allocatable: Mapping[str, object],
    manufacturers: Mapping[str, Manufacturer],
    *,
    node_name: str = "",
    slices: Iterable[Mapping[str, Any]] = (),
) -> tuple[dict[str, str], DerivedDevices]:
    """The node's labels with its derived device labels in place of earlier derived ones."""
    agent = agent_manufacturers(labels, manufacturers)
    derived = derive_devices(labels, allocatable, manufacturers, node_name=node_name, slices=slices)
    effective = {k: v for k, v in labels.items() if not is_derivable_label(k, agent)}
    effective.update(derived.labels)
    return effective, derived


def node_device_diagnostics(
    node: object,
    manufacturers: Mapping[str, Manufacturer],
    slices: Iterable[Mapping[str, Any]] = (),
) -> tuple[Diagnostic, ...]:
    """Why devices the GPU stacks (or DRA *slices*) describe on *node* got no pool."""
    return derive_devices(
        labels_of(node),
        status_field(node, "allocatable"),
        manufacturers,
        node_name=name_of(node),
        slices=slices,
    ).diagnostics
