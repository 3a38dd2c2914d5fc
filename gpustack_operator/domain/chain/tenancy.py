"""vCluster tenants: what kind of cluster the worker runs in, and how its pools follow.

A tenant on **shared host nodes** sees copies of the host's Nodes whose host-owned labels
(listed in the ``vcluster.loft.sh/managed-labels`` annotation) are the only ones the host
scheduler matches; a tenant of **pseudo nodes** sees stand-ins without devices; a tenant on
private nodes is an ordinary cluster (docs/tenants.md, "Three kinds of cluster"). This module
detects which, and computes a shared-node tenant's pools from host-owned labels alone: the
worker's capacity labels are derived in memory (nothing is written to the Nodes), flavors
select host-owned labels only, and pools those labels cannot tell apart become one
(docs/tenants.md, "Shared host nodes").
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from gpustack_operator.domain.chain.explain import Reason
from gpustack_operator.domain.chain.flavors import flavor_nodes
from gpustack_operator.domain.labels import (
    ARCH_LABEL,
    HOST_LABELS_ANNOTATION,
    INSTANCE_TYPE_LABEL,
    MANAGED_LABEL,
    NFD_CPU_FAMILY_LABEL,
    NFD_CPU_ID_LABEL,
    NFD_CPU_VENDOR_LABEL,
    SUFFIX_CPU,
    SUFFIX_RAM,
    SUFFIX_STORAGE,
    accelerated_key,
    general_key,
    note,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.capacity import WORKER_RAM_GI_PER_CPU, capacity_labels
from gpustack_operator.domain.node.devicesources.merge import VENDOR_LABEL_PREFIXES
from gpustack_operator.domain.node.nodedevices import (
    HOST_RESOURCES,
)
from gpustack_operator.domain.node.nodeprofiles import Profile, node_profiles
from gpustack_operator.domain.nodeview import annotations_of, label_of, labels_of, name_of
from gpustack_operator.domain.profiles import fnv1a_64
from gpustack_operator.domain.quantities import format_decimal_quantity, parse_quantity
from gpustack_operator.domain.selectors import labels_match

FAKE_NODE_LABEL: Final = "vcluster.loft.sh/fake-node"
"""On vCluster's pseudo nodes (value ``"true"``)."""
SYNCED_NODE_LABEL: Final = "vcluster.loft.sh/managed-by"
"""On Nodes vCluster copies from the host (value: the vCluster's name)."""
HOST_NODES_ANNOTATION: Final = "gpustack.ai/host-nodes"
"""On a tenant's ResourceFlavor: ``<count>-<fnv64 of the sorted node names>``, the same in
every tenant whose flavor covers the same host nodes (docs/worker-gateway.md, "Tenants")."""
SHARED_CAPACITY_ANNOTATION: Final = note("sharedCapacity")
"""On a tenant's device ClusterQueue without a declared cap: which quotas are the host's
whole, shared capacity (docs/tenants.md, "Quota a tenant may count on")."""
PSEUDO_NODE_REASON: Final = "vcluster-pseudo-node"
MERGED_REASON: Final = "tenant-pools-merged"
UNRESOLVED_REASON: Final = "tenant-pools-indistinguishable"
DRA_REASON: Final = "tenant-no-dra"

GENERAL_IDENTITY_KEYS: Final = (
    ARCH_LABEL,
    INSTANCE_TYPE_LABEL,
    NFD_CPU_VENDOR_LABEL,
    NFD_CPU_FAMILY_LABEL,
    NFD_CPU_ID_LABEL,
)
"""Host labels a CPU pool is selected by, where present (docs/tenants.md, "Flavors")."""
DEVICE_IDENTITY_SUFFIXES: Final = (
    ".product",
    ".count",
    ".memory",
    ".product-name",
    ".device-id",
    ".vram",
)
"""Properties of the GPU stacks' labels (GFD, the AMD labeller) a device pool is selected by:
the key ends in one, or holds it followed by a dot (the labeller's beta form,
``beta.amd.com/gpu.product-name.<value>``)."""
_MERGE_ROUNDS: Final = 4


class Tenancy(StrEnum):
    """The kind of cluster (docs/tenants.md, "Three kinds of cluster")."""

    ORDINARY = "ordinary"
    """Not a tenant, or a vCluster tenant on private nodes: the usual chain."""
    SHARED_NODES = "shared-nodes"
    """A vCluster tenant on host nodes synced with ``sync.fromHost.nodes``."""
    PSEUDO_NODES = "pseudo-nodes"
    """A vCluster tenant of pseudo nodes: no pools."""


