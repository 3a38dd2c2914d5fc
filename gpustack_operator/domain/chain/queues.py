"""Cohorts, ClusterQueues and LocalQueues (docs/worker.md).

The Cohort controller calls :func:`desired_cohort` and :func:`cohort_may_be_deleted` with
what its cache holds, the LocalQueue controller :func:`desired_local_queues`; a pool's
ClusterQueue (:func:`desired_cluster_queue`) is built only through the per-pool function
of ``domain/chain/nodepool.py``, for ``plan`` and the worker alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from fractions import Fraction
from typing import Any, Final

from gpustack_operator.domain.chain.flavors import ProfilesOf, first_profile, flavor_nodes
from gpustack_operator.domain.chain.kueue import (
    MAX_FLAVORS_PER_GROUP,
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    KueueVersion,
    LocalQueue,
    Meta,
    OwnerReference,
    ResourceGroup,
    ResourceQuota,
)
from gpustack_operator.domain.chain.kueueusage import in_use
from gpustack_operator.domain.chain.poolinfo import local_queue_metadata
from gpustack_operator.domain.labels import (
    ARCH_LABEL,
    CLUSTER_QUEUE_ANNOTATION,
    COHORT_ANNOTATION,
    CPU_ANNOTATION_PREFIX,
    CPU_FAMILY_ANNOTATION,
    CPU_NAME_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OS_LABEL,
    QUEUE_ANNOTATION,
    RESOURCE_TYPE_INSTANCETYPES,
    RESOURCE_TYPE_LABEL,
    RESOURCE_TYPE_NODES,
    SUFFIX_COMCAP,
    SUFFIX_CORES,
    SUFFIX_FAMILY,
    SUFFIX_MEMORY,
    SUFFIX_PRODUCT,
    accelerated_key,
    note,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.availability import DeviceBasis, NodeAvailability, Severity
from gpustack_operator.domain.node.nodedevices import (
    HOST_RESOURCES,
    DevicesOf,
    NodeDevices,
    node_devices,
)
from gpustack_operator.domain.node.nodeprofiles import is_managed, managed_profiles, node_profiles
from gpustack_operator.domain.nodeview import (
    annotations_of,
    is_deleting,
    labels_of,
    name_of,
    uid_of,
)
from gpustack_operator.domain.profiles import NodeProfile, local_queue_name, parse_node_profile
from gpustack_operator.domain.quantities import (
    format_binary_quantity,
    format_decimal_quantity,
    parse_quantity,
)
from gpustack_operator.domain.validation import is_valid_dns_label

DEFAULT_EXCLUDED_NAMESPACES: Final = ("kube-system", "kube-public", "kube-node-lease")


class QuotaResources(StrEnum):
    """What device ClusterQueues are measured in (docs/devices.md, "Quota resources")."""

    DEVICE = "device"
    """The pool's own extended resource (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``)."""
    CREDITS = "credits"
    """``credits.gpustack.ai/<manufacturer>``, counted from the same allocatable."""


DEFAULT_QUOTA_RESOURCES: Final = QuotaResources.DEVICE


class HostCounting(StrEnum):
    """How a node's CPU and memory count in the pools it feeds (docs/worker.md, "CPU and
    memory: counted in every pool, or once")."""

    EVERY_POOL = "every-pool"
    """The reference's arithmetic: each pool a node feeds (its general pool, each device
    pool) counts the CPU and memory of its view of the node."""
    ONCE = "once"
    """Each node's CPU and memory are divided evenly among the pools it feeds."""


DEFAULT_HOST_COUNTING: Final = HostCounting.EVERY_POOL
MIB: Final = 2**20


def host_split(cpu: Fraction, memory: Fraction, pools: int) -> tuple[int, int]:
    """One pool's part of a node's *cpu* (cores) and *memory* (bytes) under
    :attr:`HostCounting.ONCE`: an even share among its *pools*, rounded down to whole cores
    and whole MiB, so the parts never add up to more than the node."""
    share = max(1, pools)
    return int(cpu / share), int(memory / share) // MIB * MIB


