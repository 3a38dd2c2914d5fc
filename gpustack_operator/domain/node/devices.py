"""Accelerator device groups (docs/device-manager.md) and the device-manager labels built
from them (docs/labels.md).

A detector reports what it found as ``DeviceGroup`` values: devices grouped by product name and
memory. The group ID is the device key's id (``tesla-t4``); ``<manufacturer>-<id>`` is the
``aKey`` used in every ``acceleratable.feature.gpustack.ai/`` label.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from gpustack_operator.domain.labels import (
    ACCELERATABLE_LABEL,
    DEVICE_KEY_MAX_LEN,
    SUFFIX_COMCAP,
    SUFFIX_CORES,
    SUFFIX_COUNT,
    SUFFIX_DRIVER_VERSION,
    SUFFIX_FAMILY,
    SUFFIX_MEMORY,
    SUFFIX_PRODUCT,
    SUFFIX_RUNTIME_VERSION,
    SUFFIX_SLICED,
    accelerated_key,
)
from gpustack_operator.domain.names import format_binary_si, normalize_name, sanitize_label_value
from gpustack_operator.domain.validation import is_valid_label_key


class Accelerator(BaseModel):
    """One physical card (or NPU) of a group."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="stable identity, e.g. the NVML UUID; empty when unknown")
    index: int = Field(ge=0, description="the vendor library's index, or PCI enumeration order")
    unhealthy: bool = False


