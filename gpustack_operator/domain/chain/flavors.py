"""Node profiles and ResourceFlavors (docs/naming.md).

A managed Node's merged labels describe one general profile and one per complete card model;
each profile names a flavor, a queue and a cohort. ``desired_resource_flavor`` turns the
profiles of a flavor's managed nodes into its ResourceFlavor manifest (through
``domain/chain/nodepool.py``'s ``node_flavor``, for ``plan`` and the worker alike).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from gpustack_operator.domain.chain.kueue import KueueVersion, Meta, ResourceFlavor
from gpustack_operator.domain.labels import (
    COHORT_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_LABEL,
    QUEUE_ANNOTATION,
    RESOURCE_TYPE_LABEL,
    RESOURCE_TYPE_NODES,
    TOPOLOGY_LABEL,
    TOPOLOGY_NONE,
    general_key,
    note,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.nodeprofiles import (
    Profile,
    is_managed,
    node_profiles,
)
from gpustack_operator.domain.node.taints import (
    Toleration,
    TolerationPolicy,
    flavor_tolerations,
)
from gpustack_operator.domain.nodeview import label_of, name_of


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

    This is the profile :func:`desired_resource_flavor` and ``desired_cohorts`` render for
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
    """ResourceFlavor *name* (docs/worker.md): the notes from the first node by name that
    has it, the tolerations from every node of the flavor (:func:`flavor_tolerations`;
    pass the flavor's nodes, an index, to keep this proportional to them), TAS's plain
    selector with *topology_on* (:func:`selects_plain_nodes`); None when no managed node
    has it. *profiles_of* defaults to :func:`node_profiles`."""
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