OMITTED_FLAVORS_NOTE: Final = note("omittedFlavors")
HOLD_NOTE: Final = note("hold")
TEAM_HOLD_NOTE: Final = note("team-hold")
"""Why a pool divided among teams counts nodes away for maintenance (docs/node-lifecycle.md,
"Team quotas through maintenance")."""
DividedAmongTeams = Callable[[Mapping[str, Any]], bool]
"""Whether teams divide a pool's ClusterQueue (docs/teams.md)."""
"""Why the worker holds a ClusterQueue (``spec.stopPolicy: Hold``); docs/node-lifecycle.md."""
HOLD: Final = "Hold"
AvailabilityOf = Callable[[object], NodeAvailability]
"""A node's availability verdict at the moment a queue is computed (docs/node-lifecycle.md)."""
_CPU_DETAIL: Final = (
    ("physicalCores", "physical-cores"),
    ("threadsPerPhysicalCore", "threads-per-core"),
    ("logicalCores", "logical-cores"),
    ("stepping", "stepping"),
    ("clockSpeed", "hz"),
    ("maxClockSpeed", "boost-freq"),
    ("cacheLine", "cache-line"),
)
_CACHE_DETAIL: Final = (
    ("l1i", "cache-l1i"),
    ("l1d", "cache-l1d"),
    ("l2", "cache-l2"),
    ("l3", "cache-l3"),
)


def is_owned(obj: object) -> bool:
    """Whether the operator created *obj* and may delete it (docs/worker.md)."""
    return labels_of(obj).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE


def _owned_meta(name: str, **extra: Any) -> Meta:
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, **extra.pop("labels", {})}
    return Meta(name=name, labels=labels, **extra)


# --- Cohorts ---------------------------------------------------------------------------------


def desired_cohorts(
    nodes: Iterable[object],
    manufacturers: Mapping[str, Manufacturer],
    version: KueueVersion = KueueVersion.V1BETA2,
    profiles_of: ProfilesOf | None = None,
) -> dict[str, dict[str, Any]]:
    """A Cohort for every name a managed node's profile references (docs/worker.md), by name."""
    if profiles_of is None:
        names = sorted({p.cohort for p in managed_profiles(nodes, manufacturers)})
    else:
        names = sorted({p.cohort for n in nodes if is_managed(n) for p in profiles_of(n)})
    return {n: Cohort(metadata=_owned_meta(n)).manifest(version) for n in names}


def desired_cohort(
    name: str,
    nodes: Iterable[object],
    manufacturers: Mapping[str, Manufacturer],
    version: KueueVersion = KueueVersion.V1BETA2,
    profiles_of: ProfilesOf | None = None,
) -> dict[str, Any] | None:
    """``desired_cohorts(nodes, ...).get(name)``, looking at nodes only until one names it."""
    if first_profile("cohort", name, nodes, manufacturers, profiles_of) is None:
        return None
    return Cohort(metadata=_owned_meta(name)).manifest(version)


def cluster_queue_cohort(cluster_queue: object) -> str:
    """The cohort a ClusterQueue belongs to (``spec.cohortName``, or v1beta1 ``spec.cohort``)."""
    spec = cluster_queue.get("spec") if isinstance(cluster_queue, Mapping) else None
    if not isinstance(spec, Mapping):
        return ""
    value = spec.get("cohortName") or spec.get("cohort")
    return value if isinstance(value, str) else ""


def cohort_may_be_deleted(
    name: str,
    nodes: Iterable[object],
    cluster_queues: Iterable[object],
    manufacturers: Mapping[str, Manufacturer],
) -> bool:
    """docs/worker.md: only when no managed node's profile and no ClusterQueue references it.

    The caller also checks :func:`is_owned` on the Cohort itself.
    """
    if any(cluster_queue_cohort(cq) == name for cq in cluster_queues):
        return False
    return all(p.cohort != name for p in managed_profiles(nodes, manufacturers))


# --- ClusterQueues ---------------------------------------------------------------------------


def _annotation(obj: object, key: str) -> str:
    return annotations_of(obj).get(key, "")