class DeviceGroup(BaseModel):
    """Cards of one manufacturer sharing a product name and memory size."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="normalised product id without the manufacturer prefix")
    manufacturer: str
    name: str = Field(description="raw product name as the source reported it")
    memory_mib: int = Field(default=0, ge=0)
    cores: int = Field(default=0, ge=0)
    driver_version: str = ""
    runtime_version: str = ""
    compute_capability: str = ""
    family: str = ""
    accelerators: tuple[Accelerator, ...] = ()

    @property
    def key(self) -> str:
        """The ``aKey``: ``<manufacturer>-<id>``."""
        return f"{self.manufacturer}-{self.id}"


class DetectedDevice(BaseModel):
    """One card as a detector reports it, before grouping."""

    model_config = ConfigDict(frozen=True)

    name: str
    memory_mib: int = Field(default=0, ge=0)
    cores: int = Field(default=0, ge=0)
    driver_version: str = ""
    runtime_version: str = ""
    compute_capability: str = ""
    family: str = ""
    uuid: str = ""
    index: int = Field(default=0, ge=0)
    unhealthy: bool = False


# Memory beyond 8 EiB is not a real card; clamping keeps the memory suffix short.
_MAX_MEMORY_MIB: Final = 2**43
_MEMORY_SUFFIX_BUDGET: Final = 7
UNKNOWN_DEVICE_ID: Final = "unknown"


def key_safe(slug: str) -> str:
    """Map ``_`` and ``.`` of a slug to ``-`` so that it is usable in object names.

    ``normalize_name`` never emits two separators in a row, so this cannot create ``--`` (which
    would break profile names, docs/naming.md); keys then contain only ``[a-z0-9-]``, which also
    keeps label suffixes (``<key>.count``) unambiguous.
    """
    return slug.replace("_", "-").replace(".", "-")


def memory_suffix(memory_mib: int) -> str:
    """``-<mem>g`` for group IDs with memory (docs/device-manager.md): ``0g``, ``1g`` below
    1 GiB, else SI."""
    mib = min(max(memory_mib, 0), _MAX_MEMORY_MIB)
    if mib == 0:
        return "-0g"
    if mib < 1024:
        return "-1g"
    return "-" + format_binary_si(mib * 2**20).lower().removesuffix("i")


def device_group_id(
    manufacturer: str, name: str, memory_mib: int, *, with_memory: bool = False
) -> str:
    """The device key id of a product (docs/device-manager.md): ``Tesla T4`` -> ``tesla-t4``.

    The budget keeps ``<manufacturer>-<id>`` plus its longest label suffix within 63
    characters (docs/naming.md). A name that slugs to nothing becomes ``unknown``.
    """
    budget = DEVICE_KEY_MAX_LEN - len(manufacturer) - 1
    suffix = memory_suffix(memory_mib) if with_memory else ""
    if with_memory:
        budget -= _MEMORY_SUFFIX_BUDGET
    slug = key_safe(normalize_name(name, manufacturer, max(budget, 1)))
    return (slug or UNKNOWN_DEVICE_ID) + suffix


def group_devices(
    manufacturer: str, devices: Sequence[DetectedDevice], *, with_memory: bool = False
) -> list[DeviceGroup]:
    """Group cards by (product name, memory MiB), in order of first appearance
    (docs/device-manager.md).

    Group-wide fields (cores, versions, family) come from the group's first card.
    """
    order: list[tuple[str, int]] = []
    members: dict[tuple[str, int], list[DetectedDevice]] = {}
    for device in devices:
        key = (device.name, device.memory_mib)
        if key not in members:
            order.append(key)
            members[key] = []
        members[key].append(device)
    groups: list[DeviceGroup] = []
    for key in order:
        cards = members[key]
        first = cards[0]
        groups.append(
            DeviceGroup(
                id=device_group_id(
                    manufacturer, first.name, first.memory_mib, with_memory=with_memory
                ),
                manufacturer=manufacturer,
                name=first.name,
                memory_mib=first.memory_mib,
                cores=first.cores,
                driver_version=first.driver_version,
                runtime_version=first.runtime_version,
                compute_capability=first.compute_capability,
                family=first.family,
                accelerators=tuple(
                    Accelerator(id=c.uuid, index=c.index, unhealthy=c.unhealthy) for c in cards
                ),
            )
        )
    return groups


def device_labels(groups: Sequence[DeviceGroup]) -> dict[str, str]:
    """The device manager's Node labels for *groups* (docs/labels.md).

    Groups without accelerators contribute nothing. Two groups with the same key (same product
    name, different memory, group IDs without memory) are reported as one model: the counts
    add up, the other values come from the first. Values are label-sanitised; a label whose
    key would be invalid is left out. Keys are sorted.
    """
    labels: dict[str, str] = {}
    counts: dict[str, int] = {}
    for group in groups:
        if not group.accelerators:
            continue
        mfr_key = accelerated_key(group.manufacturer)
        akey = accelerated_key(group.key)
        if not is_valid_label_key(mfr_key + SUFFIX_RUNTIME_VERSION) or not is_valid_label_key(
            akey + SUFFIX_SLICED
        ):
            continue
        labels[mfr_key] = "true"
        for suffix, raw in (
            (SUFFIX_DRIVER_VERSION, group.driver_version),
            (SUFFIX_RUNTIME_VERSION, group.runtime_version),
        ):
            value = sanitize_label_value(raw)
            if value and mfr_key + suffix not in labels:
                labels[mfr_key + suffix] = value
        counts[group.key] = counts.get(group.key, 0) + len(group.accelerators)
        if akey in labels:
            continue
        labels[akey] = "true"
        labels[akey + SUFFIX_PRODUCT] = sanitize_label_value(group.name)
        labels[akey + SUFFIX_MEMORY] = format_binary_si(
            min(group.memory_mib, _MAX_MEMORY_MIB) * 2**20
        )
        labels[akey + SUFFIX_CORES] = sanitize_label_value(str(group.cores))
        for suffix, raw in (
            (SUFFIX_FAMILY, group.family),
            (SUFFIX_COMCAP, group.compute_capability),
        ):
            value = sanitize_label_value(raw)
            if value:
                labels[akey + suffix] = value
    for key, count in counts.items():
        labels[accelerated_key(key, SUFFIX_COUNT)] = str(count)
    if labels:
        labels[ACCELERATABLE_LABEL] = "true"
    return dict(sorted(labels.items()))
