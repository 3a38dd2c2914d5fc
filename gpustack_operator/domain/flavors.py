"""Node profiles and ResourceFlavors (docs/naming.md).

A managed Node's merged labels describe one general profile and one per complete card model;
each profile names a flavor, a queue and a cohort. ``desired_resource_flavors`` turns the
profiles of all managed nodes into ResourceFlavor manifests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from gpustack_operator.domain.availability import is_lifecycle_taint
from gpustack_operator.domain.capacity import device_keys
from gpustack_operator.domain.kueue import KueueVersion, Meta, ResourceFlavor, Toleration
from gpustack_operator.domain.labels import (
    COHORT_ANNOTATION,
    GENERAL_PREFIX,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_LABEL,
    QUEUE_ANNOTATION,
    RESOURCE_TYPE_LABEL,
    RESOURCE_TYPE_NODES,
    SUFFIX_COHORT,
    SUFFIX_COUNT,
    SUFFIX_CPU,
    SUFFIX_FLAVOR,
    SUFFIX_QUEUE,
    SUFFIX_RAM,
    SUFFIX_STORAGE,
    TOPOLOGY_LABEL,
    TOPOLOGY_NONE,
    accelerated_key,
    general_key,
    note,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.nodeview import label_of, labels_of, metadata, name_of
from gpustack_operator.domain.profiles import GENERIC_GKEY, format_node_profile
from gpustack_operator.domain.quantities import floor_gi, parse_count, parse_quantity
from gpustack_operator.domain.topology import (
    TopologyPolicy,
    group_value,
    node_group,
    node_levels,
    parse_group,
    tas_flavor_name,
    tas_queue_name,
    topology_name_of_digest,
)
from gpustack_operator.domain.validation import is_valid_dns_subdomain, is_valid_label_value

DEDICATION_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
TolerationPolicy = tuple[str, ...] | None
"""Which dedication taints flavors tolerate: ``None`` every one common to the flavor's nodes
(the default), else only those with one of these keys (``()``: none)."""

_VIEW_SUFFIXES: Final = (
    SUFFIX_CPU,
    SUFFIX_RAM,
    SUFFIX_STORAGE,
    SUFFIX_FLAVOR,
    SUFFIX_QUEUE,
    SUFFIX_COHORT,
)


@dataclass(frozen=True, slots=True)
class Profile:
    """One capacity profile of one node, as its labels publish it."""

    node: str
    flavor: str
    queue: str
    cohort: str
    gkey: str
    akey: str
    manufacturer: str
    cpu: int
    ram_gi: int
    storage_gi: int
    accelerators: int
    queue_label: str
    """The node label whose value is the queue spec (``<P or Q>.z-queue``)."""
    queue_spec: str
    pin_general: bool
    """Accelerated flavors also select ``general.feature.gpustack.ai/<gKey>=true``."""
    flavor_label: str = ""
    """The node label whose value is the flavor spec (``<P or Q>.z-flavor``)."""
    flavor_spec: str = ""
    group: str = ""
    """The node's TAS group (``feature.gpustack.ai/topology``); ``""``: not TAS
    (docs/topology.md)."""

    @property
    def acceleratable(self) -> bool:
        return bool(self.akey)

    @property
    def topology(self) -> str:
        """The Topology a TAS profile's flavor names (``""`` when not TAS)."""
        parsed = parse_group(self.group)
        return topology_name_of_digest(parsed[0]) if parsed else ""


def is_managed(node: object) -> bool:
    """A node the queues count, not deleting: ``gpustack.ai/managed`` is ``true``, empty or
    absent (docs/labels.md, "From people (read)"). An absent label is what the worker is about
    to publish as ``true``, so a node whose label a person removed keeps its pools."""
    meta = metadata(node)
    labels = meta.get("labels")
    # Decoded JSON holds plain dicts: read the one label directly (every flavor and cohort
    # reconcile asks this of each node it looks at); anything else goes the careful way.
    value = labels.get(MANAGED_LABEL) if type(labels) is dict else None
    if type(value) is not str:  # absent, or a YAML scalar such as an unquoted true
        value = label_of(node, MANAGED_LABEL)
    return (not value or value == "true") and not meta.get("deletionTimestamp")


def general_keys(labels: Mapping[str, str]) -> list[str]:
    """gKeys a node is marked with (``general.feature.gpustack.ai/<gKey>=true``), sorted.

    The CPU manufacturer marker has no dash and is not a gKey.
    """
    keys = []
    for key, value in labels.items():
        if value == "true" and key.startswith(GENERAL_PREFIX):
            name = key[len(GENERAL_PREFIX) :]
            if "-" in name and "." not in name:
                keys.append(name)
    return sorted(keys)