def queue_flavors(name: str, flavors: Iterable[object]) -> list[object]:
    """The ResourceFlavors of type ``nodes`` that target queue *name*, sorted by name.

    Name order, not creation time: the order (and with it the first flavor, whose first
    node gives the queue's notes) is then a function of the nodes alone, the same for
    ``plan``, a fresh worker and one restarted midway (docs/naming.md, "Flavor order and notes").
    """
    matching = [
        f
        for f in flavors
        if labels_of(f).get(RESOURCE_TYPE_LABEL) == RESOURCE_TYPE_NODES
        and _annotation(f, QUEUE_ANNOTATION) == name
        and _annotation(f, COHORT_ANNOTATION)
        and not is_deleting(f)
    ]
    return sorted(matching, key=name_of)


def _scaled(note_value: str, count: int) -> Fraction | None:
    quantity = parse_quantity(note_value)
    if quantity is None or quantity <= 0:
        return None
    return quantity * count


def pool_resource(node: object | None, akey: str, manufacturer: Manufacturer) -> str:
    """The extended resource a node's device pool *akey* is advertised as (docs/devices.md,
    "Quota resources"): its ``.resource`` label, else the manufacturer's resource. *node*: a
    Node or its :class:`NodeDevices`."""
    if node is not None:
        decoded = node_devices(node, (akey,)).pool(akey).resource
        if decoded:
            return decoded
    return manufacturer.resource_name


def pool_amount(node: object, akey: str, resource: str) -> int:
    """Devices of pool *akey* a node (or its :class:`NodeDevices`) adds to a quota in
    *resource*: its allocatable count, or for a DRA pool (``.dra`` label; no allocatable
    count) its ``.count``."""
    devices = node_devices(node, (akey,))
    pool = devices.pool(akey)
    if pool.dra:
        return pool.installed if pool.resource == resource else 0
    return devices.allocatable.get(resource, 0)


def device_amount(node: object, akey: str, resource: str, basis: DeviceBasis) -> int:
    """:func:`pool_amount` on *basis* (docs/node-lifecycle.md, "Devices: identity from what is
    installed, quota from what is healthy"): a device plugin briefly gone
    (``CAPACITY``) or planned maintenance (``INSTALLED``, also the ``.count`` label) keeps
    the node's installed devices."""
    devices = node_devices(node, (akey,))
    amount = pool_amount(devices, akey, resource)
    if basis is DeviceBasis.ALLOCATABLE:
        return amount
    amount = max(amount, devices.capacity.get(resource, 0))
    if basis is DeviceBasis.INSTALLED:
        amount = max(amount, devices.pool(akey).installed)
    return amount


def advertises(node: object, akey: str, resource: str) -> bool:
    """Whether *node* (or its :class:`NodeDevices`) reports *resource* at all, even as 0
    (``status.allocatable`` or ``status.capacity``: kubelet keeps a device plugin's resource
    at 0 once it is gone), or is a DRA pool of that resource."""
    devices = node_devices(node, (akey,))
    pool = devices.pool(akey)
    if pool.dra:
        return pool.resource == resource
    return resource in devices.advertised


def queue_pool_resource(
    nodes: Iterable[object],
    akey: str,
    manufacturer: Manufacturer,
    devices_of: DevicesOf | None = None,
) -> str:
    """The one device resource a queue of *akey* covers (docs/devices.md, "Quota resources").

    Kueue lets a ClusterQueue's flavors share one list of covered resources, so when the
    nodes of one model advertise it under different names (``nvidia.com/gpu`` here,
    ``renameByDefault``'s ``nvidia.com/gpu.shared`` there) the name with the most allocatable
    devices wins (ties: the smaller name); nodes using another name add no quota. The choice
    depends on the nodes alone, never on their order.
    """
    totals: dict[str, int] = {}
    for node in nodes:
        devices = devices_of(node) if devices_of is not None else node
        resource = pool_resource(devices, akey, manufacturer)
        totals[resource] = totals.get(resource, 0) + pool_amount(devices, akey, resource)
    if not totals:
        return manufacturer.resource_name
    return min(totals, key=lambda r: (-totals[r], r))


