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

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

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
from gpustack_operator.domain.node.devices import device_group_id
from gpustack_operator.domain.node.devicesources import (
    amd,
    dra,
    gaudi,
    gfd,
    gke,
    karpenter,
    neuron,
    unpooled,
)
from gpustack_operator.domain.node.devicesources.common import allocatable_count
from gpustack_operator.domain.node.devicesources.model import (
    DESCRIBED_BY_AGENT,
    DUPLICATE_KEY,
    INFORMATIONAL_REASONS,
    UNKNOWN_VENDOR,
    DevicePool,
    Diagnostic,
)
from gpustack_operator.domain.nodeview import labels_of, name_of, status_field
from gpustack_operator.domain.validation import is_valid_label_key

LabelSource = Callable[
    [Mapping[str, str], Mapping[str, object]], tuple[list[DevicePool], list[Diagnostic]]
]
# Vendor label sources in precedence order, with the manufacturer each describes: the first
# source that describes a manufacturer's devices on a node is the one used (docs/devices.md,
# "Precedence").
VENDOR_SOURCES: Final[tuple[tuple[str, str, LabelSource], ...]] = (
    (gfd.MANUFACTURER, gfd.SOURCE, gfd.gfd_pools),
    ("nvidia", gke.GPU_SOURCE, gke.gke_gpu_pools),
    ("nvidia", karpenter.SOURCE, partial(karpenter.karpenter_pools, "nvidia")),
    (amd.MANUFACTURER, amd.SOURCE, amd.amd_pools),
    ("amd", karpenter.SOURCE, partial(karpenter.karpenter_pools, "amd")),
    ("google", gke.TPU_SOURCE, gke.gke_tpu_pools),
    (neuron.MANUFACTURER, neuron.SOURCE, neuron.neuron_pools),
    (gaudi.MANUFACTURER, gaudi.SOURCE, gaudi.gaudi_pools),
)
# Node labels and allocatable resources the vendor sources read: a change to any of them can
# change the derived pools (the worker's Node predicate watches them).
VENDOR_LABEL_PREFIXES: Final = (
    "nvidia.com/",
    "amd.com/",
    "beta.amd.com/",
    "cloud.google.com/gke-",
    "karpenter.k8s.aws/instance-gpu-",
    "node.kubernetes.io/instance-type",
    "feature.node.kubernetes.io/pci-",
    "kubernetes.azure.com/accelerator",
)
VENDOR_RESOURCE_PREFIXES: Final = (
    "nvidia.com/",
    "amd.com/",
    "google.com/",
    "aws.amazon.com/",
    "habana.ai/",
)
_WORKER_SUFFIXES: Final = (".cpu", ".ram", ".storage", ".z-flavor", ".z-queue", ".z-cohort")
_RESOURCE_SEPARATOR: Final = "_"
DRA_KEY_SUFFIX: Final = "dra"


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
    # A DRA pool is allocated through another resource than the device plugin's: it is a
    # model of its own, so that DRA and device-plugin nodes never share a flavor
    # (docs/devices.md, "DRA").
    akey_id = device_group_id(
        mfr, f"{pool.product} {DRA_KEY_SUFFIX}" if pool.dra else pool.product, pool.memory_mib
    )
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


@dataclass
class _Claim:
    """What the first source describing a manufacturer on a node found."""

    source: str
    pools: list[DevicePool]
    problems: list[Diagnostic]


def _vendor_claims(
    labels: Mapping[str, str],
    allocatable: Mapping[str, object],
    agent: frozenset[str],
    problems: list[Diagnostic],
) -> dict[str, _Claim]:
    """Per manufacturer, the first vendor source that describes its devices on the node."""
    claims: dict[str, _Claim] = {}
    for mfr, source, read in VENDOR_SOURCES:
        found, why = read(labels, allocatable)
        if not found and not why:
            continue
        if mfr in agent:
            detail = f"{mfr} devices are described by the gpustack device manager"
            resources = sorted({p.resource for p in found} | {d.resource for d in why} - {""})
            problems.append(
                Diagnostic(source, DESCRIBED_BY_AGENT, detail, resources[0] if resources else "")
            )
            continue
        claims.setdefault(mfr, _Claim(source, list(found), list(why)))
    return claims


def _dra_claims(
    node_name: str,
    slices: Iterable[Mapping[str, Any]],
    claims: dict[str, _Claim],
    agent: frozenset[str],
) -> list[Diagnostic]:
    """Add the DRA pools of manufacturers neither our agent nor a label source gives a pool;
    a label source that only found devices without a device plugin gives way to DRA
    (docs/devices.md, "DRA")."""
    found, why = dra.dra_pools(node_name, slices)
    problems = list(why)
    for mfr in sorted({p.manufacturer for p in found}):
        mine = [p for p in found if p.manufacturer == mfr]
        claim = claims.get(mfr)
        if mfr in agent or (claim is not None and claim.pools):
            detail = f"{mfr} devices are already described by labels (docs/devices.md)"
            problems.append(Diagnostic(dra.SOURCE, DESCRIBED_BY_AGENT, detail))
            continue
        claims[mfr] = _Claim(dra.SOURCE, mine, [])
    return problems


