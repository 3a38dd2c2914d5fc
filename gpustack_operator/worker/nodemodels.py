"""The worker's one store of node models: one :class:`NodeModel` per Node version.

Every Node event reaches the capacity controller, the queue controllers and the unpooled
report, each with a predicate (the Node's view), an event mapping (its flavor, queue or
cohort names) and the Node indexes; every flavor and cohort reconcile needs the profiles of
a node, every queue reconcile its lifecycle, and the capacity reconciler and the
``awaiting-labels`` index its capacity labels. :class:`NodeModels` builds the model
(``domain.nodemodel.node_model``) once per Node version, when the informer files the event,
and every one of them reads it. Without it the work per event grows with the number of
controllers and per reconcile with the number of nodes of a profile.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.nodedevices import NodeDevices
from gpustack_operator.domain.node.nodemodel import (
    Derivations,
    ModelSettings,
    NodeModel,
    Part,
    node_model,
)
from gpustack_operator.domain.node.nodeprofiles import Profile, node_profiles
from gpustack_operator.domain.node.nodetopology import TopologyPolicy
from gpustack_operator.domain.node.taints import TolerationPolicy
from gpustack_operator.domain.nodeview import metadata

__all__ = ["NodeModels", "Part", "PoolClaims"]


class PoolClaims(Protocol):
    """Which declared pool selects a node (``controllers.declaredpool.PoolRegistry``)."""

    version: int

    def claim(self, node: object) -> str: ...


_MIN_GENERATION: Final = 1024
_VERSIONS: Final = 2
_MIN_SHARED: Final = 4096
_MAP: Final = object()
"""Marks a mapping's items in the shared table (a mapping is not hashable itself)."""


@dataclass
class _Entry:
    node: Mapping[str, Any]
    """The version this model is of (kept to confirm a hit by equality)."""
    model: NodeModel
    pools: int = -1
    """The declared pools' version :attr:`profiles` was claimed under (-1: not yet)."""
    profiles: tuple[Profile, ...] = ()
    """The model's profiles, or none when a declared pool claims the node."""
    view: tuple[Any, ...] | None = None
    """The model's view with the pool claim."""


