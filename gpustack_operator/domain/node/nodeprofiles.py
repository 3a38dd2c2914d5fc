"""A Node's profiles (docs/naming.md): its general profile and one per complete card model,
each naming a flavor, a queue and a cohort, read from the Node's merged labels; whether the
queues count the node; and the topology label the worker publishes for it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from gpustack_operator.domain.labels import (
    GENERAL_PREFIX,
    MANAGED_LABEL,
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
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.capacity import device_keys
from gpustack_operator.domain.node.nodetopology import (
    TopologyPolicy,
    group_value,
    node_group,
    node_levels,
    parse_group,
    tas_flavor_name,
    tas_queue_name,
    topology_name_of_digest,
)
from gpustack_operator.domain.node.taints import (
    TolerationPolicy,
    flavor_tolerations,
)
from gpustack_operator.domain.nodeview import label_of, labels_of, metadata, name_of
from gpustack_operator.domain.profiles import GENERIC_GKEY, format_node_profile
from gpustack_operator.domain.quantities import floor_gi, parse_count, parse_quantity
from gpustack_operator.domain.validation import is_valid_dns_subdomain, is_valid_label_value

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