def derive_devices(
    labels: Mapping[str, str],
    allocatable: Mapping[str, object],
    manufacturers: Mapping[str, Manufacturer],
    *,
    node_name: str = "",
    slices: Iterable[Mapping[str, Any]] = (),
) -> DerivedDevices:
    """The device pools vendor labels, then DRA, give a node our agent does not describe,
    and a reason for every device that feeds no pool.

    Pure: *labels* are the Node's labels, *allocatable* its ``status.allocatable``, *slices*
    ResourceSlice objects (those of other nodes are ignored).
    """
    agent = agent_manufacturers(labels, manufacturers)
    problems: list[Diagnostic] = []
    claims = _vendor_claims(labels, allocatable, agent, problems)
    if node_name:
        problems.extend(_dra_claims(node_name, slices, claims, agent))
    pools: list[DevicePool] = []
    derived: dict[str, str] = {}
    for mfr, claim in claims.items():
        manufacturer = manufacturers.get(mfr)
        if manufacturer is None:
            if claim.pools:
                detail = f"{mfr} is not configured"
                resource = claim.pools[0].resource
                problems.append(Diagnostic(claim.source, UNKNOWN_VENDOR, detail, resource))
            continue
        problems.extend(claim.problems)
        for pool in claim.pools:
            problem = _pool_labels(pool, manufacturer, derived)
            if problem is None:
                pools.append(pool)
            else:
                problems.append(problem)
    accounted = {p.resource for p in pools} | {d.resource for d in problems}
    accounted |= {manufacturers[m].resource_name for m in agent}
    accounted |= _labelled_resources(labels, agent)
    problems.extend(unpooled.unpooled_resources(labels, allocatable, manufacturers, accounted))
    return DerivedDevices(tuple(pools), dict(sorted(derived.items())), tuple(problems))


def _labelled_resources(labels: Mapping[str, str], agent: frozenset[str]) -> set[str]:
    """Resources the ``.resource`` labels of our agent's (or people's) pools name."""
    if not agent:
        return set()
    return {
        decode_resource(value)
        for key, value in labels.items()
        if key.endswith(SUFFIX_RESOURCE)
        and key.startswith(ACCELERATABLE_PREFIX)
        and _manufacturer_of(key) in agent
    }


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


def unpooled_devices(
    node: object,
    manufacturers: Mapping[str, Manufacturer],
    slices: Iterable[Mapping[str, Any]] = (),
) -> tuple[tuple[Diagnostic, int], ...]:
    """The node's devices that feed no pool, with how many each reason leaves out: the
    allocatable amount of the resource it names, else 1 (a model whose cards are not counted
    yet). Informational reasons are left out (docs/devices.md, "Why a device gets no pool")."""
    return counted_diagnostics(
        node_device_diagnostics(node, manufacturers, slices), status_field(node, "allocatable")
    )


def counted_diagnostics(
    diagnostics: Iterable[Diagnostic], allocatable: Mapping[str, object]
) -> tuple[tuple[Diagnostic, int], ...]:
    """:func:`unpooled_devices` from a node's diagnostics and ``status.allocatable``."""
    return tuple(
        (d, allocatable_count(allocatable, d.resource) if d.resource else 1)
        for d in diagnostics
        if d.reason not in INFORMATIONAL_REASONS
    )


def judged_diagnostics(
    found: Iterable[tuple[Diagnostic, int]],
    labels: Mapping[str, str],
    manufacturers: Mapping[str, Manufacturer],
    *,
    seen_for: float,
    settling: float,
    reported: Collection[Diagnostic] = (),
    published: frozenset[str] | None = None,
) -> tuple[tuple[tuple[Diagnostic, int], ...], float | None]:
    """Which of a node's unpooled devices (*found*, from :func:`unpooled_devices`) may be
    reported now, and in how many seconds the others may (None: none waits); docs/devices.md,
    "Why a device gets no pool".

    The node's sources get their chance first: the labels of our agent, GFD or a vendor's
    labeller land some time after a device plugin advertises the devices. A reason is judged
    once the node has been seen for *settling* seconds, or at once when our agent describes
    the manufacturer whose resource it names (what the agent found is then final); one in
    *reported* (already said) stays judged while it holds. *published*: the node's
    :func:`agent_manufacturers`, when the caller has them.
    """
    if published is None:
        published = agent_manufacturers(labels, manufacturers)
    by_resource = {m.resource_name: name for name, m in manufacturers.items()}
    judged = []
    waiting = False
    for diagnostic, devices in found:
        if (
            diagnostic in reported
            or by_resource.get(diagnostic.resource) in published
            or seen_for >= settling
        ):
            judged.append((diagnostic, devices))
        else:
            waiting = True
    return tuple(judged), (max(settling - seen_for, 0.0) if waiting else None)