class NodeModels:
    """The worker's node models, one per Node version, shared by every Node-watching
    controller.

    Keyed by uid, holding that Node's last two versions (resourceVersion): an update event
    compares the old version with the new one, and anything older is not asked for again.
    Each entry keeps the Node object it was built from, and a hit is confirmed by identity
    or equality with it, so a hand-made object reusing a version is never mistaken for
    another; two versions per Node bound what that keeps alive. Nodes without uid or
    resourceVersion (manifests from a file) are built every time. Deleted Nodes drop out
    through two generations of uids: when the current one outgrows the larger of 1,024 and
    twice *size_hint()* (the number of Nodes in the cache), it becomes the previous one, and
    uids still in use are carried over on their next lookup. :attr:`built` counts the
    models built.

    Every controller's predicate, mapping and index asks about the same cached object, one
    question at a time (dozens per Node version), so a lookup first tries the object's
    identity: the entry it was built from or confirmed with, held alive by the entry (so its
    ``id`` cannot be reused while it is filed). That is the hit the uid and version path
    would give, without reading the metadata.
    """

    def __init__(
        self,
        manufacturers: Mapping[str, Manufacturer],
        size_hint: Callable[[], int] | None = None,
        publishes_labels: bool = True,
        topology: TopologyPolicy | None = None,
        tolerations: TolerationPolicy = None,
    ) -> None:
        self.settings = ModelSettings(manufacturers, topology, tolerations, publishes_labels)
        self._size_hint = size_hint
        # uid -> [(resourceVersion, entry)], at most _VERSIONS, the most recent last
        self._current: dict[str, list[tuple[str, _Entry]]] = {}
        self._previous: dict[str, list[tuple[str, _Entry]]] = {}
        # id(object) -> the entry of that very object (entry.node is it), for every entry
        # filed above: the lookup without reading the object's metadata
        self._ids: dict[int, _Entry] = {}
        # equal parts of different models, one copy each (_shared_parts)
        self._shared: dict[Any, Any] = {}
        # the last view comparison: (old, new, the pools' version, changed)
        self._last_change: tuple[Mapping[str, Any], Mapping[str, Any], int, bool] | None = None
        self.built = 0
        """How many models this store has built (one per Node version it was asked about)."""
        self.derivations = Derivations()
        """The capacity labels and profiles, derived once per distinct input for all
        models (a fleet's Nodes of one shape share them)."""
        self.pools: PoolClaims | None = None
        """The declared pools (docs/autoscaling.md): a node one of them selects has no
        profiles of its own; it feeds the pool's flavor."""

    @property
    def manufacturers(self) -> Mapping[str, Manufacturer]:
        return self.settings.manufacturers

    @property
    def topology(self) -> TopologyPolicy | None:
        """TAS settings the topology label follows (docs/topology.md); ``None``: off."""
        return self.settings.topology

    @property
    def tolerations(self) -> TolerationPolicy:
        return self.settings.tolerations

    @property
    def publishes_labels(self) -> bool:
        return self.settings.publishes_labels

    def _build(self, node: Mapping[str, Any]) -> _Entry:
        self.built += 1
        return _Entry(node, self._shared_parts(node_model(node, self.settings, self.derivations)))

    def _shared_parts(self, model: NodeModel) -> NodeModel:
        """*model* with its parts that equal another model's replaced by that model's: nodes
        of one shape have equal label pairs in their views (all but the hostname), capacity
        labels, names and (mostly empty) taint and manufacturer sets, each built afresh per
        Node version. Equal values, so
        the chain reads the same; the shared table is dropped now and then (when it outgrows
        the larger of 4,096 and four times the Node count), so it stays bounded."""
        table = self._shared
        hint = self._size_hint() if self._size_hint is not None else 0
        if len(table) > max(_MIN_SHARED, 4 * hint):
            table.clear()

        def share(value: Any) -> Any:
            try:
                return table.setdefault(value, value)
            except TypeError:  # unhashable (a list in a hand-made Node): kept as it is
                return value

        def share_map(mapping: Mapping[Any, Any]) -> Any:
            try:
                return table.setdefault((_MAP, *mapping.items()), mapping)
            except TypeError:
                return mapping

        view = model.view
        if len(view) > 2:
            # the selected labels: their pairs are shared, the tuple holds the node's hostname
            selected = view[2]
            if type(selected) is tuple:
                selected = share(tuple(map(share, selected)))
            view = (*view[:2], selected, *map(share, view[3:]))
        return replace(
            model,
            view=view,
            names=share_map({part: tuple(map(sys.intern, n)) for part, n in model.names.items()}),
            capacity_labels=share_map(model.capacity_labels),
            dedication_taints=share(model.dedication_taints),
            published=share(model.published),
            unpooled=share(model.unpooled),
        )

    def _entry(self, node: Mapping[str, Any]) -> _Entry:
        entry = self._ids.get(id(node))
        if entry is not None and entry.node is node:
            filed = entry.model.uid
            if filed not in self._current:
                self._remember(filed, self._previous.pop(filed, []))
            return self._claimed(entry)
        meta = metadata(node)
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not isinstance(uid, str) or not isinstance(version, str) or not uid or not version:
            return self._claimed(self._build(node))
        versions = self._current.get(uid)
        if versions is None:
            versions = self._previous.pop(uid, None)
            if versions is None:
                versions = []
            self._remember(uid, versions)
        for known, entry in versions:
            if known == version and (entry.node is node or entry.node == node):
                if entry.node is not node:  # the same version decoded again (a re-LIST)
                    self._forget(entry)
                    entry.node = node
                    self._ids[id(node)] = entry
                return self._claimed(entry)
        entry = self._build(node)
        if len(versions) >= _VERSIONS:
            self._forget(versions.pop(0)[1])
        versions.append((version, entry))
        self._ids[id(node)] = entry
        return self._claimed(entry)

    def _forget(self, entry: _Entry) -> None:
        if self._ids.get(id(entry.node)) is entry:
            del self._ids[id(entry.node)]

    def release(self, node: Mapping[str, Any], replaced_by: Mapping[str, Any] | None) -> None:
        """*node* left the Node cache and every handler has seen it
        (``Informer.on_released``): forget its model, so that a Node's previous version and
        its model are not kept alive beside the current ones. *replaced_by* (the object now
        cached) takes the entry over when it is the same version decoded again (a re-LIST)."""
        entry = self._ids.get(id(node))
        if entry is None or entry.node is not node:
            return
        self._forget(entry)
        uid, version = entry.model.uid, entry.model.version
        if replaced_by is not None and version:
            meta = metadata(replaced_by)
            if meta.get("uid") == uid and meta.get("resourceVersion") == version:
                entry.node = replaced_by
                self._ids[id(replaced_by)] = entry
                return
        for table in (self._current, self._previous):
            versions = table.get(uid)
            if versions is not None:
                versions[:] = [(v, e) for v, e in versions if e is not entry]

    def _claimed(self, entry: _Entry) -> _Entry:
        """*entry* with the declared pools' claim of its node applied (again after the
        pools changed)."""
        pools = self.pools.version if self.pools is not None else 0
        if entry.pools != pools:
            claim = self.pools.claim(entry.node) if self.pools is not None and pools else ""
            entry.pools = pools
            entry.profiles = () if claim else entry.model.profiles
            entry.view = (*entry.model.view, claim) if pools else entry.model.view
        return entry

    def _remember(self, uid: str, versions: list[tuple[str, _Entry]]) -> None:
        hint = self._size_hint() if self._size_hint is not None else 0
        if len(self._current) >= max(_MIN_GENERATION, 2 * hint):
            for dropped in self._previous.values():
                for _, entry in dropped:
                    self._forget(entry)
            self._previous, self._current = self._current, {}
        self._current[uid] = versions

    def model(self, node: Mapping[str, Any]) -> NodeModel:
        """The model of *node* (this version's)."""
        return self._entry(node).model

    def view(self, node: Mapping[str, Any]) -> tuple[Any, ...]:
        """The model's view, with the declared pool that claims the node, if any."""
        view = self._entry(node).view
        assert view is not None  # set by _claimed
        return view

    def view_changed(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """Whether *new*'s view differs from *old*'s (``NodeChanged``). Every Node-watching
        controller asks it of each Node update in turn, so the last answer is kept for the
        pair of objects (held alive meanwhile, so identity is theirs) and the pools' version
        it was given under."""
        pools = self.pools.version if self.pools is not None else 0
        last = self._last_change
        if last is not None and last[0] is old and last[1] is new and last[2] == pools:
            return last[3]
        changed = self.view(old) != self.view(new)
        self._last_change = (old, new, pools, changed)
        return changed

    def profiles(self, node: object) -> tuple[Profile, ...]:
        """The node's profiles (whether managed or not); none when a declared pool claims it."""
        if not isinstance(node, Mapping):
            return tuple(node_profiles(node, self.manufacturers))
        return self._entry(node).profiles

    def names(self, node: Mapping[str, Any], part: Part) -> list[str]:
        """The flavor/queue/cohort names (*part*) of *node*'s profiles, managed or not.

        Event mapping uses this: a node relabelled unmanaged or being deleted must still
        reach the objects it used to count for. Returns a new list.
        """
        entry = self._entry(node)
        if entry.profiles is entry.model.profiles:
            return list(entry.model.names[part])
        return sorted({getattr(p, part) for p in entry.profiles} - {""})

    def index_names(self, node: Mapping[str, Any], part: Part) -> list[str]:
        """What the Node indexes file *node* under: its names when managed, else none
        (``domain.nodeprofiles.node_profile_names``)."""
        entry = self._entry(node)
        return self.names(node, part) if entry.model.managed else []

    def devices(self, node: object) -> NodeDevices:
        """The model's device amounts (``domain.node.nodedevices.DevicesOf``)."""
        if not isinstance(node, Mapping):
            raise TypeError(f"not a Node: {type(node).__name__}")
        return self._entry(node).model.devices

    def capacity_labels(self, node: Mapping[str, Any]) -> Mapping[str, str]:
        """The model's capacity labels (without DRA slices; do not modify them)."""
        return self._entry(node).model.capacity_labels

    def awaits_labels(self, node: Mapping[str, Any]) -> bool:
        """Whether *node* does not carry the capacity labels the worker publishes for it yet
        (its NodeFeature is still to be written, or NFD has not merged it): the node's
        profiles, and so the quotas of its queues, are about to change."""
        return self._entry(node).model.awaits_labels

    def __len__(self) -> int:
        """How many Node versions the store holds models of."""
        return sum(len(v) for v in self._current.values()) + sum(
            len(v) for v in self._previous.values()
        )