def quota_resource(pool: str, manufacturer: Manufacturer, quota_resources: QuotaResources) -> str:
    """The resource a device ClusterQueue covers: the pool's own (``device``) or the
    manufacturer's credits (``credits``)."""
    return pool if quota_resources == QuotaResources.DEVICE else manufacturer.credits_resource


def _flavor_quotas(
    flavor: object,
    nodes: Sequence[object],
    resources: tuple[str, ...],
    credits_source: str | None,
    borrowing_limit: str | None,
    akey: str = "",
    views: Mapping[str, NodeAvailability] | None = None,
    pools_of: Callable[[object], int] | None = None,
    devices_of: DevicesOf | None = None,
) -> FlavorQuotas | None:
    """*views* (node name -> verdict; None: every node counts on allocatable) leave withheld
    nodes out of the quota, but not the flavor out of the queue (docs/node-lifecycle.md).
    *pools_of* (a node's number of pools) counts each node's CPU and memory once across its
    pools (:attr:`HostCounting.ONCE`); None: in every pool."""
    counted = nodes if views is None else [n for n in nodes if views[name_of(n)].counted]

    def devices(node: object) -> object:
        return devices_of(node) if devices_of is not None else node

    def basis(node: object) -> DeviceBasis:
        return DeviceBasis.ALLOCATABLE if views is None else views[name_of(node)].devices

    count = len(counted)
    amounts: list[int] = []
    if count:
        for key in ("cpu", "ram", "localStorage"):
            scaled = _scaled(_annotation(flavor, note(key)), count)
            if scaled is None:
                return None
            amounts.append(int(scaled) if scaled.denominator == 1 else int(scaled) + 1)
        if pools_of is not None:
            cpu, memory = (
                _scaled(_annotation(flavor, note("cpu")), 1),
                _scaled(_annotation(flavor, note("ram")), 1),
            )
            assert cpu is not None and memory is not None  # checked just above
            parts = [host_split(cpu, memory, pools_of(n)) for n in counted]
            amounts[0] = sum(c for c, _ in parts)
            amounts[1] = sum(m for _, m in parts)
        if credits_source is not None:
            amounts.append(
                sum(device_amount(devices(n), akey, credits_source, basis(n)) for n in counted)
            )
    else:
        amounts = [0] * len(resources)
    offered = amounts[-1] if credits_source is not None and amounts else 0
    if credits_source is not None and views is not None and count < len(nodes):
        offered = sum(device_amount(devices(n), akey, credits_source, basis(n)) for n in nodes)
    if (
        credits_source is not None
        and nodes
        and offered == 0
        and not any(advertises(devices(n), akey, credits_source) for n in nodes)
    ):
        # docs/devices.md, "Quota resources": a flavor whose nodes never advertised the
        # resource (no device plugin yet) is left out of the queue. One whose nodes report
        # it as 0 (a device plugin down past --device-grace) stays at quota 0: a flavor
        # never leaves its queue while its nodes exist (docs/node-lifecycle.md). A flavor
        # with no node left at all is one Kueue still reports usage on: it stays listed
        # with no quota until that is zero (docs/topology.md, "Upgrading a chain built
        # without TAS").
        return None
    formats = (format_decimal_quantity, format_binary_quantity, format_binary_quantity)
    quotas = []
    for i, (resource, amount) in enumerate(zip(resources, amounts, strict=True)):
        render = formats[i] if i < len(formats) else format_decimal_quantity
        quotas.append(
            ResourceQuota(
                name=resource, nominal_quota=render(amount), borrowing_limit=borrowing_limit
            )
        )
    return FlavorQuotas(name=name_of(flavor), resources=tuple(quotas))


def _resolved(values: Mapping[str, str], key: str) -> str:
    """An NFD CPU annotation, ``""`` when absent or an unresolved ``@`` template."""
    value = values.get(key, "")
    return "" if value.startswith("@") else value


