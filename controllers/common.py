"""What the worker's reconcilers share: the Node view they watch, the "already applied?"
comparison, and ownership-aware writes.

None of it knows about a particular Kueue kind; each reconciler module stays a thin
"read the cache, call the domain, apply the difference" function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import structlog

from gpustack_operator.domain.labels import (
    ACCELERATABLE_PREFIX,
    ARCH_LABEL,
    CPU_ANNOTATION_PREFIX,
    FEATURE_PREFIX,
    GENERAL_PREFIX,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NFD_CPU_FAMILY_LABEL,
    NFD_CPU_ID_LABEL,
    NFD_CPU_VENDOR_LABEL,
    NOTE_PREFIX,
    OS_LABEL,
    RESOURCE_PREFIX,
    SCHEDULE_PREFIX,
    SYSTEM_PREFIX,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.nodeview import labels_of, metadata, name_of, uid_of
from gpustack_operator.domain.queues import HOST_RESOURCES
from gpustack_operator.runtime.cache import strip_managed_fields
from gpustack_operator.runtime.client import Client, Conflict, NotFound
from gpustack_operator.runtime.controller import Controller, EventRecorderLike
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.predicates import Predicate
from gpustack_operator.runtime.resources import Resource

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
# Node labels whose change can move a capacity profile, a flavor, a queue or its notes.
_NODE_LABEL_PREFIXES: Final = (
    SYSTEM_PREFIX,
    FEATURE_PREFIX,
    GENERAL_PREFIX,
    ACCELERATABLE_PREFIX,
)
_NODE_LABELS: Final = frozenset(
    {NFD_CPU_VENDOR_LABEL, NFD_CPU_FAMILY_LABEL, NFD_CPU_ID_LABEL, OS_LABEL, ARCH_LABEL}
)
# Annotations and labels the worker manages on Kueue objects: compared exactly, so a note
# that is no longer desired is noticed (server-side apply then removes it).
_OWN_METADATA_PREFIXES: Final = (NOTE_PREFIX, SCHEDULE_PREFIX, RESOURCE_PREFIX)


# --- the Node view ------------------------------------------------------------------------------


def trim_for_worker(obj: JSON) -> JSON:
    """Informer transform: managedFields always; for Nodes, everything the worker never reads.

    A Node's status carries images, conditions, addresses and volume lists that dwarf the
    rest; the worker reads only labels, annotations, ``status.capacity`` and
    ``status.allocatable``. Other kinds keep everything (ClusterQueue status holds the
    reservations the deletion rule reads).
    """
    obj = strip_managed_fields(obj)
    if obj.get("kind") != "Node" or obj.get("apiVersion") != "v1":
        return obj
    status = obj.get("status")
    trimmed: JSON = {k: v for k, v in obj.items() if k not in ("status", "spec")}
    if isinstance(status, Mapping):
        trimmed["status"] = {
            k: status[k] for k in ("capacity", "allocatable") if isinstance(status.get(k), Mapping)
        }
    spec = obj.get("spec")
    if isinstance(spec, Mapping) and "taints" in spec:
        trimmed["spec"] = {"taints": spec["taints"]}
    return trimmed


def node_view(
    node: Mapping[str, Any], manufacturers: Mapping[str, Manufacturer]
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
            if k in _NODE_LABELS or k.startswith(_NODE_LABEL_PREFIXES)
        )
    )
    raw_annotations = meta.get("annotations")
    annotations = tuple(
        sorted(
            (k, str(v))
            for k, v in (raw_annotations if isinstance(raw_annotations, Mapping) else {}).items()
            if isinstance(k, str) and k.startswith(CPU_ANNOTATION_PREFIX)
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
                    (section, r, str(values[r])) for r in sorted(resources) if r in values
                )
    return (
        uid_of(node),
        bool(meta.get("deletionTimestamp")),
        labels,
        annotations,
        tuple(amounts),
    )


class NodeChanged(Predicate):
    """Passes creates and deletes, and updates that change :func:`node_view`."""

    def __init__(self, manufacturers: Mapping[str, Manufacturer]) -> None:
        self._manufacturers = manufacturers

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return node_view(old, self._manufacturers) != node_view(new, self._manufacturers)

    def __repr__(self) -> str:
        return "NodeChanged()"


class MetadataOrSpecChanged(Predicate):
    """Updates that change what the worker manages on its own objects: spec (generation for
    kinds that have one), labels, annotations, owner references or deletion; status-only
    writes (Kueue's) pass only through *also*."""

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        a, b = metadata(old), metadata(new)
        return (
            old.get("spec") != new.get("spec")
            or a.get("labels") != b.get("labels")
            or a.get("annotations") != b.get("annotations")
            or a.get("ownerReferences") != b.get("ownerReferences")
            or a.get("deletionTimestamp") != b.get("deletionTimestamp")
            or a.get("uid") != b.get("uid")
        )

    def __repr__(self) -> str:
        return "MetadataOrSpecChanged()"


METADATA_OR_SPEC_CHANGED: Final = MetadataOrSpecChanged()


# --- "is it already applied?" -------------------------------------------------------------------


def is_managed_object(obj: object) -> bool:
    """Carries ``app.kubernetes.io/managed-by: gpustack-operator`` (SPEC §0.8)."""
    return labels_of(obj).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE


def _contains(have: object, want: object) -> bool:
    """*want* is found in *have*: maps may hold more keys (server defaults), lists match
    item by item, scalars are equal."""
    if isinstance(want, Mapping):
        if not isinstance(have, Mapping):
            return False
        return all(k in have and _contains(have[k], v) for k, v in want.items())
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return False
        return all(_contains(h, w) for h, w in zip(have, want, strict=True))
    return have == want


def _owned_part(values: object, want: Mapping[str, str]) -> dict[str, str]:
    present = values if isinstance(values, Mapping) else {}
    return {
        str(k): str(v)
        for k, v in present.items()
        if k in want or str(k).startswith(_OWN_METADATA_PREFIXES)
    }


def _owners(obj: object) -> set[tuple[str, str, str, bool]]:
    refs = metadata(obj).get("ownerReferences")
    return {
        (str(r.get("kind")), str(r.get("name")), str(r.get("uid")), bool(r.get("controller")))
        for r in (refs if isinstance(refs, list) else [])
        if isinstance(r, Mapping)
    }


def is_up_to_date(have: Mapping[str, Any] | None, want: Mapping[str, Any]) -> bool:
    """Whether the cached object already says everything the desired one says.

    Compared: the labels and annotations the worker sets (its ``note.``, ``schedule.`` and
    ``resource.gpustack.ai/`` keys exactly, so a dropped note counts as a difference), the
    owner references, and the spec. The spec may hold more than desired (API-server
    defaults), except ``spec.labels`` and ``spec.nodeLabels``, maps the worker owns whole.
    """
    if have is None:
        return False
    want_meta, have_meta = metadata(want), metadata(have)
    for field in ("labels", "annotations"):
        wanted = want_meta.get(field)
        wanted = wanted if isinstance(wanted, Mapping) else {}
        if _owned_part(have_meta.get(field), wanted) != dict(wanted):
            return False
    if not _owners(want) <= _owners(have):
        return False
    want_spec, have_spec = want.get("spec") or {}, have.get("spec") or {}
    if not isinstance(have_spec, Mapping) or not _contains(have_spec, want_spec):
        return False
    return all(have_spec.get(k) == want_spec[k] for k in ("labels", "nodeLabels") if k in want_spec)


# --- writes ---------------------------------------------------------------------------------------


class Writer:
    """Server-side apply and guarded deletes as one field manager, with an Event per write."""

    def __init__(
        self, client: Client, field_manager: str, recorder: EventRecorderLike | None
    ) -> None:
        self.client = client
        self.field_manager = field_manager
        self.recorder = recorder

    async def apply(self, resource: Resource, want: JSON, *, existed: bool) -> JSON:
        """Apply *want* (fields the worker owns, so ``force``) and log what happened."""
        result = await self.client.apply(
            resource, want, field_manager=self.field_manager, force=True
        )
        log.info(
            "updated" if existed else "created",
            kind=resource.kind,
            name=name_of(want),
            namespace=metadata(want).get("namespace"),
        )
        return result

    async def delete(self, resource: Resource, obj: Mapping[str, Any], reason: str) -> bool:
        """Delete *obj* if it is still the object the cache saw (uid precondition).

        Only objects carrying the managed-by label are deleted; anything else is a bug in the
        caller and refused. Returns False when it was already gone or replaced.
        """
        if not is_managed_object(obj):
            raise RuntimeError(f"refusing to delete {resource.kind} {name_of(obj)}: not ours")
        meta = metadata(obj)
        namespace = meta.get("namespace") if resource.namespaced else None
        try:
            await self.client.delete(
                resource, name_of(obj), namespace, preconditions={"uid": uid_of(obj)}
            )
        except (NotFound, Conflict):
            return False
        log.info("deleted", kind=resource.kind, name=name_of(obj), namespace=namespace, why=reason)
        return True

    def not_ours(self, resource: Resource, obj: Mapping[str, Any]) -> None:
        """Report (log + Warning Event) an object of the desired name that a person made."""
        message = (
            f"{resource.kind} {name_of(obj)} exists without the label "
            f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}: gpustack-operator leaves it alone. Delete "
            "or rename it to let the operator manage this name."
        )
        log.warning(
            "object not managed by gpustack-operator; left alone",
            kind=resource.kind,
            name=name_of(obj),
        )
        if self.recorder is not None:
            self.recorder.event(obj, "Warning", "NotManaged", message, resource=resource)


