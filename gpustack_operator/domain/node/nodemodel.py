"""One Node version as the chain reads it: the node model (shared/DESIGN.md §7, docs/worker.md).

Every stage of the chain asks the same few questions of a Node: is it managed, what are its
profiles (and so its flavor, queue and cohort names), which capacity labels does the worker
publish for it, which dedication taints does it carry, what do its lifecycle signals say,
and how many devices does it advertise. :func:`node_model` answers all of them at once, from
the raw Node, into an immutable :class:`NodeModel`; raw-dict access to Nodes for these
questions lives here and in the functions it calls. The worker keeps one model per Node
version (``gpustack_operator.worker.nodemodels.NodeModels``), ``plan`` builds one per Node.

Pure: the model depends on the Node and on :class:`ModelSettings` alone.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from gpustack_operator.domain.labels import (
    ACCELERATABLE_PREFIX,
    ARCH_LABEL,
    CPU_ANNOTATION_PREFIX,
    CPU_NAME_ANNOTATION,
    FEATURE_PREFIX,
    GENERAL_PREFIX,
    HOST_LABELS_ANNOTATION,
    INSTANCE_TYPE_LABEL,
    NFD_CPU_FAMILY_LABEL,
    NFD_CPU_ID_LABEL,
    NFD_CPU_VENDOR_LABEL,
    OS_LABEL,
    SYSTEM_PREFIX,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.availability import Lifecycle, availability_inputs, lifecycle_of
from gpustack_operator.domain.node.capacity import (
    WORKER_RAM_GI_PER_CPU,
    capacity_labels_and_devices,
)
from gpustack_operator.domain.node.devicesources.merge import (
    VENDOR_LABEL_PREFIXES,
    VENDOR_RESOURCE_PREFIXES,
    agent_manufacturers,
    counted_diagnostics,
)
from gpustack_operator.domain.node.devicesources.model import Diagnostic
from gpustack_operator.domain.node.nodedevices import HOST_RESOURCES, NodeDevices, node_devices
from gpustack_operator.domain.node.nodefeature import can_publish_for
from gpustack_operator.domain.node.nodeprofiles import (
    Profile,
    is_managed,
    node_profiles,
    topology_labels,
)
from gpustack_operator.domain.node.nodetopology import (
    HOSTNAME_LABEL,
    TopologyPolicy,
    is_level_label,
    missing_level,
    node_group,
)
from gpustack_operator.domain.node.taints import TolerationPolicy, dedication_taints
from gpustack_operator.domain.nodeview import (
    annotations_of,
    is_deleting,
    labels_of,
    metadata,
    name_of,
    status_field,
    uid_of,
)

Part = Literal["flavor", "queue", "cohort"]
PARTS: Final[tuple[Part, ...]] = ("flavor", "queue", "cohort")

# Node labels whose change can move a capacity profile, a flavor, a queue or its notes.
_NODE_LABEL_PREFIXES: Final = (
    SYSTEM_PREFIX,
    FEATURE_PREFIX,
    GENERAL_PREFIX,
    ACCELERATABLE_PREFIX,
    *VENDOR_LABEL_PREFIXES,
)
_NODE_LABELS: Final = frozenset(
    {
        NFD_CPU_VENDOR_LABEL,
        NFD_CPU_FAMILY_LABEL,
        NFD_CPU_ID_LABEL,
        OS_LABEL,
        ARCH_LABEL,
        INSTANCE_TYPE_LABEL,
    }
)
# Annotations besides NFD's CPU ones: in a vCluster tenant, which labels the host owns.
_NODE_ANNOTATIONS: Final = frozenset({HOST_LABELS_ANNOTATION})


@dataclass(frozen=True)
class ModelSettings:
    """What besides the Node a model depends on (parts of the chain policy)."""

    manufacturers: Mapping[str, Manufacturer]
    topology: TopologyPolicy | None = None
    """TAS settings the topology label follows (docs/topology.md, "Groups"); ``None``: off."""
    tolerations: TolerationPolicy = None
    publishes_labels: bool = True
    """False in a vCluster tenant: no capacity labels are published, none awaited."""
    capacity: bool = True
    """Derive the capacity labels and unpooled devices (the worker's); ``plan`` derives its
    NodeFeatures before merging them, and models the merged Nodes without them."""

    def __post_init__(self) -> None:
        if self.topology is not None and not self.topology.enabled:
            object.__setattr__(self, "topology", None)


@dataclass(frozen=True, slots=True)
class NodeModel:
    """What the chain reads of one Node version (build it with :func:`node_model`)."""

    name: str
    uid: str
    version: str
    """``metadata.resourceVersion`` (``""`` for a Node from a file)."""
    managed: bool
    """:func:`~gpustack_operator.domain.node.nodeprofiles.is_managed`: counted by the queues."""
    deleting: bool
    view: tuple[Any, ...]
    """Everything the worker's output depends on, comparable (:func:`node_view`)."""
    profiles: tuple[Profile, ...]
    """Every complete profile, whether managed or not (a declared pool's claim aside)."""
    names: Mapping[Part, tuple[str, ...]]
    """The flavor, queue and cohort names of :attr:`profiles`, sorted."""
    capacity_labels: Mapping[str, str]
    """What the worker's NodeFeature carries (no DRA slices), with the topology label."""
    awaits_labels: bool
    """The Node does not carry :attr:`capacity_labels` yet (NFD has not merged them)."""
    dedication_taints: frozenset[tuple[str, str, str]]
    group: str
    """Its TAS group label (docs/topology.md); ``""``: none."""
    missing_level: str
    """The topology level label it lacks while carrying a coarser one (``""``: none)."""
    published: frozenset[str]
    """Manufacturers our agent describes on it (docs/devices.md, "Precedence")."""
    unpooled: tuple[tuple[Diagnostic, int], ...]
    """Its devices that feed no pool (no DRA slices), with how many each reason leaves out
    (docs/devices.md, "Why a device gets no pool")."""
    node: Mapping[str, Any] = field(repr=False, compare=False)
    """The Node version it models (what :attr:`devices` and :attr:`lifecycle` read)."""
    _devices: NodeDevices | None = field(default=None, repr=False, compare=False)
    _lifecycle: Lifecycle | None = field(default=None, repr=False, compare=False)

    # Read later, by fewer readers: derived on first use. The queues read them at reconcile
    # time, from the version then cached, so a version replaced before (a Node's first
    # version, replaced once NFD merges its capacity labels) never pays for them.

    @property
    def devices(self) -> NodeDevices:
        """Per device resource its parsed allocatable and capacity, per device pool of its
        profiles the installed count and DRA amount (what the queues' quotas read)."""
        devices = self._devices
        if devices is None:
            akeys = sorted({p.akey for p in self.profiles if p.akey})
            devices = node_devices(self.node, akeys)
            object.__setattr__(self, "_devices", devices)
        return devices

    @property
    def lifecycle(self) -> Lifecycle:
        """Its lifecycle signals with their times (docs/node-lifecycle.md)."""
        lifecycle = self._lifecycle
        if lifecycle is None:
            lifecycle = lifecycle_of(self.node)
            object.__setattr__(self, "_lifecycle", lifecycle)
        return lifecycle

    def index_names(self, part: Part) -> tuple[str, ...]:
        """What the Node indexes file it under: its names when managed, else none."""
        return self.names[part] if self.managed else ()


BUILT: list[int] = [0]
"""How many models :func:`node_model` has built in this process (tests count with it)."""

# Labels neither the capacity derivation nor the profiles read (the profiles take the
# node's name from its metadata): left out of their inputs, so that Nodes of one shape
# share one derivation.
UNREAD_LABELS: Final = frozenset({HOSTNAME_LABEL})

_Capacity = tuple[dict[str, str], tuple[tuple[Diagnostic, int], ...]]


class Derivations:
    """The capacity labels with the unpooled devices, and the profiles, derived once per
    distinct input rather than once per Node version (docs/worker.md, "One model per Node
    version"). Nodes of one shape share them, and so do the versions of a fleet's Nodes
    after NFD merged the same capacity labels.

    The inputs are spelled out in :func:`capacity_inputs` and :func:`profile_inputs`, and
    a derivation is computed from its inputs alone (never from the Node it was first asked
    for), so a reused result is the one the Node would give. At most *limit* inputs of each
    kind are kept; past that the memo starts again. For one :class:`ModelSettings` only.
    """

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._capacity: dict[tuple[Any, ...], _Capacity] = {}
        self._profiles: dict[frozenset[tuple[str, str]], tuple[Profile, ...]] = {}
        self._view_labels: dict[
            tuple[frozenset[tuple[str, str]], TopologyPolicy | None], tuple[tuple[str, str], ...]
        ] = {}
        self._view_amounts: dict[tuple[Any, ...], tuple[tuple[str, str, str], ...]] = {}
        self.derived = 0
        """How many derivations (capacity or profiles) were computed rather than reused."""

    def capacity(
        self, inputs: tuple[Any, ...], manufacturers: Mapping[str, Manufacturer]
    ) -> _Capacity:
        found = self._capacity.get(inputs)
        if found is None:
            self.derived += 1
            if len(self._capacity) >= self.limit:
                self._capacity.clear()
            found = self._capacity[inputs] = _capacity_of(_node_of(inputs), manufacturers)
        return found

    def profiles(
        self, inputs: frozenset[tuple[str, str]], manufacturers: Mapping[str, Manufacturer]
    ) -> tuple[Profile, ...]:
        """The profiles of a Node with these labels, with ``""`` for the node's name."""
        found = self._profiles.get(inputs)
        if found is None:
            self.derived += 1
            if len(self._profiles) >= self.limit:
                self._profiles.clear()
            node = {"metadata": {"labels": dict(inputs)}}
            found = self._profiles[inputs] = tuple(node_profiles(node, manufacturers))
        return found

    def view_labels(
        self,
        inputs: frozenset[tuple[str, str]],
        labels: Mapping[str, str],
        topology: TopologyPolicy | None,
    ) -> tuple[tuple[str, str], ...]:
        """:func:`node_view`'s label selection of a Node with *labels*: the selection of
        *inputs* (:func:`profile_inputs` of them) once per distinct input and TAS setting,
        with the node's hostname label put in its place when it is selected."""
        key = (inputs, topology)
        found = self._view_labels.get(key)
        if found is None:
            self.derived += 1
            if len(self._view_labels) >= self.limit:
                self._view_labels.clear()
            found = self._view_labels[key] = _selected_labels(inputs, topology)
        hostname = labels.get(HOSTNAME_LABEL)
        if hostname is None or not _selects(HOSTNAME_LABEL, topology):
            return found
        pairs = list(found)
        bisect.insort(pairs, (HOSTNAME_LABEL, hostname))
        return tuple(pairs)

    def view_amounts(
        self, inputs: tuple[Any, ...], manufacturers: Mapping[str, Manufacturer]
    ) -> tuple[tuple[str, str, str], ...]:
        """:func:`node_view`'s device amounts of a Node whose ``status.capacity`` and
        ``status.allocatable`` are those of *inputs* (:func:`capacity_inputs`), once per
        distinct pair."""
        key = inputs[2:]
        found = self._view_amounts.get(key)
        if found is None:
            self.derived += 1
            if len(self._view_amounts) >= self.limit:
                self._view_amounts.clear()
            node = _node_of(inputs)
            found = self._view_amounts[key] = _view_amounts(node.get("status"), manufacturers)
        return found


def profile_inputs(labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    """What :func:`~gpustack_operator.domain.chain.flavors.node_profiles` reads of a Node besides
    its name: its labels (the topology group is one of them), :data:`UNREAD_LABELS` left
    out."""
    return frozenset((k, v) for k, v in labels.items() if k not in UNREAD_LABELS)


def capacity_inputs(node: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[Any, ...] | None:
    """What the capacity derivation reads of *node* (*labels* are its labels): the labels
    (:data:`UNREAD_LABELS` left out), the CPU name annotation, ``status.capacity`` and
    ``status.allocatable``. Not the name: it selects the node's DRA ResourceSlices, and the
    model derives without slices. ``None`` when an amount is not a string (not as the API
    gives it): such a Node is derived on its own."""
    capacity = status_field(node, "capacity")
    allocatable = status_field(node, "allocatable")
    for value in (*capacity.values(), *allocatable.values()):
        if type(value) is not str:
            return None
    return (
        profile_inputs(labels),
        annotations_of(node).get(CPU_NAME_ANNOTATION),
        frozenset(capacity.items()),
        frozenset(allocatable.items()),
    )


def _node_of(inputs: tuple[Any, ...]) -> dict[str, Any]:
    """A Node that carries *inputs* (:func:`capacity_inputs`) and nothing else."""
    labels, cpu_name, capacity, allocatable = inputs
    return {
        "metadata": {
            "labels": dict(labels),
            "annotations": {} if cpu_name is None else {CPU_NAME_ANNOTATION: cpu_name},
        },
        "status": {"capacity": dict(capacity), "allocatable": dict(allocatable)},
    }


def _capacity_of(node: Mapping[str, Any], manufacturers: Mapping[str, Manufacturer]) -> _Capacity:
    """The capacity labels the worker publishes for *node* (no DRA slices, interned) and its
    unpooled devices."""
    capacity, derived = capacity_labels_and_devices(
        node, manufacturers, ram_gi_per_cpu=WORKER_RAM_GI_PER_CPU
    )
    intern = sys.intern
    labels = {intern(k): intern(v) for k, v in capacity.items()}
    return labels, counted_diagnostics(derived.diagnostics, status_field(node, "allocatable"))


def node_model(
    node: Mapping[str, Any], settings: ModelSettings, derivations: Derivations | None = None
) -> NodeModel:
    """The model of *node* under *settings*; *derivations* (kept for these settings) reuses
    the capacity labels and profiles of an earlier Node with the same inputs."""
    BUILT[0] += 1
    meta = metadata(node)
    version = meta.get("resourceVersion")
    labels = labels_of(node)
    name = name_of(node)
    deleting = is_deleting(node)
    inputs = capacity_inputs(node, labels) if derivations is not None else None
    label_inputs = inputs[0] if inputs is not None else None
    if derivations is None:
        profiles = tuple(node_profiles(node, settings.manufacturers))
    else:
        if label_inputs is None:
            label_inputs = profile_inputs(labels)
        profiles = tuple(
            replace(p, node=name)
            for p in derivations.profiles(label_inputs, settings.manufacturers)
        )
    capacity: dict[str, str] = {}
    unpooled: tuple[tuple[Diagnostic, int], ...] = ()
    if settings.capacity:
        if derivations is None or inputs is None:
            capacity, unpooled = _capacity_of(node, settings.manufacturers)
        else:
            capacity, unpooled = derivations.capacity(inputs, settings.manufacturers)
    if settings.capacity and settings.topology is not None:
        intern = sys.intern
        capacity = {
            **capacity,
            **{
                intern(k): intern(v)
                for k, v in topology_labels(node, settings.topology, settings.tolerations).items()
            },
        }
    awaits = (
        settings.capacity
        and settings.publishes_labels
        and not deleting
        and can_publish_for(name)
        and any(labels.get(k) != v for k, v in capacity.items())
    )
    taints = dedication_taints(node)
    return NodeModel(
        name=name,
        uid=uid_of(node),
        version=version if isinstance(version, str) else "",
        managed=is_managed(node),
        deleting=deleting,
        view=node_view(
            node,
            settings.manufacturers,
            settings.topology,
            labels,
            taints,
            selected=None
            if derivations is None or label_inputs is None
            else derivations.view_labels(label_inputs, labels, settings.topology),
            amounts=None
            if derivations is None or inputs is None
            else derivations.view_amounts(inputs, settings.manufacturers),
        ),
        profiles=profiles,
        names={part: tuple(sorted({getattr(p, part) for p in profiles} - {""})) for part in PARTS},
        capacity_labels=capacity,
        awaits_labels=awaits,
        dedication_taints=taints,
        group=node_group(node),
        missing_level=missing_level(node, settings.topology) if settings.topology else "",
        published=agent_manufacturers(labels, settings.manufacturers),
        unpooled=unpooled,
        node=node,
    )


def node_view(
    node: Mapping[str, Any],
    manufacturers: Mapping[str, Manufacturer],
    topology: TopologyPolicy | None = None,
    labels: Mapping[str, str] | None = None,
    taints: frozenset[tuple[str, str, str]] | None = None,
    *,
    selected: tuple[tuple[str, str], ...] | None = None,
    amounts: tuple[tuple[str, str, str], ...] | None = None,
) -> tuple[Any, ...]:
    """Everything about a Node that the worker's output depends on, as a comparable value.

    Two versions of a Node with the same view produce the same NodeFeature, flavors, queues
    and notes: an update that leaves it unchanged (a heartbeat, a condition, an image) is
    filtered out before it reaches a work queue. *selected* and *amounts*, when given, are
    its label selection and device amounts as :class:`Derivations` keeps them.
    """
    meta = metadata(node)
    if selected is None:
        selected = _selected_labels(
            (labels_of(node) if labels is None else labels).items(), topology
        )
    raw_annotations = meta.get("annotations")
    annotations = tuple(
        sorted(
            (k, str(v))
            for k, v in (raw_annotations if isinstance(raw_annotations, Mapping) else {}).items()
            if isinstance(k, str)
            and (k.startswith(CPU_ANNOTATION_PREFIX) or k in _NODE_ANNOTATIONS)
        )
    )
    if amounts is None:
        amounts = _view_amounts(node.get("status"), manufacturers)
    return (
        uid_of(node),
        bool(meta.get("deletionTimestamp")),
        selected,
        annotations,
        amounts,
        tuple(sorted(dedication_taints(node) if taints is None else taints)),
        availability_inputs(node),
    )


def _selects(key: str, topology: TopologyPolicy | None) -> bool:
    """A label the view holds: one that can move a profile, a flavor, a queue or a note."""
    return (
        key in _NODE_LABELS
        or key.startswith(_NODE_LABEL_PREFIXES)
        or (topology is not None and is_level_label(key, topology))
    )


def _selected_labels(
    pairs: Iterable[tuple[str, str]], topology: TopologyPolicy | None
) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in pairs if _selects(k, topology)))


def _view_amounts(status: Any, manufacturers: Mapping[str, Manufacturer]) -> tuple[Any, ...]:
    """The host and device amounts of ``status.capacity`` and ``status.allocatable``."""
    resources = set(HOST_RESOURCES) | {m.resource_name for m in manufacturers.values()}
    amounts: list[tuple[str, str, str]] = []
    if isinstance(status, Mapping):
        for section in ("capacity", "allocatable"):
            values = status.get(section)
            if isinstance(values, Mapping):
                amounts.extend(
                    (section, r, str(values[r]))
                    for r in sorted(k for k in values if isinstance(k, str))
                    if r in resources or r.startswith(VENDOR_RESOURCE_PREFIXES)
                )
    return tuple(amounts)
