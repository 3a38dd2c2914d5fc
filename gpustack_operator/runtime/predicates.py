"""Event filters applied before a watch enqueues anything (controller-runtime's predicates).

A predicate answers, per informer event, "is this worth a reconcile?". Updates are the common
case to filter: a status-only write bumps ``resourceVersion`` but not ``metadata.generation``,
so :data:`GENERATION_CHANGED` lets a controller ignore its own status writes.

Predicates combine with ``&``, ``|`` and ``~`` (or :func:`and_`, :func:`or_`, :func:`not_`).
A plain callable ``fn(obj) -> bool`` is accepted wherever a predicate is, through
:func:`from_func`: it sees the object of a create/delete and the *new* object of an update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "ANNOTATIONS_CHANGED",
    "GENERATION_CHANGED",
    "LABELS_CHANGED",
    "RESOURCE_VERSION_CHANGED",
    "Marks",
    "Predicate",
    "PredicateLike",
    "and_",
    "as_predicate",
    "from_func",
    "not_",
    "or_",
]

Obj = dict[str, Any]
"""Objects as informers deliver them: JSON dicts."""


class Predicate:
    """Accepts every event; subclasses override the event kinds they filter."""

    def create(self, obj: Obj) -> bool:
        return True

    def update(self, old: Obj, new: Obj) -> bool:
        return True

    def delete(self, obj: Obj) -> bool:
        return True

    def __and__(self, other: Predicate) -> Predicate:
        return and_(self, other)

    def __or__(self, other: Predicate) -> Predicate:
        return or_(self, other)

    def __invert__(self) -> Predicate:
        return not_(self)


class Marks(Predicate):
    """Passes every event; notes keys that a later reconcile takes.

    Subclasses mark keys from their event methods (what the event showed that the object's
    state alone will not: a label taken, an object deleted); the reconcile reads and clears
    a key's mark with :meth:`take`, and marks it again with :meth:`mark` when what it did
    with the mark failed, so the retry sees it too.
    """

    def __init__(self) -> None:
        self._marked: set[str] = set()

    def mark(self, key: str) -> None:
        self._marked.add(key)

    def take(self, key: str) -> bool:
        """Whether *key* was marked since the last call (and clear the mark)."""
        if key in self._marked:
            self._marked.discard(key)
            return True
        return False


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class _MetadataFieldChanged(Predicate):
    """Passes creates and deletes, and updates whose ``metadata.<field>`` differs."""

    def __init__(self, field: str, default: Any) -> None:
        self.field = field
        self.default = default

    def update(self, old: Obj, new: Obj) -> bool:
        before: object = _meta(old).get(self.field, self.default)
        after: object = _meta(new).get(self.field, self.default)
        return before != after

    def __repr__(self) -> str:
        return f"<{self.field} changed>"


GENERATION_CHANGED: Predicate = _MetadataFieldChanged("generation", None)
"""Updates that changed ``metadata.generation`` (spec changes; not status or metadata)."""
LABELS_CHANGED: Predicate = _MetadataFieldChanged("labels", {})
"""Updates that changed ``metadata.labels``."""
ANNOTATIONS_CHANGED: Predicate = _MetadataFieldChanged("annotations", {})
"""Updates that changed ``metadata.annotations``."""
RESOURCE_VERSION_CHANGED: Predicate = _MetadataFieldChanged("resourceVersion", None)
"""Updates that are real writes (drops the periodic resync's ``update(obj, obj)``)."""


class _And(Predicate):
    def __init__(self, parts: tuple[Predicate, ...]) -> None:
        self.parts = parts

    def create(self, obj: Obj) -> bool:
        return all(p.create(obj) for p in self.parts)

    def update(self, old: Obj, new: Obj) -> bool:
        return all(p.update(old, new) for p in self.parts)

    def delete(self, obj: Obj) -> bool:
        return all(p.delete(obj) for p in self.parts)


class _Or(Predicate):
    def __init__(self, parts: tuple[Predicate, ...]) -> None:
        self.parts = parts

    def create(self, obj: Obj) -> bool:
        return any(p.create(obj) for p in self.parts)

    def update(self, old: Obj, new: Obj) -> bool:
        return any(p.update(old, new) for p in self.parts)

    def delete(self, obj: Obj) -> bool:
        return any(p.delete(obj) for p in self.parts)


class _Not(Predicate):
    def __init__(self, inner: Predicate) -> None:
        self.inner = inner

    def create(self, obj: Obj) -> bool:
        return not self.inner.create(obj)

    def update(self, old: Obj, new: Obj) -> bool:
        return not self.inner.update(old, new)

    def delete(self, obj: Obj) -> bool:
        return not self.inner.delete(obj)


class _Func(Predicate):
    def __init__(self, fn: Callable[[Obj], bool]) -> None:
        self.fn = fn

    def create(self, obj: Obj) -> bool:
        return bool(self.fn(obj))

    def update(self, old: Obj, new: Obj) -> bool:
        return bool(self.fn(new))

    def delete(self, obj: Obj) -> bool:
        return bool(self.fn(obj))


PredicateLike = Predicate | Callable[[Obj], bool]
"""A :class:`Predicate`, or a callable on one object (see :func:`from_func`)."""


def from_func(fn: Callable[[Obj], bool]) -> Predicate:
    """A predicate from ``fn(obj) -> bool``, applied to the new object of an update."""
    return _Func(fn)


def as_predicate(p: PredicateLike) -> Predicate:
    """Return *p* itself, or wrap a plain callable with :func:`from_func`."""
    if isinstance(p, Predicate):
        return p
    if callable(p):
        return from_func(p)
    raise TypeError(f"expected a Predicate or a callable(obj) -> bool, got {p!r}")


def and_(*parts: PredicateLike) -> Predicate:
    """Passes an event only when every part passes it (no parts: passes everything; one
    part: that part itself, with no wrapper to call through per event)."""
    if len(parts) == 1:
        return as_predicate(parts[0])
    return _And(tuple(as_predicate(p) for p in parts))


def or_(*parts: PredicateLike) -> Predicate:
    """Passes an event when any part passes it (no parts: passes nothing)."""
    return _Or(tuple(as_predicate(p) for p in parts))


def not_(p: PredicateLike) -> Predicate:
    """Inverts *p* for every event kind."""
    return _Not(as_predicate(p))