@dataclass(frozen=True)
class TenantSettings:
    """What the tenant-specific rules need: the kind of cluster, whether the tenant runs
    vCluster's virtual scheduler, and the declared quota caps per device resource. The chain
    policy's tenant fields resolved against the Nodes (``ChainPolicy.tenant_settings``)."""

    tenancy: Tenancy = Tenancy.ORDINARY
    virtual_scheduler: bool = False
    quota_caps: Mapping[str, int] = field(default_factory=dict)

    @property
    def is_tenant(self) -> bool:
        """A shared-node or pseudo-node tenant (the chain is built from host labels)."""
        return self.tenancy is not Tenancy.ORDINARY


def is_pseudo_node(node: object) -> bool:
    return label_of(node, FAKE_NODE_LABEL) == "true"


def is_synced_node(node: object) -> bool:
    return bool(label_of(node, SYNCED_NODE_LABEL)) and not is_pseudo_node(node)


def detect_tenancy(nodes: Iterable[object]) -> Tenancy:
    """From the Nodes themselves: any synced host Node makes a shared-node tenant, else any
    pseudo node a pseudo-node tenant, else an ordinary cluster."""
    pseudo = False
    for node in nodes:
        if is_synced_node(node):
            return Tenancy.SHARED_NODES
        pseudo = pseudo or is_pseudo_node(node)
    return Tenancy.PSEUDO_NODES if pseudo else Tenancy.ORDINARY


def host_owned_keys(node: object) -> frozenset[str]:
    """The label keys the host owns on a synced Node (its ``managed-labels`` annotation)."""
    raw = annotations_of(node).get(HOST_LABELS_ANNOTATION, "")
    return frozenset(k.strip() for k in raw.split("\n") if k.strip())


def scheduling_labels(node: object, virtual_scheduler: bool = False) -> dict[str, str]:
    """The labels the scheduler placing the tenant's pods matches: the host-owned ones
    (the host scheduler sees the host's Node), or every label of the copy when the tenant
    runs the virtual scheduler (docs/tenants.md, "The virtual scheduler")."""
    labels = labels_of(node)
    if virtual_scheduler:
        return labels
    owned = host_owned_keys(node)
    return {k: v for k, v in labels.items() if k in owned}


def _tenant_input(node: Mapping[str, Any], virtual_scheduler: bool) -> dict[str, Any]:
    """*node* as the tenant's pools read it: its scheduling labels, plus the tenant's own
    opt-out (``gpustack.ai/managed``), which only the worker reads."""
    result = copy.deepcopy(dict(node))
    labels = scheduling_labels(node, virtual_scheduler)
    managed = label_of(node, MANAGED_LABEL)
    if managed is not None:
        labels[MANAGED_LABEL] = managed
    result.setdefault("metadata", {})["labels"] = labels
    return result


def identity_labels(labels: Mapping[str, str], accelerated: bool) -> dict[str, str]:
    """The labels of *labels* a pool may be selected by: CPU identity, and for a device
    pool the GPU stacks' product, count and memory labels too."""
    result = {k: labels[k] for k in GENERAL_IDENTITY_KEYS if k in labels}
    if accelerated:
        result.update(
            (k, v)
            for k, v in labels.items()
            if k.startswith(VENDOR_LABEL_PREFIXES)
            and any(k.endswith(x) or f"{x}." in k for x in DEVICE_IDENTITY_SUFFIXES)
        )
    return result


def flavor_selector(
    members: Iterable[object], accelerated: bool, virtual_scheduler: bool = False
) -> dict[str, str]:
    """The nodeLabels of a tenant flavor: the identity labels every member carries with
    the same value (host-owned ones only, unless the tenant runs the virtual scheduler)."""
    common: dict[str, str] | None = None
    for node in members:
        own = identity_labels(scheduling_labels(node, virtual_scheduler), accelerated)
        common = own if common is None else {k: v for k, v in common.items() if own.get(k) == v}
    return dict(sorted((common or {}).items()))


def selects(selector: Mapping[str, str], node: object) -> bool:
    """Whether a flavor with these nodeLabels can place pods on *node* (``{}``: any node)."""
    return labels_match(selector, labels_of(node))


