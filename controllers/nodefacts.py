"""What the worker derives from one Node, computed once per Node version.

Every Node event reaches the capacity controller and three queue controllers, each with a
predicate (the Node's worker view), an event mapping (its flavor, queue or cohort names) and
the Node indexes; every flavor and cohort reconcile needs the profiles of a node too, and the
capacity reconciler and the ``awaiting-labels`` index need the node's capacity labels. All of
them derive the same few values from the same labels, so :class:`NodeFacts` computes them
once per Node version (uid + resourceVersion, confirmed by equality) and hands out the cached,
immutable result. Without the cache the work per event grows with the number of controllers
and per reconcile with the number of nodes of a profile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from gpustack_operator.domain.availability import availability_inputs
from gpustack_operator.domain.capacity import worker_capacity_labels
from gpustack_operator.domain.devicesources.merge import (
    VENDOR_LABEL_PREFIXES,
    VENDOR_RESOURCE_PREFIXES,
)
from gpustack_operator.domain.flavors import (
    Profile,
    TolerationPolicy,
    dedication_taints,
    is_managed,
    node_profiles,
)
from gpustack_operator.domain.labels import (
    ACCELERATABLE_PREFIX,
    ARCH_LABEL,
    CPU_ANNOTATION_PREFIX,
    FEATURE_PREFIX,
    GENERAL_PREFIX,
    NFD_CPU_FAMILY_LABEL,
    NFD_CPU_ID_LABEL,
    NFD_CPU_VENDOR_LABEL,
    OS_LABEL,
    SYSTEM_PREFIX,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.nodefeature import can_publish_for
from gpustack_operator.domain.nodeview import is_deleting, labels_of, metadata, name_of, uid_of
from gpustack_operator.domain.queues import HOST_RESOURCES
from gpustack_operator.domain.tenancy import HOST_LABELS_ANNOTATION, INSTANCE_TYPE_LABEL
from gpustack_operator.domain.topology import TopologyPolicy, is_level_label
from gpustack_operator.domain.topologylabels import topology_labels
from gpustack_operator.runtime.cache import shared_strings

Part = Literal["flavor", "queue", "cohort"]
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


class PoolClaims(Protocol):
    """Which declared pool selects a node (``controllers.declaredpool.PoolRegistry``)."""

    version: int

    def claim(self, node: object) -> str: ...


_MIN_GENERATION: Final = 1024
_VERSIONS: Final = 2


def node_view(
    node: Mapping[str, Any],
    manufacturers: Mapping[str, Manufacturer],
    topology: TopologyPolicy | None = None,
) -> tuple[Any, ...]:
    """Everything about a Node that the worker's output depends on, as a comparable value.

    Two versions of a Node with the same view produce the same NodeFeature, flavors, queues
    and notes: an update that leaves it unchanged (a heartbeat, a condition, an image) is
    filtered out before it reaches a work queue.
    """
    meta = metadata(node)
    labels = tuple(
        sorted(
            (k, v)
            for k, v in labels_of(node).items()
            if k in _NODE_LABELS
            or k.startswith(_NODE_LABEL_PREFIXES)
            or (topology is not None and is_level_label(k, topology))
        )
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
    status = node.get("status")
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
    return (
        uid_of(node),
        bool(meta.get("deletionTimestamp")),
        labels,
        annotations,
        tuple(amounts),
        tuple(sorted(dedication_taints(node))),
        availability_inputs(node),
    )


@dataclass
class _Facts:
    node: Mapping[str, Any]
    """The version these facts are of (kept to confirm a hit by equality)."""
    view: tuple[Any, ...] | None = None
    profiles: tuple[Profile, ...] | None = None
    awaits_labels: bool | None = None
    capacity_labels: Mapping[str, str] | None = None
    names: dict[str, list[str]] = field(default_factory=dict)
    pools: int = 0
    """The declared pools' version these facts were derived under."""


