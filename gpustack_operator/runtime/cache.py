"""The informer's local store: objects by key, plus named secondary indexes.

Event-loop-only and unsynchronised by design: the informer is the only writer and every
reader runs on the same loop, so no lock is needed and reads are O(1) dict lookups.
Objects are stored as decoded (after the informer's transform) and handed out without
copying — thousands of Nodes make per-read deep copies expensive — so callers must treat them
as read-only and copy before modifying (``copy.deepcopy``).
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

import structlog

__all__ = [
    "LAST_APPLIED_ANNOTATION",
    "IndexFunc",
    "Indexer",
    "compact",
    "namespace_index",
    "object_key",
    "strip_managed_fields",
]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
_T = TypeVar("_T")
IndexFunc = Callable[[JSON], Iterable[str]]
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


def object_key(obj: JSON) -> str:
    """The cache/work-queue key: ``namespace/name``, or ``name`` for cluster-scoped objects."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else str(name)


def namespace_index(obj: JSON) -> list[str]:
    """Index function by namespace (client-go's ``cache.MetaNamespaceIndexFunc``)."""
    namespace = (obj.get("metadata") or {}).get("namespace")
    return [str(namespace)] if namespace else []


def shared_strings(labels: dict[str, Any]) -> dict[str, Any]:
    """*labels* with keys and values interned: every Node carries the same label keys and
    mostly the same values, each decoded from its own watch event into its own copy."""
    intern = sys.intern
    return {
        intern(k) if type(k) is str else k: intern(v) if type(v) is str else v
        for k, v in labels.items()
    }


def compact(value: _T) -> _T:
    """A copy of decoded JSON *value* whose strings are interned and whose equal leaf maps and
    lists are kept once.

    The JSON decoder shares a key string only within one document, so every cached object
    holds its own copy of ``"metadata"``, ``"labels"``, ``"cpu"`` and of each value it shares
    with thousands of others (a card model, a CPU name, a quantity): most of a cached Node's
    strings. Interned, each is kept once for the whole cache (CPython drops an interned
    string with its last reference). Beyond strings, the Nodes of one shape carry equal
    ``status.capacity`` and ``allocatable`` maps, annotations, Ready conditions and taints,
    and their NodeFeatures equal ``spec.labels``: those are kept once too
    (:class:`SharedValues`), which the read-only contract of cached objects allows. What names
    one object (``metadata`` but its annotations) is copied, never shared.
    """
    return cast("_T", _compact(value, _SHARED))


class SharedValues:
    """Equal containers of decoded JSON, kept once (hash-consing).

    A container whose items are all scalars or containers already shared is looked up by a
    hash of its items (child containers by identity) and, when an equal one with the same
    types and order is held, that one is returned instead. The table keeps one entry per
    distinct container; entries that only the table still holds are dropped whenever it has
    doubled since the last sweep, so it follows the cache rather than its history.
    """

    __slots__ = ("_by_hash", "_sweep_at")

    _FIRST_SWEEP = 1024

    def __init__(self) -> None:
        self._by_hash: dict[int, Any] = {}
        self._sweep_at = self._FIRST_SWEEP

    def __len__(self) -> int:
        return len(self._by_hash)

    def share(self, value: Any, scalars: bool = False) -> Any:
        """*value* (a dict or list of scalars and shared containers), or the equal one held.
        *scalars*: the caller knows *value* holds scalars only (no child container), which
        lets the hash and the comparison run over its items in C."""
        key = _hash_of(value, scalars)
        held = self._by_hash.get(key)
        if held is not None:
            same = _same_scalars(held, value) if scalars else _same(held, value)
            return held if same else value  # a collision keeps its own
        self._by_hash[key] = value
        if len(self._by_hash) >= self._sweep_at:
            self._sweep()
        return value

    def _sweep(self) -> None:
        """Drop entries no cached object holds any more (only the table and this frame do)."""
        table = self._by_hash
        for key, held in list(table.items()):
            # references: the table, the list above, the loop variable, getrefcount's argument
            if sys.getrefcount(held) <= 4:
                del table[key]
        self._sweep_at = max(self._FIRST_SWEEP, 2 * len(table))

    def drop_changed(self) -> int:
        """Drop the held containers that no longer hash as when they were shared and say how
        many: 0 unless a reader mutated a cached object, which the read-only contract forbids
        (a check for tests and benchmarks)."""
        changed = [key for key, held in self._by_hash.items() if _hash_of(held) != key]
        for key in changed:
            del self._by_hash[key]
        return len(changed)


def _identity(value: Any) -> Any:
    """A child as the hash sees it: a container by identity (it is shared already)."""
    return id(value) if type(value) is dict or type(value) is list else value


def _hash_of(value: Any, scalars: bool = False) -> int:
    # Without a child container, the items are what _identity would make of them.
    if type(value) is dict:
        if scalars:
            return hash((dict, tuple(value.items())))
        return hash((dict, tuple([(k, _identity(v)) for k, v in value.items()])))
    if scalars:
        return hash((list, tuple(value)))
    return hash((list, tuple([_identity(v) for v in value])))