@dataclass(frozen=True)
class TenantFleet:
    """A tenant's Nodes as its pools see them (capacity labels merged in memory)."""

    nodes: tuple[dict[str, Any], ...]
    merged: Mapping[str, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    """Node name -> each group of flavors (names before merging) one of its pools was
    merged from."""
    unresolved: frozenset[str] = frozenset()
    """Nodes left without pools: host labels cannot tell their pools from others."""


def _view_prefix(profile: Profile) -> str:
    return accelerated_key(profile.akey) if profile.akey else general_key(profile.gkey)


def _effective(
    given: Mapping[str, Any],
    overrides: Mapping[str, str],
    manufacturers: Mapping[str, Manufacturer],
) -> dict[str, Any]:
    node = copy.deepcopy(dict(given))
    labels = {**labels_of(given), **overrides}
    node["metadata"]["labels"] = labels
    derived = capacity_labels(node, manufacturers, ram_gi_per_cpu=WORKER_RAM_GI_PER_CPU)
    node["metadata"]["labels"] = dict(sorted({**labels, **derived}.items()))
    return node


def _colliding(
    nodes: Sequence[Mapping[str, Any]],
    manufacturers: Mapping[str, Manufacturer],
    virtual_scheduler: bool,
) -> list[set[str]]:
    """Groups of flavors (two or more) whose selectors match each other's nodes."""
    members = flavor_nodes(nodes, manufacturers)
    kinds: dict[str, bool] = {}
    for node in nodes:
        for p in node_profiles(node, manufacturers):
            kinds.setdefault(p.flavor, p.acceleratable)
    selectors = {
        f: flavor_selector(m, kinds.get(f, False), virtual_scheduler) for f, m in members.items()
    }
    parent = {f: f for f in members}

    def root(f: str) -> str:
        while parent[f] != f:
            f = parent[f]
        return f

    names = sorted(members)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if kinds.get(a) != kinds.get(b) or not selectors[a] or not selectors[b]:
                continue  # an empty selector is never merged away (below)
            if any(selects(selectors[a], n) for n in members[b]) or any(
                selects(selectors[b], n) for n in members[a]
            ):
                parent[root(b)] = root(a)
    groups: dict[str, set[str]] = {}
    for f in names:
        groups.setdefault(root(f), set()).add(f)
    result = [g for g in groups.values() if len(g) > 1]
    # A flavor without identity labels would select every node: unless it covers them all,
    # it can never be told apart; merging it would take every other pool of its kind along.
    every = {name_of(n) for n in nodes}
    result += [{f} for f in names if not selectors[f] and {name_of(n) for n in members[f]} != every]
    return result


def _smallest_shape(
    group: set[str], nodes: Sequence[Mapping[str, Any]], manufacturers: Mapping[str, Manufacturer]
) -> tuple[int, int, int]:
    shapes = [
        (p.cpu, p.ram_gi, p.storage_gi)
        for n in nodes
        for p in node_profiles(n, manufacturers)
        if p.flavor in group
    ]
    return min(s[0] for s in shapes), min(s[1] for s in shapes), min(s[2] for s in shapes)


def tenant_fleet(
    nodes: Iterable[Mapping[str, Any]],
    manufacturers: Mapping[str, Manufacturer],
    *,
    virtual_scheduler: bool = False,
) -> TenantFleet:
    """A shared-node tenant's Nodes with the worker's capacity labels merged in memory,
    computed from their scheduling labels and allocatable (docs/tenants.md, "Shared host
    nodes"). Pseudo nodes stay as they are (no pools). Flavors whose host-owned selectors
    match each other's nodes are merged into one pool shaped as the smallest of them (cpu,
    RAM and storage per node); pools still indistinguishable after that lose their nodes."""
    ordered = sorted(nodes, key=name_of)
    pseudo = [copy.deepcopy(dict(n)) for n in ordered if is_pseudo_node(n)]
    given = {
        name_of(n): _tenant_input(n, virtual_scheduler) for n in ordered if not is_pseudo_node(n)
    }
    overrides: dict[str, dict[str, str]] = {}
    merged: dict[str, set[tuple[str, ...]]] = {}
    effective = {k: _effective(v, {}, manufacturers) for k, v in given.items()}
    unresolved: set[str] = set()
    for _ in range(_MERGE_ROUNDS):
        groups = _colliding(list(effective.values()), manufacturers, virtual_scheduler)
        if not groups:
            break
        for group in groups:
            cpu, ram, storage = _smallest_shape(group, list(effective.values()), manufacturers)
            for name, node in effective.items():
                for p in node_profiles(node, manufacturers):
                    if p.flavor not in group:
                        continue
                    prefix = _view_prefix(p)
                    overrides.setdefault(name, {}).update(
                        {
                            prefix + SUFFIX_CPU: str(cpu),
                            prefix + SUFFIX_RAM: f"{ram}Gi",
                            prefix + SUFFIX_STORAGE: f"{storage}Gi",
                        }
                    )
                    merged.setdefault(name, set()).add(tuple(sorted(group)))
        effective = {
            k: _effective(v, overrides.get(k, {}), manufacturers) for k, v in given.items()
        }
    else:
        groups = _colliding(list(effective.values()), manufacturers, virtual_scheduler)
        stuck = set().union(*groups) if groups else set()
        for name, node in list(effective.items()):
            if any(p.flavor in stuck for p in node_profiles(node, manufacturers)):
                unresolved.add(name)
                effective[name] = given[name]
                effective[name]["metadata"]["labels"][MANAGED_LABEL] = "false"
    return TenantFleet(
        nodes=tuple(sorted([*effective.values(), *pseudo], key=name_of)),
        merged={k: tuple(sorted(v)) for k, v in sorted(merged.items())},
        unresolved=frozenset(unresolved),
    )


def host_nodes_fingerprint(members: Iterable[object]) -> str:
    """``<count>-<16 hex>``: which host nodes a flavor covers, comparable across tenants
    (vCluster keeps the host's Node names)."""
    names = sorted({name_of(n) for n in members})
    return f"{len(names)}-{fnv1a_64(chr(10).join(names).encode()):016x}"


def tenant_flavor(
    flavor: Mapping[str, Any], members: Sequence[object], virtual_scheduler: bool = False
) -> dict[str, Any]:
    """*flavor* (as ``desired_resource_flavor`` renders it) for a shared-node tenant: its
    nodeLabels replaced by :func:`flavor_selector` of its *members*, and the
    :data:`HOST_NODES_ANNOTATION` fingerprint of them (docs/tenants.md, "Flavors")."""
    result = copy.deepcopy(dict(flavor))
    annotations = result["metadata"].setdefault("annotations", {})
    accelerated = annotations.get(note("acceleratable")) == "true"
    result["spec"]["nodeLabels"] = flavor_selector(members, accelerated, virtual_scheduler)
    annotations[HOST_NODES_ANNOTATION] = host_nodes_fingerprint(members)
    return result


def _device_quotas(queue: Mapping[str, Any]) -> Iterable[dict[str, Any]]:
    spec = queue.get("spec")
    groups = spec.get("resourceGroups") if isinstance(spec, Mapping) else None
    for group in groups or ():
        for flavor in group.get("flavors") or ():
            for resource in flavor.get("resources") or ():
                if resource.get("name") not in HOST_RESOURCES:
                    yield resource


def tenant_cluster_queue(queue: Mapping[str, Any], caps: Mapping[str, int]) -> dict[str, Any]:
    """*queue* for a shared-node tenant (docs/tenants.md, "Quota a tenant may count on"):
    a device resource with a declared cap gets at most that much quota in the queue (its
    flavors in order, each taking what is left); the queue's other device resources are
    the host's shared capacity, which :data:`SHARED_CAPACITY_ANNOTATION` says."""
    result = copy.deepcopy(dict(queue))
    left = dict(caps)
    uncapped: set[str] = set()
    for resource in _device_quotas(result):
        name = str(resource.get("name"))
        if name not in left:
            uncapped.add(name)
            continue
        amount = parse_quantity(resource.get("nominalQuota"))
        granted = min(int(amount) if amount is not None else 0, left[name])
        left[name] -= granted
        resource["nominalQuota"] = format_decimal_quantity(granted)
    if uncapped:
        annotations = result["metadata"].setdefault("annotations", {})
        annotations[SHARED_CAPACITY_ANNOTATION] = (
            f"{', '.join(sorted(uncapped))}: the host's whole capacity, shared with other "
            "tenants; declare this tenant's share with --tenant-quota-cap"
        )
    return result


def tenant_reasons(
    node: Mapping[str, Any], fleet: TenantFleet, has_slices: bool = False
) -> list[Reason]:
    """Why a tenant's *node* (as given) feeds the pools it does (docs/plan.md, "Reasons")."""
    name = name_of(node)
    if is_pseudo_node(node):
        return [
            Reason(
                PSEUDO_NODE_REASON,
                f"a vCluster pseudo node ({FAKE_NODE_LABEL}=true): a stand-in with made-up "
                "capacity and no devices, so no pools; enable sync.fromHost.nodes in the "
                "vCluster config (enabled: true, with a selector for this tenant's host nodes) "
                "so the tenant sees the real nodes",
            )
        ]
    reasons: list[Reason] = []
    if name in fleet.unresolved:
        reasons.append(
            Reason(
                UNRESOLVED_REASON,
                "the host-owned labels cannot tell this node's pools from others even after "
                "merging them: no pools; give the host nodes distinguishing labels (e.g. "
                f"{INSTANCE_TYPE_LABEL}) or sync NFD's CPU labels",
            )
        )
    else:
        reasons.extend(
            Reason(
                MERGED_REASON,
                f"the host-owned labels cannot tell {', '.join(group)} apart: they form one "
                "pool shaped as the smallest of them, so a pod the host scheduler places on "
                "any of their nodes fits",
            )
            for group in fleet.merged.get(name, ())
        )
    if has_slices:
        reasons.append(
            Reason(
                DRA_REASON,
                "DRA ResourceSlices are never synced into a vCluster tenant (only "
                "DeviceClasses and ResourceClaims are): no DRA pools; the devices count "
                "through the GPU stacks' labels and allocatable instead",
            )
        )
    return reasons
