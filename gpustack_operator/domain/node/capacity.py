"""Capacity profiling: the worker's per-node labels (docs/naming.md).

From a Node's capacity (or the worker's own sticky labels) this derives the general (CPU) view
and one accelerated view per card model: total cpu/ram/storage, the flavor spec
(``16c-32g-96g``), and the per-unit queue and cohort specs (``1c-2g``, ``4c-16g-1d``).

Decision (docs/naming.md): the "round odd GiB" adjustments apply to values taken from
``status.capacity`` only; a value already published as a label is taken as written. The
worker reads its own labels back on the next pass, so this makes its output a fixed point
(rounding a published ``15Gi`` again would turn it into ``14Gi`` on the second pass).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpustack_operator.domain.labels import (
    ACCELERATABLE_PREFIX,
    MANAGED_LABEL,
    SUFFIX_COHORT,
    SUFFIX_COUNT,
    SUFFIX_CPU,
    SUFFIX_FLAVOR,
    SUFFIX_QUEUE,
    SUFFIX_RAM,
    SUFFIX_SLICED,
    SUFFIX_STORAGE,
    accelerated_key,
    general_key,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.devicesources.merge import (
    DerivedDevices,
    effective_device_labels,
)
from gpustack_operator.domain.node.keys import cpu_node_key
from gpustack_operator.domain.nodeview import annotations_of, labels_of, name_of, status_field
from gpustack_operator.domain.quantities import ceil_value, floor_gi, parse_count, parse_quantity
from gpustack_operator.domain.validation import is_valid_label_key, is_valid_label_value

WORKER_RAM_GI_PER_CPU: Final = 2
STORAGE_GI_PER_UNIT_FALLBACK: Final = 15
# Every number in a flavor spec is capped so that `<cpu>c-<ram>g-<stg>g-<acc>d-<n>s` stays a
# valid (<= 63 chars) label value whatever the input; no real node comes near it.
MAX_SPEC_NUMBER: Final = 999_999_999
_DEVICE_KEY: Final = re.compile(r"[a-z0-9]+(-[a-z0-9]+)+")


@dataclass(frozen=True)
class _Amount:
    value: int
    from_label: bool


def _clamp(value: int) -> int:
    return min(value, MAX_SPEC_NUMBER)


def _cpu(labels: Mapping[str, str], key: str, capacity: Mapping[str, object]) -> int:
    quantity = parse_quantity(labels.get(key))
    if quantity is None:
        quantity = parse_quantity(capacity.get("cpu"))
    return ceil_value(quantity) if quantity is not None else 0


def _gi(labels: Mapping[str, str], key: str, capacity: Mapping[str, object], res: str) -> _Amount:
    quantity = parse_quantity(labels.get(key))
    if quantity is not None:
        return _Amount(floor_gi(quantity), True)
    quantity = parse_quantity(capacity.get(res))
    return _Amount(floor_gi(quantity) if quantity is not None else 0, False)


def _round_ram(amount: _Amount) -> int:
    value = amount.value
    return value + 1 if not amount.from_label and value % 2 else value


def _round_storage(amount: _Amount) -> int:
    value = amount.value
    return value - 1 if not amount.from_label and value % 2 else value


def general_labels(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    capacity: Mapping[str, object],
    *,
    ram_gi_per_cpu: int = 0,
) -> dict[str, str]:
    """The general (CPU) view, empty when the node has no ``gKey`` (docs/naming.md)."""
    gkey = cpu_node_key(labels, annotations)
    if not gkey:
        return {}
    p = general_key(gkey)
    cpu = _cpu(labels, p + SUFFIX_CPU, capacity)
    cpu = _clamp(cpu if cpu > 0 else 1)
    ram_amount = _gi(labels, p + SUFFIX_RAM, capacity, "memory")
    ram = _round_ram(ram_amount)
    ram = max(ram, cpu)
    if not ram_amount.from_label and ram_gi_per_cpu > 0:
        ram = ram_gi_per_cpu * cpu
    ram = _clamp(ram)
    storage = _round_storage(_gi(labels, p + SUFFIX_STORAGE, capacity, "ephemeral-storage"))
    storage = _clamp(storage if storage > 0 else STORAGE_GI_PER_UNIT_FALLBACK * cpu)
    unit = f"1c-{ram // cpu}g"
    return {
        general_key(gkey.split("-", 1)[0]): "true",
        p: "true",
        p + SUFFIX_CPU: str(cpu),
        p + SUFFIX_RAM: f"{ram}Gi",
        p + SUFFIX_STORAGE: f"{storage}Gi",
        p + SUFFIX_FLAVOR: f"{cpu}c-{ram}g-{storage}g",
        p + SUFFIX_QUEUE: unit,
        p + SUFFIX_COHORT: unit,
    }


def device_keys(labels: Mapping[str, str], manufacturers: Mapping[str, Manufacturer]) -> list[str]:
    """The ``aKey``s a node advertises: ``acceleratable.feature.gpustack.ai/<mfr>-<id>=true``
    for a known manufacturer, sorted. Keys this project could not have written (characters
    outside ``[a-z0-9-]``, too long for the ``.z-flavor`` suffix) are ignored."""
    keys: list[str] = []
    for key, value in labels.items():
        if value != "true" or not key.startswith(ACCELERATABLE_PREFIX):
            continue
        akey = key[len(ACCELERATABLE_PREFIX) :]
        mfr = akey.partition("-")[0]
        if (
            mfr in manufacturers
            and _DEVICE_KEY.fullmatch(akey)
            and is_valid_label_key(accelerated_key(akey, SUFFIX_FLAVOR))
        ):
            keys.append(akey)
    return sorted(keys)


def accelerated_labels(
    labels: Mapping[str, str],
    capacity: Mapping[str, object],
    manufacturers: Mapping[str, Manufacturer],
) -> dict[str, str]:
    """One accelerated view per complete card model (docs/naming.md)."""
    result: dict[str, str] = {}
    for akey in device_keys(labels, manufacturers):
        q = accelerated_key(akey)
        acc = parse_count(labels.get(q + SUFFIX_COUNT))
        if acc is None:
            continue
        acc = _clamp(acc)
        cpu = _clamp(max(_cpu(labels, q + SUFFIX_CPU, capacity), acc))
        ram = _clamp(max(_round_ram(_gi(labels, q + SUFFIX_RAM, capacity, "memory")), acc))
        storage = _round_storage(_gi(labels, q + SUFFIX_STORAGE, capacity, "ephemeral-storage"))
        storage = _clamp(storage if storage > 0 else STORAGE_GI_PER_UNIT_FALLBACK * acc)
        sliced = parse_count(labels.get(q + SUFFIX_SLICED))
        sliced_suffix = f"-{_clamp(sliced)}s" if sliced else ""
        unit = f"{cpu // acc}c-{ram // acc}g-1d"
        result.update(
            {
                q + SUFFIX_CPU: str(cpu),
                q + SUFFIX_RAM: f"{ram}Gi",
                q + SUFFIX_STORAGE: f"{storage}Gi",
                q + SUFFIX_FLAVOR: f"{cpu}c-{ram}g-{storage}g-{acc}d{sliced_suffix}",
                q + SUFFIX_QUEUE: unit + sliced_suffix,
                q + SUFFIX_COHORT: unit,
            }
        )
    return result


def managed_value(labels: Mapping[str, str]) -> str:
    """``gpustack.ai/managed``: a valid non-empty existing value is echoed, else ``true``."""
    value = labels.get(MANAGED_LABEL, "")
    return value if value and is_valid_label_value(value) else "true"


def capacity_labels(
    node: object,
    manufacturers: Mapping[str, Manufacturer],
    *,
    ram_gi_per_cpu: int = 0,
    slices: Iterable[Mapping[str, Any]] = (),
) -> dict[str, str]:
    """``ConstructNodeCapacityLabels``: every label the worker publishes for *node*, sorted.

    Device labels derived from vendor labels (docs/devices.md, "Precedence") are published
    too and count as the node's own for the accelerated views.

    *ram_gi_per_cpu* > 0 sets the general view's RAM to that many GiB per CPU unless the node
    carries its own ``.ram`` label (the worker uses 2, :data:`WORKER_RAM_GI_PER_CPU`).
    """
    return capacity_labels_and_devices(
        node, manufacturers, ram_gi_per_cpu=ram_gi_per_cpu, slices=slices
    )[0]


def capacity_labels_and_devices(
    node: object,
    manufacturers: Mapping[str, Manufacturer],
    *,
    ram_gi_per_cpu: int = 0,
    slices: Iterable[Mapping[str, Any]] = (),
) -> tuple[dict[str, str], DerivedDevices]:
    """:func:`capacity_labels` and the device pools and diagnostics they were derived from
    (the node model keeps both: the unpooled report reads the diagnostics)."""
    labels, derived = effective_device_labels(
        labels_of(node),
        status_field(node, "allocatable"),
        manufacturers,
        node_name=name_of(node),
        slices=slices,
    )
    capacity = status_field(node, "capacity")
    result = {MANAGED_LABEL: managed_value(labels), **derived.labels}
    result.update(
        general_labels(labels, annotations_of(node), capacity, ram_gi_per_cpu=ram_gi_per_cpu)
    )
    result.update(accelerated_labels(labels, capacity, manufacturers))
    return dict(sorted(result.items())), derived


def worker_capacity_labels(
    node: object,
    manufacturers: Mapping[str, Manufacturer],
    slices: Iterable[Mapping[str, Any]] = (),
) -> dict[str, str]:
    """What the worker's NodeFeature carries: :func:`capacity_labels` with 2 GiB per CPU;
    *slices* are the DRA ResourceSlices of the cluster (or of the node)."""
    return capacity_labels(node, manufacturers, ram_gi_per_cpu=WORKER_RAM_GI_PER_CPU, slices=slices)
