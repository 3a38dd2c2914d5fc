"""The object store of the simulated API server: the etcd + registry layer.

It owns the global resourceVersion counter, every object (kept once per (group, plural),
whatever version wrote it), the bounded per-resource watch history, and the write rules that
kube-apiserver applies whatever the endpoint: uid/creationTimestamp/generation, optimistic
concurrency, the status subresource split, finalizers and deletionTimestamp, namespaces,
managedFields for field managers, CRD registration.

Everything here is synchronous and runs on the server's event loop thread: a write and the
fan-out of its watch event happen in one step, so a watcher that registers and reads the
history in one call can never miss or duplicate an event. Stored objects are never mutated
after they are committed; callers outside the module always get deep copies.

Direct use (seeding and inspecting in tests, the NFD-master stand-in)::

    sim.store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    sim.store.get("v1", "Node", "n1")
    sim.store.list("v1", "ConfigMap", namespace="default")
    sim.store.update(obj)            # main endpoint rules (status ignored where has_status)
    sim.store.update_status(obj)     # status endpoint rules
    sim.store.delete("v1", "Node", "n1")
    unsubscribe = sim.store.subscribe(lambda event_type, obj: ...)
    async for event_type, obj in sim.store.events(): ...

These follow the same rules as HTTP requests (they skip fault injection and request counters).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import secrets
import string
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from gpustack_sim.apiserver import apply as ssa
from gpustack_sim.apiserver import builtinkinds, builtinschemas, crdcleanup, podtermination
from gpustack_sim.apiserver.celrules import rule_causes
from gpustack_sim.apiserver.errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    expired,
    invalid,
    not_found,
    stale_conflict,
)
from gpustack_sim.apiserver.kinds import BUILTIN_KINDS, KindInfo, KindRegistry, kinds_from_crd
from gpustack_sim.apiserver.names import metadata_errors
from gpustack_sim.apiserver.patches import clone, clone_obj
from gpustack_sim.apiserver.selectors import Matcher
from gpustack_sim.apiserver.writedefaults import defaults_on_write

log = structlog.get_logger(__name__)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
FOREGROUND = "foregroundDeletion"
Key = tuple[str, str]  # (namespace or "", name)
ResourceId = tuple[str, str]  # (group, plural)
StoreCallback = Callable[[str, dict[str, Any]], None]

# Built-in kinds whose status the create call keeps (the kubelet registers Nodes with status);
# everything else with a status subresource starts with an empty status, as on a real cluster.
_KEEP_STATUS_ON_CREATE = {("", "nodes"), ("", "namespaces"), ("", "pods"), ("", "services")}
_IMMUTABLE_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "name",
    "namespace",
)
_NAME_SUFFIX = string.ascii_lowercase + string.digits
_UNDELETABLE_NAMESPACES = {"default", "kube-system", "kube-public"}


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class Event:
    """One committed change; ``obj`` and ``prev`` are stored objects and never mutated."""

    type: str
    rv: int
    obj: dict[str, Any]
    prev: dict[str, Any] | None
    lines: dict[str, bytes] = field(default_factory=dict)  # serialized per apiVersion

    def line(self, api_version: str) -> bytes:
        """The watch-stream line for this event, as ``api_version`` (cached)."""
        cached = self.lines.get(api_version)
        if cached is None:
            obj = {**self.obj, "apiVersion": api_version}
            text = json.dumps({"type": self.type, "object": obj}, separators=(",", ":"))
            cached = self.lines[api_version] = text.encode() + b"\n"
        return cached


@dataclass
class Resource:
    """The objects of one (group, plural) and their bounded event history."""

    group: str
    plural: str
    history_size: int
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    history: deque[Event] = field(default_factory=deque)
    evicted_rv: int = 0  # events with rv <= this are gone from the history
    watchers: set[Callable[[Event], None]] = field(default_factory=set)

    def record(self, event: Event) -> None:
        self.history.append(event)
        while len(self.history) > self.history_size:
            self.evicted_rv = self.history.popleft().rv
        for watcher in list(self.watchers):
            watcher(event)

    def snapshot(self, rv: int) -> dict[Key, dict[str, Any]] | None:
        """The objects as they were at ``rv``; None when the history no longer covers it."""
        if rv < self.evicted_rv:
            return None
        state = dict(self.objects)
        for event in reversed(self.history):
            if event.rv <= rv:
                break
            key = key_of(event.obj)
            if event.type == ADDED:
                state.pop(key, None)
            elif event.prev is not None:
                state[key] = event.prev
        return state


# Built-in kinds whose registry strategy maintains metadata.generation; the others (Node,
# Namespace, ConfigMap, Secret, RBAC, Lease, Event, ...) never carry one on a real cluster.
_GENERATION_GROUPS = {"apps", "batch", "apiextensions.k8s.io", "node.k8s.io"}
_GENERATION_RESOURCES = {
    ("", "pods"),
    ("", "replicationcontrollers"),
    ("networking.k8s.io", "ingresses"),
}
_BUILTIN_IDS = {(k.group, k.plural) for k in BUILTIN_KINDS}


def tracks_generation(info: KindInfo) -> bool:
    """Whether objects of ``info`` get ``metadata.generation`` (all custom resources do)."""
    if (info.group, info.plural) not in _BUILTIN_IDS:
        return True
    return info.group in _GENERATION_GROUPS or (info.group, info.plural) in _GENERATION_RESOURCES


def _owner_uids(obj: Mapping[str, Any] | None) -> set[str]:
    if obj is None:
        return set()
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {str(r.get("uid", "")) for r in refs if isinstance(r, Mapping)}


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def _check_preconditions(
    info: KindInfo, name: str, meta: Mapping[str, Any], old_meta: Mapping[str, Any]
) -> None:
    """A PUT naming another resourceVersion or uid than the stored object's is a 409."""
    rv = meta.get("resourceVersion")
    if rv and rv != old_meta["resourceVersion"]:
        raise stale_conflict(info, name)
    check_preconditions(info, name, old_meta, {"uid": meta.get("uid")})