def _cpu_detail(annotations: Mapping[str, str]) -> dict[str, Any]:
    detail: dict[str, Any] = {}
    for field, attr in _CPU_DETAIL:
        value = _resolved(annotations, CPU_ANNOTATION_PREFIX + attr)
        if value:
            detail[field] = value
    cache = {
        field: value
        for field, attr in _CACHE_DETAIL
        if (value := _resolved(annotations, CPU_ANNOTATION_PREFIX + attr))
    }
    if cache:
        detail["cache"] = cache
    return detail


def _notes(profile: NodeProfile, node: object | None) -> dict[str, str]:
    labels = labels_of(node) if node is not None else {}
    annotations = annotations_of(node) if node is not None else {}
    notes = {
        "acceleratable": "true" if profile.acceleratable else "false",
        "manufacturer": profile.manufacturer,
        "os": labels.get(OS_LABEL, ""),
        "arch": labels.get(ARCH_LABEL, ""),
        "unitCPU": str(profile.cpu),
        "unitRAM": f"{profile.ram}Gi",
        "slicedAccelerator": str(profile.sliced) if profile.sliced else "",
    }
    cpu_detail = _cpu_detail(annotations)
    if profile.acceleratable:
        q = accelerated_key(profile.akey)
        notes["product"] = labels.get(q + SUFFIX_PRODUCT, "")
        notes["family"] = labels.get(q + SUFFIX_FAMILY, "")
        detail: dict[str, Any] = {
            k: v
            for k, v in (
                ("memory", labels.get(q + SUFFIX_MEMORY, "")),
                ("cores", labels.get(q + SUFFIX_CORES, "")),
                ("computeCapability", labels.get(q + SUFFIX_COMCAP, "")),
            )
            if v
        }
        cpu_name = _resolved(annotations, CPU_NAME_ANNOTATION)
        cpu = {"name": cpu_name, **cpu_detail} if cpu_name else cpu_detail
        if cpu:
            detail["cpu"] = cpu
    else:
        notes["product"] = _resolved(annotations, CPU_NAME_ANNOTATION)
        notes["family"] = _resolved(annotations, CPU_FAMILY_ANNOTATION)
        detail = cpu_detail
    if detail:
        notes["detail"] = json.dumps(detail, sort_keys=True, separators=(",", ":"))
    return {note(k): v for k, v in notes.items() if v}