def _view(labels: Mapping[str, str], prefix: str) -> tuple[int, int, int, str, str, str] | None:
    values = [labels.get(prefix + s) for s in _VIEW_SUFFIXES]
    if any(v is None or v == "" for v in values):
        return None
    cpu_text, ram_text, storage_text, flavor, queue, cohort = (str(v) for v in values)
    cpu = parse_count(cpu_text)
    ram = parse_quantity(ram_text)
    storage = parse_quantity(storage_text)
    if cpu is None or ram is None or storage is None:
        return None
    return cpu, floor_gi(ram), floor_gi(storage), flavor, queue, cohort


def _profile(
    node: str,
    gkey: str,
    akey: str,
    manufacturer: str,
    view: tuple[int, int, int, str, str, str],
    accelerators: int,
    queue_label: str,
    pin_general: bool,
    group: str = "",
) -> Profile | None:
    cpu, ram, storage, flavor_spec, queue_spec, cohort_spec = view
    names = [format_node_profile(gkey, akey, s) for s in (flavor_spec, queue_spec, cohort_spec)]
    if not all(is_valid_dns_subdomain(n) for n in names) or not is_valid_label_value(queue_spec):
        return None
    if group:  # docs/topology.md, "Names": TAS flavors and queues have names of their own
        names[0] = tas_flavor_name(names[0], group)
        names[1] = tas_queue_name(names[1])
        if not all(is_valid_dns_subdomain(n) for n in names[:2]):
            return None
    return Profile(
        node=node,
        flavor=names[0],
        queue=names[1],
        cohort=names[2],
        gkey=gkey,
        akey=akey,
        manufacturer=manufacturer,
        cpu=cpu,
        ram_gi=ram,
        storage_gi=storage,
        accelerators=accelerators,
        queue_label=queue_label,
        queue_spec=queue_spec,
        pin_general=pin_general,
        flavor_label=queue_label[: -len(SUFFIX_QUEUE)] + SUFFIX_FLAVOR,
        flavor_spec=flavor_spec,
        group=group,
    )


def node_profiles(node: object, manufacturers: Mapping[str, Manufacturer]) -> list[Profile]:
    """Every complete profile of *node*: general ones first, then one per card model.

    An incomplete view (a missing cpu/ram/storage/z-label, or ``.count`` for devices) or
    one whose names would be invalid is skipped.
    """
    labels = labels_of(node)
    name = name_of(node)
    group = node_group(node)
    profiles: list[Profile] = []
    gkeys = general_keys(labels)
    for gkey in gkeys:
        view = _view(labels, general_key(gkey))
        if view is None:
            continue
        p = _profile(
            name,
            gkey,
            "",
            gkey.split("-", 1)[0],
            view,
            0,
            general_key(gkey, SUFFIX_QUEUE),
            False,
            group,
        )
        if p is not None:
            profiles.append(p)
    naming_gkey = gkeys[0] if gkeys else GENERIC_GKEY
    for akey in device_keys(labels, manufacturers):
        q = accelerated_key(akey)
        count = parse_count(labels.get(q + SUFFIX_COUNT))
        view = _view(labels, q)
        if count is None or view is None:
            continue
        p = _profile(
            name,
            naming_gkey,
            akey,
            akey.split("-", 1)[0],
            view,
            count,
            q + SUFFIX_QUEUE,
            bool(gkeys),
            group,
        )
        if p is not None:
            profiles.append(p)
    return profiles


def managed_profiles(
    nodes: Iterable[object], manufacturers: Mapping[str, Manufacturer]
) -> list[Profile]:
    """Profiles of all managed nodes, in node-name order."""
    managed = sorted((n for n in nodes if is_managed(n)), key=name_of)
    return [p for n in managed for p in node_profiles(n, manufacturers)]


def dedication_taints(node: object) -> frozenset[tuple[str, str, str]]:
    """The node's ``NoSchedule``/``NoExecute`` taints as (key, value, effect), lifecycle
    taints left out."""
    spec = node.get("spec") if isinstance(node, Mapping) else None
    taints = spec.get("taints") if isinstance(spec, Mapping) else None
    out: set[tuple[str, str, str]] = set()
    for taint in taints if isinstance(taints, list) else []:
        if not isinstance(taint, Mapping):
            continue
        key, effect = str(taint.get("key") or ""), str(taint.get("effect") or "")
        if key and effect in DEDICATION_EFFECTS and not is_lifecycle_taint(key):
            out.add((key, str(taint.get("value") or ""), effect))
    return frozenset(out)