def check_preconditions(
    info: KindInfo, name: str, meta: Mapping[str, Any], pre: Mapping[str, Any]
) -> None:
    """``preconditions`` (of a DeleteOptions, or a PUT's uid) that *meta*, the stored
    object's, does not meet: 409."""
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        raise conflict(
            info,
            name,
            f"Precondition failed: UID in precondition: {pre['uid']}, "
            f"UID in object meta: {meta.get('uid')}",
        )
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
        raise conflict(
            info,
            name,
            f"Precondition failed: ResourceVersion in precondition: "
            f"{pre['resourceVersion']}, ResourceVersion in object meta: "
            f"{meta['resourceVersion']}",
        )


def _keep_server_fields(
    info: KindInfo, new: dict[str, Any], old: Mapping[str, Any], subresource: str | None
) -> dict[str, Any]:
    """*new* with what this endpoint may not change taken from *old*.

    ``/status`` changes only ``status`` (``/approval`` only ``status.conditions``); the main
    endpoint keeps the old ``status`` of kinds with a status subresource and the server-owned
    metadata (uid, creationTimestamp, ...).
    """
    if subresource == "approval":  # docs/simulator.md, "Built-in kinds"
        status = new.get("status")
        conditions = status.get("conditions") if isinstance(status, Mapping) else None
        new = {**new, "status": {**(old.get("status") or {}), "conditions": conditions}}
        if conditions is None:
            del new["status"]["conditions"]
        subresource = "status"
    if subresource == "status":
        status = new.get("status")
        kept = clone_obj(old)
        kept["apiVersion"] = info.api_version
        kept["kind"] = info.kind
        if status is None:
            kept.pop("status", None)
        else:
            kept["status"] = status
        return kept
    new["apiVersion"] = info.api_version
    new["kind"] = info.kind
    if info.has_status:
        if "status" in old:
            new["status"] = clone(old["status"])
        else:
            new.pop("status", None)
    meta, old_meta = new["metadata"], old["metadata"]
    for k in _IMMUTABLE_META:
        if k in old_meta:
            meta[k] = old_meta[k]
        else:
            meta.pop(k, None)
    return new


def _refuse_new_finalizers(
    info: KindInfo, name: str, meta: Mapping[str, Any], old_meta: Mapping[str, Any]
) -> None:
    """An object being deleted may lose finalizers but never gain one (422, as the API)."""
    added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
    if added:
        raise invalid(
            info,
            name,
            [
                (
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted, "
                    "found new finalizers " + json.dumps(sorted(added)),
                )
            ],
        )


def _label_namespace(meta: dict[str, Any], name: str) -> None:
    """Set ``kubernetes.io/metadata.name``, as kube-apiserver does on every Namespace write
    (https://kubernetes.io/docs/reference/labels-annotations-taints/#kubernetes-io-metadata-name)."""
    meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": name}


def _content(obj: Mapping[str, Any], info: KindInfo) -> dict[str, Any]:
    """What ``metadata.generation`` tracks: everything but metadata (and status if split)."""
    skip = {"metadata", "apiVersion", "kind"}
    if info.has_status:
        skip.add("status")
    return {k: v for k, v in obj.items() if k not in skip}