def index_values(values: Iterable[str]) -> list[str]:
    """De-duplicated, non-empty index values."""
    return sorted({v for v in values if v})


# --- batched event handling -----------------------------------------------------------------------


class BatchedEnqueue:
    """Informer event handler: filter, map to keys, add them after a batching window.

    Kin to the reference's dedup windows: a burst of Node or flavor events (a fleet joining,
    NFD relabelling every node) enqueues each affected key once, at the first event plus
    *window*, instead of reconciling (and rewriting) a queue once per node. Synchronous and
    O(1) per key, like the runtime's own handlers; a failing map function is logged.
    """

    def __init__(
        self,
        controller: Controller,
        map_fn: Callable[[JSON], Iterable[str]],
        predicate: Predicate,
        window: float,
        *,
        deletes_at_once: bool = False,
    ) -> None:
        self._controller = controller
        self._map = map_fn
        self._predicate = predicate
        self._window = window
        self._deletes_at_once = deletes_at_once

    def _enqueue(self, *objs: JSON, window: float | None = None) -> None:
        delay = self._window if window is None else window
        for obj in objs:
            try:
                keys = list(self._map(obj))
            except Exception:
                log.exception("event mapping failed; event dropped", name=name_of(obj))
                continue
            for key in keys:
                self._controller.queue.add_after(key, delay)

    def on_add(self, obj: JSON) -> None:
        if self._predicate.create(obj):
            self._enqueue(obj)

    def on_update(self, old: JSON, new: JSON) -> None:
        if self._predicate.update(old, new):
            self._enqueue(old, new)

    def on_delete(self, obj: JSON) -> None:
        if self._predicate.delete(obj):
            self._enqueue(obj, window=0.0 if self._deletes_at_once else None)


def watch_batched(
    controller: Controller,
    informer: Informer,
    map_fn: Callable[[JSON], Iterable[str]],
    predicate: Predicate,
    window: float,
    *,
    deletes_at_once: bool = False,
) -> None:
    """Register a :class:`BatchedEnqueue` of *controller* on *informer* (*deletes_at_once*:
    delete events skip the window)."""
    informer.add_event_handler(
        BatchedEnqueue(controller, map_fn, predicate, window, deletes_at_once=deletes_at_once)
    )