def _same_child(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b) or type(a) is dict or type(a) is list:
        return False  # containers are shared, so equal ones are one object; 1 == True
    return bool(a == b)


def _same(held: Any, value: Any) -> bool:
    """Whether *held* has exactly *value*'s items: same order, same scalar types."""
    if type(held) is not type(value) or len(held) != len(value):
        return False
    if type(held) is dict:
        return all(
            ka == kb and _same_child(va, vb)
            for (ka, va), (kb, vb) in zip(held.items(), value.items(), strict=True)
        )
    return all(_same_child(a, b) for a, b in zip(held, value, strict=True))


def _same_scalars(held: Any, value: Any) -> bool:
    """:func:`_same` for a *value* of scalars only: its items and their types compared in C
    (a *held* with a child container differs in a type)."""
    if type(held) is not type(value) or len(held) != len(value):
        return False
    if type(held) is dict:
        return list(held.items()) == list(value.items()) and list(map(type, held.values())) == list(
            map(type, value.values())
        )
    return bool(held == value) and list(map(type, held)) == list(map(type, value))


_SHARED = SharedValues()


def shared_values() -> SharedValues:
    """The process-wide table :func:`compact` shares containers through."""
    return _SHARED


def _compact(value: Any, shared: SharedValues) -> Any:
    return _compacted(value, shared)[0]


def _compacted(value: Any, shared: SharedValues) -> tuple[Any, bool]:
    """*value* compacted, and whether it is a scalar or a container *shared* holds.

    Strings and other scalars among the items are handled in the loop rather than by a call
    each (most of a Node's leaves), and a container of scalars only is shared by the C-level
    hash and comparison (``SharedValues.share``'s *scalars*)."""
    kind = type(value)
    if kind is str:
        return sys.intern(value), True
    if kind is dict:
        intern = sys.intern
        copied = {}
        leaf = scalars = True
        for k, v in value.items():
            if type(k) is str:
                k = intern(k)
            child = type(v)
            if child is str:
                v = intern(v)
            elif child is dict or child is list:
                scalars = False
                if k == "metadata" and child is dict:
                    v = _compact_metadata(v, shared)
                    leaf = False
                else:
                    v, held = _compacted(v, shared)
                    leaf = leaf and held
            copied[k] = v
        if leaf:
            return shared.share(copied, scalars), True
        return copied, False
    if kind is list:
        intern = sys.intern
        items = []
        leaf = scalars = True
        for v in value:
            child = type(v)
            if child is str:
                v = intern(v)
            elif child is dict or child is list:
                scalars = False
                v, held = _compacted(v, shared)
                leaf = leaf and held
            items.append(v)
        if leaf:
            return shared.share(items, scalars), True
        return items, False
    return value, True


def _compact_metadata(meta: dict[str, Any], shared: SharedValues) -> dict[str, Any]:
    """An object's metadata: copied (its name, uid, labels and owners are its own), its
    annotations shared when equal, its resourceVersion (no other object holds it) not
    interned."""
    intern = sys.intern
    copied = {}
    for k, v in meta.items():
        if type(k) is str:
            k = intern(k)
        if k == "annotations":
            copied[k] = _compact(v, shared)
        elif k == "resourceVersion":
            copied[k] = v  # one object's version: interning it would only grow the table
        else:
            copied[k] = _unshared(v)
    return copied


def _unshared(value: Any) -> Any:
    """*value* copied with its strings interned, nothing shared (what names one object)."""
    kind = type(value)
    if kind is str:
        return sys.intern(value)
    if kind is dict:
        intern = sys.intern
        return {
            intern(k) if type(k) is str else k: intern(v) if type(v) is str else _unshared(v)
            for k, v in value.items()
        }
    if kind is list:
        return [_unshared(v) for v in value]
    return value


def strip_managed_fields(obj: JSON, intern: bool = True) -> JSON:
    """Default informer transform: drop what controllers never read, to bound memory.

    Removes ``metadata.managedFields`` (often the largest part of a Node) and kubectl's
    last-applied-configuration annotation (a full copy of the object), and interns the keys
    and values of label maps, ``metadata.labels`` and a NodeFeature's ``spec.labels``
    (thousands of Nodes share them: about 5 KiB per Node of the worker). Copies only the
    dicts it changes, so the input is left intact. *intern* false leaves the labels as they
    are, for a caller that interns every string anyway (:func:`compact`).
    """
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    annotations = meta.get("annotations")
    has_last_applied = isinstance(annotations, dict) and LAST_APPLIED_ANNOTATION in annotations
    labels = meta.get("labels") if intern else None
    spec = obj.get("spec")
    spec_labels = spec.get("labels") if intern and type(spec) is dict else None
    if "managedFields" not in meta and not has_last_applied and not labels and not spec_labels:
        return obj
    new_meta = {k: v for k, v in meta.items() if k != "managedFields"}
    if type(labels) is dict:
        new_meta["labels"] = shared_strings(labels)
    if has_last_applied and isinstance(annotations, dict):
        new_meta["annotations"] = {
            k: v for k, v in annotations.items() if k != LAST_APPLIED_ANNOTATION
        }
    if type(spec) is dict and type(spec_labels) is dict and spec_labels:
        return {
            **obj,
            "metadata": new_meta,
            "spec": {**spec, "labels": shared_strings(spec_labels)},
        }
    return {**obj, "metadata": new_meta}