def desired_cluster_queue(
    name: str,
    flavors: Iterable[object],
    nodes: Iterable[object],
    manufacturers: Mapping[str, Manufacturer],
    *,
    cohort_uid: str = "",
    version: KueueVersion = KueueVersion.V1BETA2,
    flavor_index: Mapping[str, Sequence[object]] | None = None,
    quota_resources: QuotaResources = DEFAULT_QUOTA_RESOURCES,
    availability: AvailabilityOf | None = None,
    host_counting: HostCounting = DEFAULT_HOST_COUNTING,
    divided: DividedAmongTeams | None = None,
    devices_of: DevicesOf | None = None,
    profiles_of: ProfilesOf | None = None,
) -> dict[str, Any] | None:
    """The ClusterQueue *name* for the ResourceFlavors targeting it (docs/worker.md).

    *flavors* are ResourceFlavor objects (the cache's or ``node_flavor``'s),
    *nodes* the Nodes with merged labels. ``None`` when no flavor targets the queue (the
    controller then deletes it once nothing is reserved) or the name is not a profile name.
    Without *cohort_uid* the owner reference to the Cohort is left out. *flavor_index*
    (flavor name -> managed nodes, as :func:`flavor_nodes` builds it) saves recomputing it
    from *nodes* when many queues are built at once. *quota_resources* picks the resource a
    device queue covers (docs/devices.md, "Quota resources"). *availability* gives each
    node's verdict (docs/node-lifecycle.md): withheld nodes add no quota, and a queue whose
    every node is away for a planned reason keeps its quota and is held; None counts every
    node. *divided* says whether teams divide the queue: then nodes away for maintenance
    still count (docs/node-lifecycle.md, "Team quotas through maintenance").
    """
    matching = queue_flavors(name, flavors)
    # A TAS queue's name may be shortened with a hash (docs/naming.md, "Derived names"):
    # its flavors' names still parse, and they share its device, manufacturer and slicing.
    profile = parse_node_profile(name) or (
        parse_node_profile(name_of(matching[0])) if matching else None
    )
    if not matching or profile is None:
        return None
    credits_source: str | None = None
    resources: tuple[str, ...] = HOST_RESOURCES
    index = (
        flavor_nodes(nodes, manufacturers, profiles_of) if flavor_index is None else flavor_index
    )
    akeys = (profile.akey,)
    known: dict[int, NodeDevices] = {}

    def devices(node: object) -> NodeDevices:
        found = known.get(id(node))
        if found is None:
            found = devices_of(node) if devices_of is not None else node_devices(node, akeys)
            known[id(node)] = found
        return found

    if profile.acceleratable:
        mfr = manufacturers.get(profile.manufacturer)
        if mfr is None:
            return None
        members = [n for f in matching for n in index.get(name_of(f), [])]
        credits_source = queue_pool_resource(members, profile.akey, mfr, devices)
        resources = (*HOST_RESOURCES, quota_resource(credits_source, mfr, quota_resources))
    borrowing_limit = "0" if profile.sliced else None
    cohort = _annotation(matching[0], COHORT_ANNOTATION)
    pools_of = None
    if host_counting is HostCounting.ONCE:

        def pools_of(node: object) -> int:
            if profiles_of is not None:
                return len(tuple(profiles_of(node)))
            return len(node_profiles(node, manufacturers))

    views: dict[str, NodeAvailability] | None = None
    hold = ""
    if availability is not None:
        by_name = {name_of(n): n for f in matching for n in index.get(name_of(f), [])}
        views = {n: availability(node) for n, node in by_name.items()}
        hold = pool_hold(list(views.values()))
        if hold:
            views = {n: NodeAvailability(n, True, devices=DeviceBasis.INSTALLED) for n in views}

    def build(views: dict[str, NodeAvailability] | None, team_hold: str) -> dict[str, Any]:
        return _pool_queue(
            name,
            matching,
            index,
            profile,
            resources,
            credits_source,
            borrowing_limit,
            cohort,
            cohort_uid,
            version,
            views,
            pools_of,
            devices,
            hold,
            team_hold,
        )

    queue = build(views, "")
    if views is None or hold or divided is None:
        return queue
    away = sorted({v.reason for v in views.values() if v.away_for_maintenance})
    if not away or not divided(queue):
        return queue
    # docs/node-lifecycle.md, "Team quotas through maintenance": the teams keep their quota.
    kept = {
        n: NodeAvailability(n, True, devices=DeviceBasis.INSTALLED) if v.away_for_maintenance else v
        for n, v in views.items()
    }
    return build(kept, f"team quotas kept through maintenance ({', '.join(away)})")


def _pool_queue(
    name: str,
    matching: list[Any],
    index: Mapping[str, Sequence[object]],
    profile: NodeProfile,
    resources: tuple[str, ...],
    credits_source: str | None,
    borrowing_limit: str | None,
    cohort: str,
    cohort_uid: str,
    version: KueueVersion,
    views: dict[str, NodeAvailability] | None,
    pools_of: Callable[[object], int] | None,
    devices: DevicesOf,
    hold: str,
    team_hold: str,
) -> dict[str, Any]:
    quotas = [
        q
        for f in matching
        if (
            q := _flavor_quotas(
                f,
                index.get(name_of(f), []),
                resources,
                credits_source,
                borrowing_limit,
                profile.akey,
                views,
                pools_of,
                devices,
            )
        )
        is not None
    ]
    annotations: dict[str, str] = {}
    if len(quotas) > MAX_FLAVORS_PER_GROUP:
        annotations[OMITTED_FLAVORS_NOTE] = str(len(quotas) - MAX_FLAVORS_PER_GROUP)
        quotas = quotas[:MAX_FLAVORS_PER_GROUP]
    groups = (ResourceGroup(covered_resources=resources, flavors=tuple(quotas)),) if quotas else ()
    first_nodes = index.get(name_of(matching[0]), [])
    annotations.update(_notes(profile, first_nodes[0] if first_nodes else None))
    if hold:
        annotations[HOLD_NOTE] = hold
    if team_hold:
        annotations[TEAM_HOLD_NOTE] = team_hold
    owners: tuple[OwnerReference, ...] = ()
    if cohort_uid:
        owners = (
            OwnerReference(
                api_version=version.api_version, kind="Cohort", name=cohort, uid=cohort_uid
            ),
        )
    queue = ClusterQueue(
        metadata=_owned_meta(
            name,
            labels={RESOURCE_TYPE_LABEL: RESOURCE_TYPE_INSTANCETYPES},
            annotations=annotations,
            owner_references=owners,
        ),
        cohort=cohort,
        resource_groups=groups,
        stop_policy=HOLD if hold else None,
    )
    return queue.manifest(version)