def _without_volatile(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` minus what a no-op write may change (resourceVersion, managedFields times)."""
    meta = dict(obj.get("metadata") or {})
    meta.pop("resourceVersion", None)
    if "managedFields" in meta:
        meta["managedFields"] = [
            {k: v for k, v in e.items() if k != "time"} for e in meta["managedFields"]
        ]
    out = dict(obj)
    out["metadata"] = meta
    out.pop("apiVersion", None)
    return out


class _Schema:
    """The CRD-schema hooks of ``sim.validation`` (pruning, defaulting, validation), and the
    published schemas of built-in kinds (``sim.builtinschemas``).

    ``sim.validation`` is imported lazily so the store works before (or without) that module;
    a missing module means custom resources are stored unpruned and unvalidated.
    """

    def __init__(self) -> None:
        self._loaded = False
        self._prune: Callable[[KindInfo, Mapping[str, Any]], dict[str, Any]] | None = None
        self._default: Callable[[KindInfo, Mapping[str, Any]], dict[str, Any]] | None = None
        self._causes: Callable[[KindInfo, Mapping[str, Any]], list[tuple[str, str]]] | None = None
        self._unknown: Callable[[KindInfo, Mapping[str, Any]], list[str]] | None = None
        # The built-in object normalize() walked last and the required fields it lacks.
        self._missing: tuple[Mapping[str, Any] | None, list[str]] = (None, [])

    def _load(self) -> None:
        if self._loaded:
            return
        try:
            from gpustack_sim.apiserver import validation
        except ImportError:
            return
        self._loaded = True
        self._prune = getattr(validation, "prune_unknown_fields", None)
        self._default = getattr(validation, "apply_defaults", None)
        self._unknown = getattr(validation, "find_unknown_fields", None)
        causes = getattr(validation, "validation_causes", None)
        if causes is None:
            plain = validation.validate_object

            def causes(kind: KindInfo, obj: Mapping[str, Any]) -> list[tuple[str, str]]:
                return [("", m) for m in plain(kind, obj)]

        self._causes = causes

    def normalize(self, info: KindInfo, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` pruned of unknown fields and defaulted, as the real server stores it.

        A built-in kind is pruned in place by its published schema (a value of the wrong type
        is a 400, gpustack_sim/apiserver/builtinschemas.py)."""
        if info.schema is None:
            if builtinschemas.has_schema(info):
                found = builtinschemas.check(info, obj, prune=True)
                self._missing = (obj, found.missing)  # causes() of this object needs no walk
            return obj
        self._load()
        if self._prune is not None:
            obj = self._prune(info, obj)
        if self._default is not None:
            obj = self._default(info, obj)
        return obj

    def unknown_fields(self, info: KindInfo, obj: Mapping[str, Any]) -> list[str]:
        """Paths of fields the schema does not declare (what pruning would drop)."""
        if info.schema is None:
            if not builtinschemas.has_schema(info):
                return []
            return builtinschemas.check(info, dict(obj), prune=False).unknown
        self._load()
        return list(self._unknown(info, obj)) if self._unknown is not None else []

    def causes(self, info: KindInfo, obj: dict[str, Any]) -> list[tuple[str, str]]:
        if info.schema is None:
            if not builtinschemas.has_schema(info):
                return []
            checked, missing = self._missing
            if checked is not obj:
                missing = builtinschemas.check(info, obj, prune=False).missing
            return [(path, "Required value") for path in missing]
        self._load()
        return self._causes(info, obj) if self._causes is not None else []


class Store:
    """Objects, resourceVersions, watch history and the write rules. See the module doc."""

    def __init__(self, registry: KindRegistry, watch_history: int = 1000) -> None:
        self.registry = registry
        self.watch_history = watch_history
        self._rv = 0
        self._resources: dict[ResourceId, Resource] = {}
        self._uids: dict[str, tuple[ResourceId, Key]] = {}
        self._dependents: set[tuple[ResourceId, Key]] = set()
        self._owned_by: dict[str, set[tuple[ResourceId, Key]]] = {}  # owner uid -> dependents
        self._foreground: set[tuple[ResourceId, Key]] = set()
        self._subscribers: list[StoreCallback] = []
        # Called after every commit with (event, resource id); the GC and namespace
        # controller use it to wake up.
        self._commit_hooks: list[Callable[[Event, ResourceId], None]] = []
        self.admission: list[Callable[[KindInfo, dict[str, Any], dict[str, Any] | None], None]] = []
        """Called with (kind, new object, old object or None) before a write; may raise."""
        self.schema = _Schema()
        self.cel_rules = True
        """Enforce CRDs' ``x-kubernetes-validations`` (CEL) rules
        (``gpustack_sim/apiserver/celrules.py``)."""

    # ------------------------------------------------------------------ bookkeeping

    @property
    def resource_version(self) -> int:
        """The global resourceVersion: that of the latest write."""
        return self._rv

    def resource(self, info: KindInfo) -> Resource:
        rid = (info.group, info.plural)
        res = self._resources.get(rid)
        if res is None:
            res = self._resources[rid] = Resource(info.group, info.plural, self.watch_history)
        return res

    def resources(self) -> list[tuple[ResourceId, Resource]]:
        return list(self._resources.items())

    def info_for(self, api_version: str, kind: str) -> KindInfo:
        info = self.registry.by_kind(api_version, kind)
        if info is None:
            raise ApiError(
                404,
                f'the server could not find the requested resource: no kind "{kind}" is '
                f'registered for version "{api_version}"',
                "NotFound",
            )
        return info

    def info_by_resource(self, rid: ResourceId) -> KindInfo | None:
        versions = self.registry.versions_of(*rid)
        for info in versions:
            if info.storage:
                return info
        return versions[0] if versions else None

    def _reindex(
        self,
        rid: ResourceId,
        key: Key,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any] | None,
    ) -> None:
        """Keep the uid, owner and foreground-deletion indexes in step with one change."""
        before, after = _owner_uids(old), _owner_uids(new)
        ident = (rid, key)
        for uid in before - after:
            owned = self._owned_by.get(uid)
            if owned is not None:
                owned.discard(ident)
                if not owned:
                    del self._owned_by[uid]
        for uid in after - before:
            self._owned_by.setdefault(uid, set()).add(ident)
        if after:
            self._dependents.add(ident)
        else:
            self._dependents.discard(ident)
        if old is not None:
            self._uids.pop(old["metadata"].get("uid", ""), None)
        meta = new["metadata"] if new is not None else {}
        if meta.get("uid"):
            self._uids[meta["uid"]] = ident
        if meta.get("deletionTimestamp") and FOREGROUND in (meta.get("finalizers") or []):
            self._foreground.add(ident)
        else:
            self._foreground.discard(ident)

    def add_commit_hook(self, hook: Callable[[Event, ResourceId], None]) -> Callable[[], None]:
        """Call *hook* after every commit; returns what removes it again."""
        self._commit_hooks.append(hook)

        def remove() -> None:
            if hook in self._commit_hooks:
                self._commit_hooks.remove(hook)

        return remove

    def _commit(
        self,
        info: KindInfo,
        event_type: str,
        new: dict[str, Any],
        prev: dict[str, Any] | None,
    ) -> dict[str, Any]:
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        res = self.resource(info)
        rid = (info.group, info.plural)
        if not info.storage:  # objects are kept as their storage version, whoever wrote them
            stored_as = self.info_by_resource(rid)
            if stored_as is not None:
                new["apiVersion"] = stored_as.api_version
        key = key_of(new)
        if event_type == DELETED:
            res.objects.pop(key, None)
            self._reindex(rid, key, prev, None)
        else:
            res.objects[key] = new
            self._reindex(rid, key, prev, new)
        event = Event(event_type, self._rv, new, prev)
        res.record(event)
        if info.kind == "CustomResourceDefinition" and info.group == "apiextensions.k8s.io":
            self._crd_changed(event)
        for hook in list(self._commit_hooks):
            hook(event, rid)
        for callback in list(self._subscribers):
            try:
                callback(event_type, clone(new))
            except Exception:
                log.exception("store subscriber failed", event=event_type)
        return new

    # ------------------------------------------------------------------ CRDs

    def _crd_changed(self, event: Event) -> None:
        spec = event.obj.get("spec") or {}
        group = spec.get("group", "")
        plural = (spec.get("names") or {}).get("plural", "")
        self.registry.unregister_group_resource(group, plural)
        if event.type != DELETED:
            self.registry.register_all(kinds_from_crd(event.obj))
            return
        res = self._resources.get((group, plural))
        if res is None:
            return
        # The CRD is gone: its objects go with it (the real server's cleanup finalizer).
        for key, obj in sorted(res.objects.items()):
            res.objects.pop(key, None)
            self._rv += 1
            gone = clone(obj)
            gone["metadata"]["resourceVersion"] = str(self._rv)
            self._reindex((group, plural), key, obj, None)
            event = Event(DELETED, self._rv, gone, obj)
            res.record(event)
            for hook in list(self._commit_hooks):
                hook(event, (group, plural))

    def register_crd(self, crd: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace a CustomResourceDefinition; its versions are served at once."""
        crd = clone_obj(crd)
        crd.setdefault("apiVersion", "apiextensions.k8s.io/v1")
        kinds_from_crd(crd)  # raises ValueError on a malformed CRD
        name = (crd.get("metadata") or {}).get("name", "")
        existing = self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
        if existing is None:
            return self.create(crd)
        crd["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        return self.update(crd)

    @staticmethod
    def _crd_status(obj: dict[str, Any], old: Mapping[str, Any] | None = None) -> None:
        """The status a CRD write leaves: names accepted and established; the conditions
        other controllers set (``Terminating``) stay."""
        names = dict((obj.get("spec") or {}).get("names") or {})
        names.setdefault("singular", str(names.get("kind", "")).lower())
        names.setdefault("listKind", f"{names.get('kind', '')}List")
        ts = now_rfc3339()
        obj["status"] = {
            "acceptedNames": names,
            "storedVersions": [
                v["name"] for v in (obj.get("spec") or {}).get("versions") or [] if v.get("storage")
            ],
            "conditions": [
                {
                    "type": t,
                    "status": "True",
                    "reason": r,
                    "message": m,
                    "lastTransitionTime": ts,
                }
                for t, r, m in (
                    ("NamesAccepted", "NoConflicts", "no conflicts found"),
                    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                )
            ],
        }
        kept = ((old or {}).get("status") or {}).get("conditions") or []
        obj["status"]["conditions"] += [
            clone(c) for c in kept if c.get("type") not in ("NamesAccepted", "Established")
        ]

    # ------------------------------------------------------------------ reads

    def get_stored(self, info: KindInfo, namespace: str | None, name: str) -> dict[str, Any]:
        """The stored object (do not mutate) or a 404 ``ApiError``."""
        obj = self.resource(info).objects.get((namespace or "" if info.namespaced else "", name))
        if obj is None:
            raise not_found(info, name)
        return obj

    def select(
        self,
        info: KindInfo,
        namespace: str | None,
        matcher: Matcher | None,
        objects: Mapping[Key, dict[str, Any]] | None = None,
    ) -> list[tuple[Key, dict[str, Any]]]:
        """Stored objects in key order, filtered by namespace and selector (do not mutate)."""
        source = self.resource(info).objects if objects is None else objects
        out = []
        for key in sorted(source):
            if namespace and key[0] != namespace:
                continue
            obj = source[key]
            if matcher is None or matcher(obj):
                out.append((key, obj))
        return out

    def list_page(
        self,
        info: KindInfo,
        namespace: str | None,
        matcher: Matcher | None,
        limit: int | None,
        continue_token: str | None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> tuple[list[dict[str, Any]], int, str | None, int | None]:
        """One LIST page: (stored items, list RV, continue token, remainingItemCount)."""
        res = self.resource(info)
        list_rv = self._rv
        start: Key | None = None
        objects: Mapping[Key, dict[str, Any]] | None = None
        if continue_token:
            list_rv, start = _decode_continue(continue_token)
            objects = res.snapshot(list_rv)
            if objects is None:
                raise ApiError(
                    410,
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter, or use "
                    "the continue token in this response to retrieve the remainder of the "
                    "results. Continuing with the provided token results in an inconsistent "
                    "list - objects that were created, modified, or deleted between the time "
                    "the first chunk was returned and now may show up in the list.",
                    "Expired",
                )
        elif resource_version not in (None, "", "0"):
            wanted = _parse_rv(resource_version)
            if wanted > self._rv:
                raise ApiError(
                    504,
                    f"Too large resource version: {wanted}, current: {self._rv}",
                    "Timeout",
                    {
                        "causes": [
                            {
                                "reason": "ResourceVersionTooLarge",
                                "message": "Too large resource version",
                            }
                        ],
                        "retryAfterSeconds": 1,
                    },
                )
            if resource_version_match == "Exact":
                objects = res.snapshot(wanted)
                if objects is None:
                    raise expired(f"too old resource version: {wanted} ({res.evicted_rv + 1})")
                list_rv = wanted
        selected = self.select(info, namespace, matcher, objects)
        if start is not None:
            selected = [(k, o) for k, o in selected if k > start]
        if limit and limit > 0 and len(selected) > limit:
            page = selected[:limit]
            token = _encode_continue(list_rv, page[-1][0])
            return [o for _, o in page], list_rv, token, len(selected) - limit
        return [o for _, o in selected], list_rv, None, None

    def watch_start(
        self,
        info: KindInfo,
        resource_version: str | None,
        sink: Callable[[Event], None],
    ) -> tuple[list[Event], Callable[[], None]]:
        """Register ``sink`` for live events and return the events to send first.

        ``resource_version`` "" / "0" / None: synthetic ADDED events for the current state.
        Otherwise the retained events after it; an RV older than the history raises 410.
        Registration and the initial read happen in one step, so nothing is lost or repeated.
        """
        res = self.resource(info)
        if resource_version in (None, "", "0"):
            initial = [
                Event(ADDED, _parse_rv(o["metadata"]["resourceVersion"]), o, None)
                for _, o in sorted(res.objects.items())
            ]
        else:
            rv = _parse_rv(resource_version)
            if rv < res.evicted_rv:
                raise expired(f"too old resource version: {rv} ({res.evicted_rv + 1})")
            initial = [e for e in res.history if e.rv > rv]
        res.watchers.add(sink)
        return initial, lambda: res.watchers.discard(sink)

    # ------------------------------------------------------------------ subscriptions

    def subscribe(self, callback: StoreCallback) -> Callable[[], None]:
        """Call ``callback(event_type, obj_copy)`` synchronously after every committed change.

        ``event_type`` is ADDED, MODIFIED or DELETED; ``obj`` is a deep copy (with its
        ``kind`` and ``apiVersion``). Callbacks run inside the write: they must not write to
        the store themselves; schedule work instead (or use :meth:`events`). Returns a
        function that unsubscribes.
        """
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    async def events(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Every committed change from now on, as ``(event_type, obj_copy)``."""
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        unsubscribe = self.subscribe(lambda t, o: queue.put_nowait((t, o)))
        try:
            while True:
                yield await queue.get()
        finally:
            unsubscribe()

    # ------------------------------------------------------------------ writes

    def _check_namespace(self, info: KindInfo, namespace: str, name: str) -> None:
        if not info.namespaced:
            return
        ns_info = self.registry.lookup("", "v1", "namespaces")
        assert ns_info is not None
        ns = self.resource(ns_info).objects.get(("", namespace))
        if ns is None:
            raise not_found(ns_info, namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                f'{info.group_resource} "{name}" is forbidden: unable to create new content in '
                f"namespace {namespace} because it is being terminated",
                "Forbidden",
                {
                    "kind": info.plural,
                    "group": info.group or None,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def _cluster_ips(self, info: KindInfo) -> set[str]:
        """Every cluster IP the Services of *info*'s resource hold (for allocating one)."""
        return {
            ip
            for obj in self.resource(info).objects.values()
            for ip in (obj.get("spec") or {}).get("clusterIPs") or ()
        }

    def _validate(
        self, info: KindInfo, obj: dict[str, Any], old: dict[str, Any] | None = None
    ) -> None:
        meta = obj["metadata"]
        causes = metadata_errors(info, meta) or [
            *self.schema.causes(info, obj),
            *builtinkinds.causes(info, obj, old),
        ]
        if not causes and self.cel_rules and info.schema is not None:
            causes = rule_causes(info, obj, old)
        if causes:
            raise invalid(info, str(meta.get("name") or ""), causes)

    def create_as(
        self,
        info: KindInfo,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        manager: str | None = None,
        managed_fields: list[dict[str, Any]] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Create ``body`` as ``info``; returns the stored object (do not mutate).

        ``managed_fields`` (from server-side apply) replaces the managedFields that a
        ``manager`` would otherwise be recorded with.
        """
        if not isinstance(body, Mapping):
            raise bad_request("the request body must be a JSON object")
        obj = clone_obj(body)
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        obj["apiVersion"] = info.api_version
        obj["kind"] = info.kind
        if info.namespaced:
            ns = namespace or meta.get("namespace") or "default"
            if meta.get("namespace") and meta["namespace"] != ns:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(secrets.choice(_NAME_SUFFIX) for _ in range(5))
            meta["name"] = f"{meta['generateName']}{suffix}"
        name = str(meta.get("name") or "")
        if name:
            self._check_namespace(info, meta.get("namespace", ""), name)
        if meta.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if tracks_generation(info):
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        meta.pop("managedFields", None)
        if info.has_status and (info.group, info.plural) not in _KEEP_STATUS_ON_CREATE:
            obj.pop("status", None)
        if info.kind == "Namespace" and not info.group:
            _label_namespace(meta, name)
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {**(obj.get("status") or {}), "phase": "Active"}
        if info.kind == "CustomResourceDefinition" and info.group == "apiextensions.k8s.io":
            try:
                kinds_from_crd(obj)
            except (ValueError, KeyError) as exc:
                raise invalid(info, name, [("spec", str(exc))]) from None
            self._crd_status(obj)
        obj = self.schema.normalize(info, obj)
        builtinkinds.defaults_on_create(info, obj)
        defaults_on_write(info, obj, None, lambda: self._cluster_ips(info))
        meta = obj["metadata"]
        self._validate(info, obj)
        for admit in self.admission:
            admit(info, obj, None)
        key = key_of(obj)
        if key in self.resource(info).objects:
            raise already_exists(info, name)
        if managed_fields is not None:
            meta["managedFields"] = clone(managed_fields)
        elif manager:
            ssa.record_update(None, obj, manager, info, subresource=None)
        if dry_run:
            return obj
        return self._commit(info, ADDED, obj, None)

    def update_as(
        self,
        info: KindInfo,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        manager: str | None = None,
        apply_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Replace an object (PUT semantics); returns the stored object (do not mutate).

        ``subresource="status"`` keeps everything but ``status``; the main endpoint keeps the
        old ``status`` for kinds with a status subresource. ``apply_manager`` marks a write
        whose managedFields were already computed by server-side apply.
        """
        if not isinstance(body, Mapping):
            raise bad_request("the request body must be a JSON object")
        new = clone_obj(body)
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        body_managed = meta.get("managedFields")
        name = name or meta.get("name") or ""
        ns = (namespace or meta.get("namespace") or "default") if info.namespaced else ""
        old = self.get_stored(info, ns, name)
        old_meta = old["metadata"]
        _check_preconditions(info, name, meta, old_meta)
        new = _keep_server_fields(info, new, old, subresource)
        meta = new["metadata"]
        managed = old_meta.get("managedFields") if apply_manager is None else body_managed
        if managed:
            meta["managedFields"] = clone(managed)
        else:
            meta.pop("managedFields", None)
        if old_meta.get("deletionTimestamp"):
            _refuse_new_finalizers(info, name, meta, old_meta)
        if info.kind == "Namespace" and not info.group:
            _label_namespace(meta, name)
        if info.kind == "Namespace" and not info.group and subresource != "status":
            new["spec"] = clone(old.get("spec") or {})  # spec.finalizers change via /finalize
        if info.kind == "CustomResourceDefinition" and info.group == "apiextensions.k8s.io":
            try:
                kinds_from_crd(new)
            except (ValueError, KeyError) as exc:
                raise invalid(info, name, [("spec", str(exc))]) from None
            self._crd_status(new, old)
        new = self.schema.normalize(info, new)
        defaults_on_write(info, new, old, lambda: self._cluster_ips(info))
        meta = new["metadata"]
        self._validate(info, new, old)
        for admit in self.admission:
            admit(info, new, old)
        if tracks_generation(info) and _content(new, info) != _content(old, info):
            meta["generation"] = int(old_meta.get("generation") or 1) + 1
        if manager and apply_manager is None:
            ssa.record_update(old, new, manager, info, subresource=subresource)
        if _without_volatile(new) == _without_volatile(old):
            return old  # a no-op write: no new resourceVersion, no event
        if dry_run:
            return new
        if old_meta.get("deletionTimestamp") and not self._blocking_finalizers(info, new):
            return self._commit(info, DELETED, new, old)
        return self._commit(info, MODIFIED, new, old)

    @staticmethod
    def _blocking_finalizers(info: KindInfo, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if meta.get("finalizers"):
            return True
        return bool(
            info.kind == "Namespace"
            and not info.group
            and ((obj.get("spec") or {}).get("finalizers"))
        )

    def finalize_namespace(self, name: str) -> dict[str, Any] | None:
        """Clear a terminating namespace's ``spec.finalizers`` (the namespace controller)."""
        info = self.registry.lookup("", "v1", "namespaces")
        assert info is not None
        old = self.resource(info).objects.get(("", name))
        if old is None or not (old.get("spec") or {}).get("finalizers"):
            return None
        new = clone(old)
        new.setdefault("spec", {})["finalizers"] = []
        if old["metadata"].get("deletionTimestamp") and not self._blocking_finalizers(info, new):
            return self._commit(info, DELETED, new, old)
        return self._commit(info, MODIFIED, new, old)

    def delete_as(
        self,
        info: KindInfo,
        namespace: str | None,
        name: str,
        *,
        preconditions: Mapping[str, Any] | None = None,
        propagation: str | None = None,
        dry_run: bool = False,
        grace_period: int | None = None,
    ) -> dict[str, Any]:
        """Delete (or start deleting, if finalizers remain); returns the object's last state.

        ``grace_period`` (``gracePeriodSeconds``) matters for Pods on a Node: they are marked
        and the kubelet stand-in finishes the deletion
        (``gpustack_sim/apiserver/podtermination.py``).

        ``propagation``: Background (default) deletes the object now and lets the garbage
        collector remove its dependents afterwards. Foreground adds the ``foregroundDeletion``
        finalizer: the garbage collector deletes the dependents first and removes the
        finalizer once none with ``blockOwnerDeletion`` is left. Orphan removes this owner from
        its dependents' ownerReferences (synchronously, where the real server uses the
        ``orphan`` finalizer) and then deletes the object.
        """
        ns = (namespace or "default") if info.namespaced else ""
        old = self.get_stored(info, ns, name)
        meta = old["metadata"]
        pre = preconditions or {}
        check_preconditions(info, name, meta, pre)
        if propagation not in (None, "", "Background", "Foreground", "Orphan"):
            raise invalid(
                info,
                name,
                [
                    (
                        "propagationPolicy",
                        f"Unsupported value: {propagation!r}: supported values: "
                        '"Foreground", "Background", "Orphan"',
                    )
                ],
            )
        if info.kind == "Namespace" and not info.group and name in _UNDELETABLE_NAMESPACES:
            raise ApiError(
                403,
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                "Forbidden",
                {"name": name, "kind": "namespaces"},
            )
        if dry_run:
            return old
        if crdcleanup.is_crd(info) and not meta.get("deletionTimestamp"):
            # Its instances go first (docs/simulator.md, "CRD deletion"):
            # gpustack_sim/apiserver/crdcleanup.py.
            return self._commit(
                info, MODIFIED, crdcleanup.marked_for_deletion(old, now_rfc3339()), old
            )
        if propagation == "Orphan":
            self._orphan_dependents(meta.get("uid", ""))
            old = self.get_stored(info, ns, name)
        if propagation == "Foreground":
            finalizers = list(old["metadata"].get("finalizers") or [])
            if FOREGROUND not in finalizers:
                new = clone(old)
                new["metadata"]["finalizers"] = [*finalizers, FOREGROUND]
                new["metadata"].setdefault("deletionTimestamp", now_rfc3339())
                new["metadata"].setdefault("deletionGracePeriodSeconds", 0)
                return self._commit(info, MODIFIED, new, old)
        if podtermination.is_pod(info):
            graceful = self._graceful_pod_deletion(info, old, grace_period)
            if graceful is not None:
                return graceful
        if self._blocking_finalizers(info, old):
            if old["metadata"].get("deletionTimestamp"):
                return old
            new = clone(old)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            if info.kind == "Namespace" and not info.group:
                new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
            return self._commit(info, MODIFIED, new, old)
        return self._commit(info, DELETED, clone(old), old)

    def _graceful_pod_deletion(
        self, info: KindInfo, old: dict[str, Any], requested: int | None
    ) -> dict[str, Any] | None:
        """Mark a Pod whose deletion waits for its containers (a grace period shortens, never
        grows); None when it is deleted now, as any other object."""
        period = podtermination.grace_period(old, requested)
        meta = old["metadata"]
        pending = (
            int(meta.get("deletionGracePeriodSeconds") or 0)
            if meta.get("deletionTimestamp")
            else None
        )
        if period == 0:
            if pending and self._blocking_finalizers(info, old):
                new = clone(old)
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                return self._commit(info, MODIFIED, new, old)
            return None
        if pending is not None and pending <= period:
            return old
        new = clone(old)
        new["metadata"]["deletionTimestamp"] = podtermination.deletion_time(period)
        new["metadata"]["deletionGracePeriodSeconds"] = period
        return self._commit(info, MODIFIED, new, old)

    def controller_write(
        self, info: KindInfo, new: dict[str, Any], old: dict[str, Any]
    ) -> dict[str, Any]:
        """Commit a change one of the server's own controllers makes to a stored object (no
        admission); an object being deleted that no finalizer holds any more goes."""
        if old["metadata"].get("deletionTimestamp") and not self._blocking_finalizers(info, new):
            return self._commit(info, DELETED, new, old)
        return self._commit(info, MODIFIED, new, old)

    def by_uid(self, uid: str) -> dict[str, Any] | None:
        """The stored object with *uid* (do not mutate), or None."""
        found = self._uids.get(uid)
        if found is None:
            return None
        rid, key = found
        res = self._resources.get(rid)
        return res.objects.get(key) if res is not None else None

    def crd_terminating(self, info: KindInfo) -> bool:
        """Whether *info* is a custom resource whose CRD is being deleted."""
        crd_info = self.info_by_resource(crdcleanup.CRD_RESOURCE)
        if crd_info is None or not info.group:
            return False
        crd = self.resource(crd_info).objects.get(("", info.group_resource))
        condition = crdcleanup.condition_of(crd, crdcleanup.TERMINATING) if crd else None
        return condition is not None and condition.get("status") == "True"

    def _orphan_dependents(self, owner_uid: str) -> None:
        for rid, key in sorted(self._owned_by.get(owner_uid, ())):
            info = self.info_by_resource(rid)
            obj = self._resources[rid].objects.get(key)
            if info is None or obj is None:
                continue
            refs = obj["metadata"].get("ownerReferences") or []
            kept = [r for r in refs if r.get("uid") != owner_uid]
            if len(kept) != len(refs):
                new = clone(obj)
                if kept:
                    new["metadata"]["ownerReferences"] = kept
                else:
                    del new["metadata"]["ownerReferences"]
                self._commit(info, MODIFIED, new, obj)

    def remove_owner_refs(self, rid: ResourceId, key: Key, dead: Iterable[str]) -> None:
        """Drop ownerReferences to ``dead`` uids from one object (the garbage collector)."""
        info = self.info_by_resource(rid)
        obj = self._resources[rid].objects.get(key)
        if info is None or obj is None:
            return
        dead_set = set(dead)
        new = clone(obj)
        new["metadata"]["ownerReferences"] = [
            r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") not in dead_set
        ]
        self._commit(info, MODIFIED, new, obj)

    def remove_finalizer(self, rid: ResourceId, key: Key, finalizer: str) -> None:
        """Drop one finalizer (a controller finishing its part of a deletion)."""
        info = self.info_by_resource(rid)
        obj = self._resources[rid].objects.get(key)
        if (
            info is None
            or obj is None
            or finalizer not in (obj["metadata"].get("finalizers") or [])
        ):
            return
        new = clone(obj)
        new["metadata"]["finalizers"] = [f for f in obj["metadata"]["finalizers"] if f != finalizer]
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
        if obj["metadata"].get("deletionTimestamp") and not self._blocking_finalizers(info, new):
            self._commit(info, DELETED, new, obj)
        else:
            self._commit(info, MODIFIED, new, obj)

    def foreground_owners(self) -> list[tuple[ResourceId, Key, dict[str, Any]]]:
        """Objects being deleted in the foreground (stored objects: do not mutate)."""
        out = []
        for rid, key in sorted(self._foreground):
            obj = self._resources[rid].objects.get(key)
            if obj is not None:
                out.append((rid, key, obj))
        return out

    def dependents_of(self, owner_uid: str) -> list[tuple[ResourceId, Key, dict[str, Any], bool]]:
        """(resource, key, object, blocks owner deletion) for each dependent of ``owner_uid``."""
        out = []
        for rid, key in sorted(self._owned_by.get(owner_uid, ())):
            obj = self._resources[rid].objects.get(key)
            if obj is None:
                continue
            for ref in obj["metadata"].get("ownerReferences") or []:
                if ref.get("uid") == owner_uid:
                    out.append((rid, key, obj, bool(ref.get("blockOwnerDeletion"))))
                    break
        return out

    def dependents(self, owner_uid: str | None = None) -> list[tuple[ResourceId, Key]]:
        """Objects with ownerReferences (to ``owner_uid`` only, when given)."""
        if owner_uid is None:
            return sorted(self._dependents)
        return sorted(self._owned_by.get(owner_uid, ()))

    def owner_alive(self, ref: Mapping[str, Any], dependent_namespace: str) -> bool:
        """Whether the owner an ownerReference names exists (the GC's view)."""
        found = self._uids.get(str(ref.get("uid", "")))
        if found is None:
            return False
        _, (owner_ns, _) = found
        return owner_ns == "" or owner_ns == dependent_namespace

    # ------------------------------------------------------------------ public, by apiVersion

    def create(self, obj: Mapping[str, Any], *, field_manager: str | None = None) -> dict[str, Any]:
        """Create ``obj`` (its apiVersion/kind pick the kind); returns a copy of the result."""
        info = self.info_for(obj.get("apiVersion", ""), obj.get("kind", ""))
        return clone_obj(self.create_as(info, obj, manager=field_manager))

    def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """A copy of one object as ``api_version``, or None."""
        info = self.info_for(api_version, kind)
        ns = (namespace or "default") if info.namespaced else ""
        obj = self.resource(info).objects.get((ns, name))
        if obj is None:
            return None
        out: dict[str, Any] = clone(obj)
        out["apiVersion"] = info.api_version
        return out

    def list(
        self, api_version: str, kind: str, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Copies of every object of a kind (in one namespace, or all), in key order."""
        info = self.info_for(api_version, kind)
        out = []
        for _, obj in self.select(info, namespace, None):
            item: dict[str, Any] = clone(obj)
            item["apiVersion"] = info.api_version
            out.append(item)
        return out

    def update(self, obj: Mapping[str, Any], *, field_manager: str | None = None) -> dict[str, Any]:
        """Replace an object through the main endpoint's rules; returns a copy."""
        info = self.info_for(obj.get("apiVersion", ""), obj.get("kind", ""))
        return clone_obj(self.update_as(info, obj, manager=field_manager))

    def update_status(
        self, obj: Mapping[str, Any], *, field_manager: str | None = None
    ) -> dict[str, Any]:
        """Replace an object's status through the status endpoint's rules; returns a copy."""
        info = self.info_for(obj.get("apiVersion", ""), obj.get("kind", ""))
        sub = "status" if info.has_status else None
        return clone_obj(self.update_as(info, obj, subresource=sub, manager=field_manager))

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str | None = None,
    ) -> dict[str, Any]:
        """Delete an object (or mark it deleting, with finalizers); returns a copy."""
        info = self.info_for(api_version, kind)
        return clone_obj(self.delete_as(info, namespace, name, propagation=propagation))


def _parse_rv(text: str | None) -> int:
    try:
        value = int(text or "0")
    except ValueError:
        raise bad_request(f'invalid resource version "{text}"') from None
    if value < 0:
        raise bad_request(f'invalid resource version "{text}"')
    return value


def _encode_continue(rv: int, key: Key) -> str:
    raw = json.dumps({"v": 1, "rv": rv, "start": list(key)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_continue(token: str) -> tuple[int, Key]:
    with contextlib.suppress(ValueError, binascii.Error, KeyError, TypeError):
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        ns, name = data["start"]
        return int(data["rv"]), (str(ns), str(name))
    raise bad_request("continue key is not valid: invalid continue token")
