"""What the worker's reconcilers share: the Node view they watch, the "already applied?"
comparison, and ownership-aware writes.

None of it knows about a particular Kueue kind; each reconciler module stays a thin
"read the cache, call the domain, apply the difference" function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import structlog

from gpustack_operator.domain.chain.kueue import ClusterQueue, Cohort, LocalQueue, ResourceFlavor
from gpustack_operator.domain.comparison import ObjectComparison
from gpustack_operator.domain.comparison import contains as contains
from gpustack_operator.domain.labels import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    NOTE_PREFIX,
    RESOURCE_PREFIX,
    SCHEDULE_PREFIX,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.nodefeature import NODE_FEATURE_COMPARISON, NODE_FEATURE_KIND
from gpustack_operator.domain.nodeview import labels_of, metadata, name_of, uid_of
from gpustack_operator.runtime.cache import compact, strip_managed_fields
from gpustack_operator.runtime.client import Client, Conflict, NotFound
from gpustack_operator.runtime.controller import (
    EventRecorderLike,
)
from gpustack_operator.runtime.fence import WriteFence
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.jsondecode import dumps
from gpustack_operator.runtime.predicates import Predicate
from gpustack_operator.runtime.resources import Resource
from gpustack_operator.worker.nodemodels import NodeModels

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
# Annotations and labels the worker manages on Kueue objects: compared exactly, so a note
# that is no longer desired is noticed (server-side apply then removes it).
_OWN_METADATA_PREFIXES: Final = (NOTE_PREFIX, SCHEDULE_PREFIX, RESOURCE_PREFIX)


# --- the Node view ------------------------------------------------------------------------------


def trim_for_worker(obj: JSON) -> JSON:
    """Informer transform: managedFields always; for Nodes, everything the worker never reads;
    what is kept, with its strings interned (:func:`~gpustack_operator.runtime.cache.compact`).

    A Node's status carries images, conditions, addresses and volume lists that dwarf the
    rest; the worker reads only labels, annotations, ``status.capacity``,
    ``status.allocatable``, the Ready condition, taints and ``spec.unschedulable``. Other
    kinds keep everything (ClusterQueue status holds the reservations the deletion rule
    reads). No reader of the worker's caches reads ``managedFields`` (label repair reads
    the NodeFeature's labels, ownership checks the owner references and the managed-by
    label).
    """
    return compact(_trimmed(strip_managed_fields(obj, intern=False)))


def _trimmed(obj: JSON) -> JSON:
    if obj.get("kind") != "Node" or obj.get("apiVersion") != "v1":
        return obj
    status = obj.get("status")
    trimmed: JSON = {k: v for k, v in obj.items() if k not in ("status", "spec")}
    if isinstance(status, Mapping):
        trimmed["status"] = {
            k: status[k] for k in ("capacity", "allocatable") if isinstance(status.get(k), Mapping)
        }
        # The availability rule (docs/node-lifecycle.md) reads Ready's status and since when;
        # heartbeats and the other conditions are left out. A Node reporting no conditions
        # keeps none, one reporting others keeps an empty list.
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            trimmed["status"]["conditions"] = [
                {k: c[k] for k in ("type", "status", "lastTransitionTime") if k in c}
                for c in conditions
                if isinstance(c, Mapping) and c.get("type") == "Ready"
            ]
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        kept = {k: spec[k] for k in ("taints", "unschedulable") if k in spec}
        if kept:
            trimmed["spec"] = kept
    return trimmed


class NodeChanged(Predicate):
    """Passes creates and deletes, and updates that change :func:`node_view`.

    Given :class:`NodeModels` (the worker's shared one), the views come from its cache; given
    the manufacturers alone, it keeps a cache of its own.
    """

    def __init__(self, facts: NodeModels | Mapping[str, Manufacturer]) -> None:
        self._facts = facts if isinstance(facts, NodeModels) else NodeModels(facts)

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return self._facts.view_changed(old, new)

    def __repr__(self) -> str:
        return "NodeChanged()"


class MetadataOrSpecChanged(Predicate):
    """Updates that change what the worker manages on its own objects: the body (``spec``,
    a ConfigMap's ``data``, a role's ``rules``: everything but ``status`` and ``metadata``),
    labels, annotations, owner references or deletion; status-only writes (Kueue's, a
    DaemonSet's rollout) and bookkeeping (resourceVersion, managedFields) pass only through
    *also*."""

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        a, b = metadata(old), metadata(new)
        return (
            _body(old) != _body(new)
            or a.get("labels") != b.get("labels")
            or a.get("annotations") != b.get("annotations")
            or a.get("ownerReferences") != b.get("ownerReferences")
            or a.get("deletionTimestamp") != b.get("deletionTimestamp")
            or a.get("uid") != b.get("uid")
        )

    def __repr__(self) -> str:
        return "MetadataOrSpecChanged()"


METADATA_OR_SPEC_CHANGED: Final = MetadataOrSpecChanged()


def _body(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


# --- "is it already applied?" -------------------------------------------------------------------


def is_managed_object(obj: object) -> bool:
    """Carries ``app.kubernetes.io/managed-by: gpustack-operator`` (docs/worker.md)."""
    return labels_of(obj).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE


_COMPARISONS: Final[Mapping[str, ObjectComparison]] = {
    "ResourceFlavor": ResourceFlavor.COMPARISON,
    "Cohort": Cohort.COMPARISON,
    "ClusterQueue": ClusterQueue.COMPARISON,
    "LocalQueue": LocalQueue.COMPARISON,
    NODE_FEATURE_KIND: NODE_FEATURE_COMPARISON,
}


def comparison_for(want: Mapping[str, Any]) -> ObjectComparison:
    """How the fields of *want*'s kind are compared, as declared beside its definition."""
    kind = str(want.get("kind"))
    try:
        return _COMPARISONS[kind]
    except KeyError:
        raise LookupError(
            f"no field comparison is declared for kind {kind}: declare one beside its "
            "definition (domain/comparison.py) and list it in "
            "gpustack_operator/worker/common.py, or pass it to is_up_to_date"
        ) from None


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


def is_up_to_date(
    have: Mapping[str, Any] | None,
    want: Mapping[str, Any],
    comparison: ObjectComparison | None = None,
) -> bool:
    """Whether the cached object already says everything the desired one says.

    Compared: the labels and annotations the writer sets (its ``note.``, ``schedule.`` and
    ``resource.gpustack.ai/`` keys exactly, so a dropped note counts as a difference), the
    owner references, and the body field by field as *comparison* (default: the one declared
    for the kind, :func:`comparison_for`) says: docs/worker.md, "Writes and ownership".
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
    return (comparison or comparison_for(want)).matches(have, want)


# --- writes ---------------------------------------------------------------------------------------


_PRUNE_AT: Final = 1024


def _revision(value: object) -> int | None:
    """A resourceVersion as the integer the API server's storage counts with, or None."""
    try:
        return int(str(value))
    except ValueError:
        return None


def _key(resource: Resource, obj: Mapping[str, Any]) -> tuple[Resource, str, str]:
    return (resource, str(metadata(obj).get("namespace") or ""), name_of(obj))


def _sent(want: JSON) -> bytes:
    """*want* as the JSON it is sent as, to compare what one apply sent with the next: equal
    bytes are equal objects; an object built with its keys in another order counts as
    another, and is sent (never skipped wrongly)."""
    try:
        return dumps(want)
    except (TypeError, ValueError, RecursionError):
        return repr(want).encode()  # the client refuses it as unsendable; never equal to JSON


class _Applied:
    """What one apply sent and what the server answered.

    What was sent is kept as its JSON encoding: immutable whatever the caller later does with
    its dict, smaller than the dict, and a fraction of the cost of a deep copy (``dumps`` of
    a NodeFeature takes about 1 µs; docs/performance.md, "The third cuts: JSON, the
    writer's record, the view"). The answer is kept without its ``managedFields``, the
    largest part of it, which no caller reads; its label maps' strings are interned
    (:func:`~gpustack_operator.runtime.cache.strip_managed_fields`), and the rest is shared
    with the answer the caller got, which callers only read.
    """

    __slots__ = ("cache", "resource_version", "result", "sent")

    def __init__(self, want: JSON, result: JSON, cache: Informer) -> None:
        self.sent = _sent(want)
        self.result = strip_managed_fields(result)
        self.cache = cache
        self.resource_version = _revision(metadata(result).get("resourceVersion"))

    def unseen_by(self, cache: Informer, want: JSON | None = None) -> bool:
        """*cache* has not yet seen this apply (and *want*, if given, is what it sent).

        Resource versions are compared as the storage revisions they are (integers), as
        client-go's mutation cache does; any other form counts as seen, so the write is sent.
        """
        if cache is not self.cache or (want is not None and _sent(want) != self.sent):
            return False
        seen = _revision(cache.last_resource_version)
        return (
            self.resource_version is not None and seen is not None and seen < self.resource_version
        )


class Writer:
    """Server-side apply and guarded deletes as one field manager, with an Event per write.

    Every write passes *fence* (the manager's) twice: here, before it waits for the rate
    limiter, and in the client once the connection is ready, after every wait and before
    any byte is sent. A replica whose Lease is not known held sends nothing and raises
    ``LeaseNotHeld`` (docs/runtime.md, "Write fence").
    """

    def __init__(
        self,
        client: Client,
        field_manager: str,
        recorder: EventRecorderLike | None,
        fence: WriteFence | None = None,
    ) -> None:
        self.client = client
        self.field_manager = field_manager
        self.recorder = recorder
        self.fence = fence or WriteFence()
        self._applied: dict[tuple[Resource, str, str], _Applied] = {}
        self._prune_at = _PRUNE_AT

    async def apply(
        self, resource: Resource, want: JSON, *, existed: bool, cache: Informer | None = None
    ) -> JSON:
        """Apply *want* (fields the worker owns, so ``force``) and log what happened.

        With *cache* (the informer the caller read the object from), an apply of exactly
        what this writer applied last to the object is not sent again while *cache* has not
        seen that write yet: the cache lags the write, it does not contradict it
        (docs/worker.md, "Writes and ownership"). Anything the cache shows after the write
        (an edit, a deletion) is judged on its own.
        """
        key = _key(resource, want)
        last = self._applied.get(key)
        if last is not None and cache is not None and last.unseen_by(cache, want):
            log.debug(
                "apply skipped: the cache has not seen this writer's last apply yet",
                kind=resource.kind,
                name=name_of(want),
                namespace=key[1] or None,
                resource_version=last.resource_version,
            )
            return last.result
        self.fence.check(f"an apply of {resource.kind} {name_of(want)}")
        result = await self.client.apply(
            resource, want, field_manager=self.field_manager, force=True, fence=self.fence
        )
        if cache is not None:
            self._remember(key, _Applied(want, result, cache))
        else:
            self._applied.pop(key, None)
        log.info(
            "updated" if existed else "created",
            kind=resource.kind,
            name=name_of(want),
            namespace=metadata(want).get("namespace"),
        )
        return result

    async def remove(
        self,
        resource: Resource,
        want: JSON,
        field: tuple[str, ...],
        *,
        cache: Informer | None = None,
    ) -> JSON:
        """Remove *field* (a path of map keys) from the object *want* names, with a JSON merge
        patch that sets it to ``null``, and log it.

        For the one removal server-side apply cannot make: leaving a custom resource's map
        with no field (``spec: {}``) makes the map ``null``, which the schema refuses
        (docs/worker.md, "Writes and ownership"). *want* is the object as it is meant to be
        without *field*; with *cache*, it is not sent again while *cache* has not seen this
        writer's last write of exactly *want*, as :meth:`apply`.
        """
        key = _key(resource, want)
        last = self._applied.get(key)
        if last is not None and cache is not None and last.unseen_by(cache, want):
            return last.result
        patch: dict[str, Any] = {field[-1]: None}
        for name in reversed(field[:-1]):
            patch = {name: patch}
        namespace = metadata(want).get("namespace") if resource.namespaced else None
        self.fence.check(f"a removal of {'.'.join(field)} from {resource.kind} {name_of(want)}")
        result = await self.client.patch(
            resource,
            name_of(want),
            patch,
            namespace=namespace,
            patch_type="merge",
            field_manager=self.field_manager,
            fence=self.fence,
        )
        if cache is not None:
            self._remember(key, _Applied(want, result, cache))
        else:
            self._applied.pop(key, None)
        log.info(
            "updated",
            kind=resource.kind,
            name=name_of(want),
            namespace=namespace,
            removed=".".join(field),
        )
        return result

    async def delete(self, resource: Resource, obj: Mapping[str, Any], reason: str) -> bool:
        """Delete *obj* if it is still the object the cache saw (uid precondition).

        Only objects carrying the managed-by label are deleted; anything else is a bug in the
        caller and refused. Returns False when it was already gone (404). A 409 (the uid
        precondition failed because the object was replaced, or a webhook or the server
        refused) is raised: the reconcile fails, its key is retried with backoff and the
        decision is made again against the cache as it then is, so no orphan is left.
        """
        if not is_managed_object(obj):
            raise RuntimeError(f"refusing to delete {resource.kind} {name_of(obj)}: not ours")
        meta = metadata(obj)
        namespace = meta.get("namespace") if resource.namespaced else None
        self._applied.pop(_key(resource, obj), None)
        self.fence.check(f"a delete of {resource.kind} {name_of(obj)}")
        try:
            await self.client.delete(
                resource,
                name_of(obj),
                namespace,
                preconditions={"uid": uid_of(obj)},
                fence=self.fence,
            )
        except NotFound:
            return False
        except Conflict:
            log.info(
                "delete refused with a conflict; the key is retried",
                kind=resource.kind,
                name=name_of(obj),
                namespace=namespace,
            )
            raise
        log.info("deleted", kind=resource.kind, name=name_of(obj), namespace=namespace, why=reason)
        return True

    def cache_lags(self, resource: Resource, want: JSON, cache: Informer) -> bool:
        """*cache* has not yet seen this writer's last apply, which sent exactly *want*:
        applying *want* again would change nothing, and what goes with a write (an Event)
        was done then."""
        last = self._applied.get(_key(resource, want))
        return last is not None and last.unseen_by(cache, want)

    def _remember(self, key: tuple[Resource, str, str], applied: _Applied) -> None:
        """Keep *applied*; forget, now and then, the applies every cache has seen."""
        self._applied[key] = applied
        if len(self._applied) > self._prune_at:
            self._applied = {k: a for k, a in self._applied.items() if a.unseen_by(a.cache)}
            self._prune_at = max(_PRUNE_AT, 2 * len(self._applied))

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