def flavor_tolerations(
    nodes: Iterable[object], policy: TolerationPolicy = None
) -> tuple[Toleration, ...]:
    """What a flavor's pods need to land on any of *nodes*: the dedication taints all of them
    carry (a taint on some nodes only leaves the others to the pods), filtered by *policy*,
    sorted. Deterministic in the set of nodes, whatever their order."""
    common: frozenset[tuple[str, str, str]] | None = None
    for node in nodes:
        taints = dedication_taints(node)
        common = taints if common is None else common & taints
    if not common:
        return ()
    return tuple(
        Toleration(key=k, value=v, effect=e)
        for k, v, e in sorted(common)
        if policy is None or k in policy
    )


def selects_plain_nodes(nodes: Iterable[object], topology_on: bool) -> bool:
    """Whether a plain (non-TAS) flavor of *nodes* selects ``feature.gpustack.ai/topology=
    none``: while TAS is on, once every one of its nodes carries it, so the selector never
    names a label its nodes do not have yet (docs/topology.md, "Plain nodes")."""
    if not topology_on:
        return False
    members = list(nodes)
    return bool(members) and all(label_of(n, TOPOLOGY_LABEL) == TOPOLOGY_NONE for n in members)


def resource_flavor(
    profile: Profile, tolerations: tuple[Toleration, ...] = (), plain_nodes: bool = False
) -> ResourceFlavor:
    """The ResourceFlavor of one profile (docs/worker.md) with *tolerations*
    (:func:`flavor_tolerations` of its nodes); a plain profile's flavor also selects
    ``feature.gpustack.ai/topology=none`` with *plain_nodes* (:func:`selects_plain_nodes`)."""
    node_labels = {MANAGED_LABEL: "true", profile.queue_label: profile.queue_spec}
    if profile.pin_general:
        node_labels[general_key(profile.gkey)] = "true"
    if plain_nodes and not profile.group:  # docs/topology.md, "Plain nodes"
        node_labels[TOPOLOGY_LABEL] = TOPOLOGY_NONE
    if profile.group:  # docs/topology.md, "Flavors": exactly the group's nodes
        node_labels[profile.flavor_label] = profile.flavor_spec
        node_labels[TOPOLOGY_LABEL] = profile.group
    annotations = {
        QUEUE_ANNOTATION: profile.queue,
        COHORT_ANNOTATION: profile.cohort,
        note("acceleratable"): "true" if profile.acceleratable else "false",
        note("manufacturer"): profile.manufacturer,
        note("cpu"): str(profile.cpu),
        note("ram"): f"{profile.ram_gi}Gi",
        note("localStorage"): f"{profile.storage_gi}Gi",
    }
    if profile.acceleratable:
        annotations[note("accelerator")] = str(profile.accelerators)
    return ResourceFlavor(
        metadata=Meta(
            name=profile.flavor,
            labels={RESOURCE_TYPE_LABEL: RESOURCE_TYPE_NODES, MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            annotations=annotations,
        ),
        node_labels=node_labels,
        tolerations=tolerations,
        topology_name=profile.topology,
    )


def desired_resource_flavors(
    nodes: Iterable[object],
    manufacturers: Mapping[str, Manufacturer],
    version: KueueVersion = KueueVersion.V1BETA2,
    tolerations: TolerationPolicy = None,
    topology_on: bool = False,
    profiles_of: ProfilesOf | None = None,
) -> dict[str, dict[str, Any]]:
    """Every ResourceFlavor the managed *nodes* call for, by name (sorted).

    Two nodes with the same flavor name describe the same hardware; the first by node name
    provides the notes; the tolerations come from all of them. *topology_on*: TAS is on
    (:func:`selects_plain_nodes`). *profiles_of* defaults to :func:`node_profiles`.
    """
    firsts: dict[str, Profile] = {}
    members: dict[str, list[object]] = {}
    for node in sorted((n for n in nodes if is_managed(n)), key=name_of):
        profiles = (
            profiles_of(node) if profiles_of is not None else node_profiles(node, manufacturers)
        )
        for profile in profiles:
            firsts.setdefault(profile.flavor, profile)
            members.setdefault(profile.flavor, []).append(node)
    return {
        name: resource_flavor(
            firsts[name],
            flavor_tolerations(members[name], tolerations),
            selects_plain_nodes(members[name], topology_on),
        ).manifest(version)
        for name in sorted(firsts)
    }


ProfilesOf = Callable[[object], Iterable[Profile]]
"""Where a caller's node profiles come from (``node_profiles``, or a cache of its results)."""


def first_profile(
    part: Literal["flavor", "queue", "cohort"],
    name: str,
    nodes: Iterable[object],
    manufacturers: Mapping[str, Manufacturer],
    profiles_of: ProfilesOf | None = None,
) -> Profile | None:
    """The profile naming *name* as its *part* of the first managed node by name that has one.

    This is the profile :func:`desired_resource_flavors` and ``desired_cohorts`` render for
    *name* (they take the first in :func:`managed_profiles` order), found without deriving
    the profiles of the other nodes: a controller that knows the nodes of one flavor or
    cohort (an index) asks for one object at the cost of one node, not all of them.
    *profiles_of* defaults to :func:`node_profiles`.
    """

    def named(node: object) -> Profile | None:
        profiles = (
            profiles_of(node) if profiles_of is not None else node_profiles(node, manufacturers)
        )
        return next((p for p in profiles if getattr(p, part) == name), None)

    managed = [n for n in nodes if is_managed(n)]
    if not managed:
        return None
    # The nodes a caller passes are usually those of *name* (an index bucket): the first by
    # name then has the profile, and one min() replaces sorting them all on every reconcile.
    first = min(managed, key=name_of)
    found = named(first)
    if found is not None:
        return found
    for node in sorted(managed, key=name_of):
        found = named(node)
        if found is not None:
            return found
    return None


def desired_resource_flavor(
    name: str,
    nodes: Iterable[object],
    manufacturers: Mapping[str, Manufacturer],
    version: KueueVersion = KueueVersion.V1BETA2,
    profiles_of: ProfilesOf | None = None,
    tolerations: TolerationPolicy = None,
    topology_on: bool = False,
) -> dict[str, Any] | None:
    """``desired_resource_flavors(nodes, ...).get(name)``: the notes from one representative
    node, the tolerations from every node of the flavor (pass the flavor's nodes, an index,
    to keep this proportional to them)."""
    nodes = list(nodes)
    profile = first_profile("flavor", name, nodes, manufacturers, profiles_of)
    if profile is None:
        return None

    def profiles(node: object) -> Iterable[Profile]:
        return profiles_of(node) if profiles_of is not None else node_profiles(node, manufacturers)

    members = [n for n in nodes if is_managed(n) and any(p.flavor == name for p in profiles(n))]
    return resource_flavor(
        profile,
        flavor_tolerations(members, tolerations),
        selects_plain_nodes(members, topology_on),
    ).manifest(version)


def flavor_nodes(
    nodes: Iterable[object],
    manufacturers: Mapping[str, Manufacturer],
    profiles_of: ProfilesOf | None = None,
) -> dict[str, list[object]]:
    """Managed nodes per flavor name (the flavor index), in node-name order; *profiles_of*
    defaults to :func:`node_profiles`."""
    index: dict[str, list[object]] = {}
    managed = sorted((n for n in nodes if is_managed(n)), key=name_of)
    for node in managed:
        profiles = (
            profiles_of(node) if profiles_of is not None else node_profiles(node, manufacturers)
        )
        for flavor in sorted({p.flavor for p in profiles}):
            index.setdefault(flavor, []).append(node)
    return index


def node_profile_names(
    node: object,
    manufacturers: Mapping[str, Manufacturer],
    part: Literal["flavor", "queue", "cohort"],
) -> list[str]:
    """The flavor, queue or cohort names (*part*) of a managed node, sorted; ``[]`` for an
    unmanaged or deleting node. This is what the controllers index Nodes by."""
    if not is_managed(node):
        return []
    return sorted({getattr(p, part) for p in node_profiles(node, manufacturers)})


def topology_labels(
    node: object, policy: TopologyPolicy | None, tolerations: TolerationPolicy = None
) -> dict[str, str]:
    """``{feature.gpustack.ai/topology: <group>}`` for a node TAS schedules,
    ``{feature.gpustack.ai/topology: none}`` for another managed node while TAS is on (the
    plain flavors select it: docs/topology.md, "Plain nodes"), else ``{}``.

    The group digests the node's level set and the dedication taints its flavor will
    tolerate (the node's own, filtered by *tolerations*): nodes of one group share every
    frozen field of a TAS flavor, and a change of either moves the node to a new flavor.
    """
    if policy is None or not policy.enabled:
        return {}
    levels = node_levels(node, policy)
    if not levels:
        return {TOPOLOGY_LABEL: TOPOLOGY_NONE} if is_managed(node) else {}
    return {TOPOLOGY_LABEL: group_value(levels, flavor_tolerations([node], tolerations))}