class NodeFacts:
    """Per-Node derived data (view, profiles, flavor/queue/cohort names), cached per version.

    Keyed by uid, holding that Node's last two versions (resourceVersion): an update event
    compares the old version with the new one, and anything older is not asked for again.
    Each entry keeps the Node object it was derived from, and a hit is confirmed by identity
    or equality with it, so a hand-made object reusing a version is never mistaken for
    another; two versions per Node bound what that keeps alive. Nodes without uid or
    resourceVersion (manifests from a file) are computed every time. Deleted Nodes drop out
    through two generations of uids: when the current one outgrows the larger of 1,024 and
    twice *size_hint()* (the number of Nodes in the cache), it becomes the previous one, and
    uids still in use are carried over on their next lookup.
    """

    def __init__(
        self,
        manufacturers: Mapping[str, Manufacturer],
        size_hint: Callable[[], int] | None = None,
        publishes_labels: bool = True,
        topology: TopologyPolicy | None = None,
        tolerations: TolerationPolicy = None,
    ) -> None:
        self.manufacturers = manufacturers
        self.topology = topology if topology is not None and topology.enabled else None
        """TAS settings the topology label follows (docs/topology.md, "Groups"); ``None``:
        off."""
        self.tolerations = tolerations
        self.publishes_labels = publishes_labels
        """False in a vCluster tenant: no capacity labels are published, none awaited."""
        self._size_hint = size_hint
        # uid -> [(resourceVersion, facts)], at most _VERSIONS, the most recent last
        self._current: dict[str, list[tuple[str, _Facts]]] = {}
        self._previous: dict[str, list[tuple[str, _Facts]]] = {}
        self.pools: PoolClaims | None = None
        """The declared pools (docs/autoscaling.md): a node one of them selects has no
        profiles of its own; it feeds the pool's flavor."""

    def _facts(self, node: Mapping[str, Any]) -> _Facts:
        meta = metadata(node)
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        pools = self.pools.version if self.pools is not None else 0
        if not isinstance(uid, str) or not isinstance(version, str) or not uid or not version:
            return _Facts(node, pools=pools)
        versions = self._current.get(uid)
        if versions is None:
            versions = self._previous.pop(uid, None)
            if versions is None:
                versions = []
            self._remember(uid, versions)
        for i, (known, facts) in enumerate(versions):
            if known == version and (facts.node is node or facts.node == node):
                if facts.pools == pools:
                    return facts
                del versions[i]  # derived before the declared pools changed
                break
        facts = _Facts(node, pools=pools)
        if len(versions) >= _VERSIONS:
            del versions[0]
        versions.append((version, facts))
        return facts

    def _remember(self, uid: str, versions: list[tuple[str, _Facts]]) -> None:
        hint = self._size_hint() if self._size_hint is not None else 0
        if len(self._current) >= max(_MIN_GENERATION, 2 * hint):
            self._previous, self._current = self._current, {}
        self._current[uid] = versions

    def view(self, node: Mapping[str, Any]) -> tuple[Any, ...]:
        """:func:`node_view` of *node*."""
        facts = self._facts(node)
        if facts.view is None:
            facts.view = node_view(node, self.manufacturers, self.topology)
            if self.pools is not None and self.pools.version:
                facts.view = (*facts.view, self.pools.claim(node))
        return facts.view

    def profiles(self, node: object) -> tuple[Profile, ...]:
        """``node_profiles`` of *node* (whether managed or not)."""
        if not isinstance(node, Mapping):
            return tuple(node_profiles(node, self.manufacturers))
        facts = self._facts(node)
        if facts.profiles is None:
            if self.pools is not None and self.pools.version and self.pools.claim(node):
                facts.profiles = ()
            else:
                facts.profiles = tuple(node_profiles(node, self.manufacturers))
        return facts.profiles

    def names(self, node: Mapping[str, Any], part: Part) -> list[str]:
        """The flavor/queue/cohort names (*part*) of *node*'s profiles, managed or not.

        Event mapping uses this: a node relabelled unmanaged or being deleted must still
        reach the objects it used to count for. Returns a new list.
        """
        facts = self._facts(node)
        names = facts.names.get(part)
        if names is None:
            names = sorted({getattr(p, part) for p in self.profiles(node)} - {""})
            facts.names[part] = names
        return list(names)

    def index_names(self, node: Mapping[str, Any], part: Part) -> list[str]:
        """What the Node indexes file *node* under: its names when managed, else none
        (``domain.flavors.node_profile_names``)."""
        return self.names(node, part) if is_managed(node) else []

    def capacity_labels(self, node: Mapping[str, Any]) -> Mapping[str, str]:
        """``worker_capacity_labels`` of *node* without DRA slices (do not modify it).

        The ``awaiting-labels`` index, the capacity reconciler and its resyncs all ask for
        the same version's labels; deriving them is the worker's largest per-node cost."""
        facts = self._facts(node)
        if facts.capacity_labels is None:
            # Interned: tens of labels per Node, the same keys and mostly the same values.
            labels = worker_capacity_labels(node, self.manufacturers)
            if self.topology is not None:
                labels = {**labels, **topology_labels(node, self.topology, self.tolerations)}
            facts.capacity_labels = shared_strings(labels)
        return facts.capacity_labels

    def awaits_labels(self, node: Mapping[str, Any]) -> bool:
        """Whether *node* does not carry the capacity labels the worker publishes for it yet
        (its NodeFeature is still to be written, or NFD has not merged it): the node's
        profiles, and so the quotas of its queues, are about to change."""
        facts = self._facts(node)
        if facts.awaits_labels is None:
            if not self.publishes_labels or is_deleting(node) or not can_publish_for(name_of(node)):
                facts.awaits_labels = False
            else:
                labels = labels_of(node)
                facts.awaits_labels = any(
                    labels.get(k) != v for k, v in self.capacity_labels(node).items()
                )
        return facts.awaits_labels

    def __len__(self) -> int:
        """How many Node versions the cache holds facts of."""
        return sum(len(v) for v in self._current.values()) + sum(
            len(v) for v in self._previous.values()
        )