class Indexer:
    """Objects by :func:`object_key`, with named indexes (value -> keys).

    An index function returns the values an object is filed under (none, one or several),
    e.g. a label's value or an owner's name; :meth:`by_index` answers "which objects have
    value v" without a scan.
    """

    def __init__(self) -> None:
        self._items: dict[str, JSON] = {}
        self._index_funcs: dict[str, IndexFunc] = {}
        # index name -> value -> keys
        self._indices: dict[str, dict[str, set[str]]] = {}
        # index name -> key -> values it is filed under (to unfile on update/delete)
        self._filed: dict[str, dict[str, str | tuple[str, ...]]] = {}
        # index name -> how many times a key entered or left one of its values
        self._generations: dict[str, int] = {}

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Register index *name*; objects already stored are indexed at once."""
        if name in self._index_funcs:
            raise ValueError(f"index {name!r} already exists")
        self._index_funcs[name] = fn
        self._indices[name] = {}
        self._filed[name] = {}
        self._generations[name] = 0
        for key, obj in self._items.items():
            self._refile(name, key, obj)

    @property
    def index_names(self) -> list[str]:
        """Names of the registered indexes."""
        return list(self._index_funcs)

    def get(self, key: str) -> JSON | None:
        """The object stored under *key*, or None."""
        return self._items.get(key)

    def list(self) -> list[JSON]:
        """Every stored object (no particular order)."""
        return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        """Every stored key."""
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def by_index(self, name: str, value: str) -> builtins.list[JSON]:
        """Objects filed under *value* in index *name*."""
        return [self._items[key] for key in self.index_keys(name, value)]

    def index_keys(self, name: str, value: str) -> builtins.list[str]:
        """Keys filed under *value* in index *name* (sorted, for stable iteration)."""
        try:
            index = self._indices[name]
        except KeyError:
            raise KeyError(f"no index named {name!r}; add it with add_index first") from None
        return sorted(index.get(value, ()))

    def index_count(self, name: str, value: str) -> int:
        """How many keys are filed under *value* in index *name* (no copy, no sort)."""
        return len(self._indices[name].get(value, ()))

    def index_generation(self, name: str) -> int:
        """A counter that moves whenever a key enters or leaves a value of index *name*
        (an update that files an object where it already was does not move it): a cheap
        way to ask "did this index change?" on every event."""
        return self._generations[name]

    def index_values(self, name: str) -> builtins.list[str]:
        """The values index *name* currently holds at least one object under."""
        return list(self._indices[name])

    # --- writes (the informer's) ------------------------------------------------------------

    def upsert(self, obj: JSON) -> JSON | None:
        """Store *obj* under its key; return the object it replaced, if any."""
        key = object_key(obj)
        old = self._items.get(key)
        self._items[key] = obj
        for name in self._index_funcs:
            self._refile(name, key, obj)
        return old

    def delete(self, key: str) -> JSON | None:
        """Remove *key*; return the object removed, if any."""
        old = self._items.pop(key, None)
        if old is not None:
            for name in self._index_funcs:
                self._unfile(name, key)
        return old

    def _refile(self, name: str, key: str, obj: JSON) -> None:
        """File *key* under the values index *name* gives *obj*, moving only what changed.

        One value is filed as itself, several as a tuple, and every value is interned: an
        index function formats its value anew for each object (a flavor's name for each of
        its thousands of Nodes), and a Node stays filed for the worker's life."""
        try:
            values = tuple(
                sys.intern(v) if type(v) is str else v
                for v in dict.fromkeys(self._index_funcs[name](obj))
            )
        except Exception:
            # A faulty index function must not corrupt the store: the object stays stored,
            # just not filed under this index.
            log.exception("index_function_failed", index=name, key=key)
            values = ()
        filed: str | tuple[str, ...] = values[0] if len(values) == 1 else values
        if self._filed[name].get(key, ()) == filed:
            return
        self._unfile(name, key)
        if not values:
            return
        self._filed[name][key] = filed
        index = self._indices[name]
        for value in values:
            index.setdefault(value, set()).add(key)
        self._generations[name] += 1

    def _unfile(self, name: str, key: str) -> None:
        filed = self._filed[name].pop(key, None)
        if filed is None:
            return
        self._generations[name] += 1
        index = self._indices[name]
        for value in (filed,) if type(filed) is str else filed:
            keys = index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[value]