def quota_below_usage(want: Mapping[str, Any], have: Mapping[str, Any] | None) -> list[str]:
    """``flavor/resource: quota < usage`` for each quota of *want* below what Kueue reports
    in use in *have* (``domain.kueueusage.in_use``), where *have*'s own quota was not already
    below it: a shrink below usage, said once (docs/node-lifecycle.md, "Seeing why")."""
    if have is None:
        return []
    usage = in_use(have)

    def quotas(queue: Mapping[str, Any]) -> dict[tuple[str, str], Fraction]:
        found: dict[tuple[str, str], Fraction] = {}
        spec = queue.get("spec")
        groups = spec.get("resourceGroups") if isinstance(spec, Mapping) else None
        for group in groups or ():
            for flavor in group.get("flavors") or ():
                for resource in flavor.get("resources") or ():
                    amount = parse_quantity(resource.get("nominalQuota"))
                    if amount is not None:
                        found[(str(flavor.get("name")), str(resource.get("name")))] = amount
        return found

    before, after = quotas(have), quotas(want)
    return [
        f"{flavor}/{resource}: {after[(flavor, resource)]} < {used} in use"
        for (flavor, resource), used in sorted(usage.items())
        if (flavor, resource) in after
        and after[(flavor, resource)] < used
        and before.get((flavor, resource), used) >= used
    ]


def _device_quotas(queue: Mapping[str, Any] | None) -> dict[str, Fraction]:
    """Flavor -> nominal quota of the device resource (the covered one that is not a host
    resource) of a ClusterQueue."""
    found: dict[str, Fraction] = {}
    spec = queue.get("spec") if isinstance(queue, Mapping) else None
    for group in (spec.get("resourceGroups") if isinstance(spec, Mapping) else None) or ():
        for flavor in group.get("flavors") or ():
            for resource in flavor.get("resources") or ():
                if resource.get("name") in HOST_RESOURCES:
                    continue
                amount = parse_quantity(resource.get("nominalQuota"))
                if amount is not None:
                    found[str(flavor.get("name"))] = amount
    return found


def devices_gone(want: Mapping[str, Any], have: Mapping[str, Any] | None) -> list[str]:
    """The flavors *want* lists at device quota 0 that *have* did not (its nodes report
    the resource as 0: docs/node-lifecycle.md, "Devices: identity from what is installed,
    quota from what is healthy"), to be said once."""
    before = _device_quotas(have)
    return sorted(
        flavor
        for flavor, amount in _device_quotas(want).items()
        if amount == 0 and before.get(flavor) != 0
    )


def withheld_by_queue(
    nodes: Iterable[object],
    manufacturers: Mapping[str, Manufacturer],
    availability: AvailabilityOf,
) -> dict[str, list[NodeAvailability]]:
    """Queue name -> the verdicts of its managed nodes that are withheld or in a grace, by
    node name (``queues`` prints them; docs/node-lifecycle.md, "Seeing why")."""
    result: dict[str, list[NodeAvailability]] = {}
    for node in sorted((n for n in nodes if is_managed(n)), key=name_of):
        verdict = availability(node)
        if not verdict.reason or verdict.reason == "no-conditions":
            continue
        for queue in sorted({p.queue for p in node_profiles(node, manufacturers)}):
            result.setdefault(queue, []).append(verdict)
    return result


def pool_hold(views: list[NodeAvailability]) -> str:
    """Why a queue whose nodes are all withheld for a planned reason is held with its quota
    (docs/node-lifecycle.md, "Whole-pool Hold"), ``""`` when it is not: every node is
    withheld, each for planned maintenance or while rejoining after it."""
    if not views or any(v.counted for v in views):
        return ""
    if not all(v.severity is Severity.PLANNED for v in views):
        return ""
    reasons = sorted({v.reason for v in views})
    return f"every node of the pool is away for planned maintenance ({', '.join(reasons)})"


def without_flavors(queue: Mapping[str, Any]) -> dict[str, Any]:
    """*queue* with no resource group: what a ClusterQueue the nodes still want holds while
    every flavor it lists is being deleted, so Kueue lets the flavors go and the worker
    recreates them (docs/worker.md, "Chain objects deleted by hand")."""
    spec = dict(queue.get("spec") or {})
    spec["resourceGroups"] = []
    return {**queue, "spec": spec}


# --- LocalQueues -----------------------------------------------------------------------------


def _namespace_name(namespace: object) -> str:
    if isinstance(namespace, str):
        return namespace
    if is_deleting(namespace):
        return ""
    status = namespace.get("status") if isinstance(namespace, Mapping) else None
    if isinstance(status, Mapping) and status.get("phase") == "Terminating":
        return ""
    return name_of(namespace)


def active_namespaces(
    namespaces: Iterable[str | Mapping[str, Any]],
    *,
    system_namespace: str,
    excluded: Iterable[str] = DEFAULT_EXCLUDED_NAMESPACES,
) -> list[str]:
    """The namespaces that get LocalQueues (docs/worker.md), sorted: not terminating, not the
    system namespace nor an excluded one."""
    skip = {system_namespace, *excluded}
    return sorted(
        {
            n
            for ns in namespaces
            if (n := _namespace_name(ns)) and n not in skip and is_valid_dns_label(n)
        }
    )


def desired_local_queues(
    cluster_queues: Iterable[str | Mapping[str, Any]],
    namespaces: Iterable[str | Mapping[str, Any]],
    *,
    system_namespace: str,
    excluded: Iterable[str] = DEFAULT_EXCLUDED_NAMESPACES,
    version: KueueVersion = KueueVersion.V1BETA2,
) -> dict[tuple[str, str], dict[str, Any]]:
    """A LocalQueue per ClusterQueue in every active namespace (docs/worker.md).

    Namespaces may be names or Namespace objects (terminating ones are skipped); the system
    namespace and *excluded* get none. ClusterQueues may be names or objects; an object's uid
    becomes the LocalQueue's owner reference. Keyed by (namespace, LocalQueue name), in
    (namespace, ClusterQueue name) order: the order ``plan`` and ``sim`` print them in.
    """
    active = active_namespaces(namespaces, system_namespace=system_namespace, excluded=excluded)
    queues: dict[str, str] = {}
    readable: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    for cq in cluster_queues:
        cq_name = cq if isinstance(cq, str) else name_of(cq)
        if cq_name and not (isinstance(cq, Mapping) and is_deleting(cq)):
            queues[cq_name] = "" if isinstance(cq, str) else uid_of(cq)
            readable[cq_name] = local_queue_metadata(cq)
    result: dict[tuple[str, str], dict[str, Any]] = {}
    for namespace in active:
        for cq_name in sorted(queues):
            uid = queues[cq_name]
            owners: tuple[OwnerReference, ...] = ()
            if uid:
                owners = (
                    OwnerReference(
                        api_version=version.api_version, kind="ClusterQueue", name=cq_name, uid=uid
                    ),
                )
            lq_name = local_queue_name(cq_name)
            labels, annotations = readable[cq_name]
            local = LocalQueue(
                metadata=_owned_meta(
                    lq_name,
                    namespace=namespace,
                    labels=labels,
                    annotations={CLUSTER_QUEUE_ANNOTATION: cq_name, **annotations},
                    owner_references=owners,
                ),
                cluster_queue=cq_name,
            )
            result[(namespace, lq_name)] = local.manifest(version)
    return result
