"""How the fields of a managed object are compared with what the cluster holds.

Each kind the operator writes declares, next to its definition, which fields it owns whole
(:attr:`Compare.EXACT`: a map whose keys shrink, a list that loses an item, is a difference)
and which the API server may add to (:attr:`Compare.CONTAINS`: defaults tolerated);
docs/worker.md, "Writes and ownership". A field a declaration does not name falls back to the
declaration's ``others``, exact for the Kueue kinds and NodeFeatures, so a field added later
is rewritten when its keys shrink without anyone remembering to list it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Compare(Enum):
    EXACT = "exact"
    """Equal as a whole; an absent map or list equals an empty one."""
    CONTAINS = "contains"
    """What is wanted is found in what is held: maps may hold more keys (server defaults),
    lists match item by item."""


@dataclass(frozen=True)
class ObjectComparison:
    """Per field path (``spec.nodeLabels``; ``data``) how it is compared; every other field
    of the object body (besides ``apiVersion``, ``kind``, ``metadata``, ``status``) by
    *others*. A path's parents are walked into, never compared whole."""

    fields: Mapping[str, Compare] = field(default_factory=dict)
    others: Compare = Compare.EXACT

    def matches(self, have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
        """Whether *have*'s body says everything *want*'s does, field by field."""
        body = {k: v for k, v in want.items() if k not in _NOT_BODY}
        return self._matches(have, body, "")

    def _matches(self, have: object, want: Mapping[str, Any], prefix: str) -> bool:
        held = have if isinstance(have, Mapping) else {}
        for key, wanted in want.items():
            path = f"{prefix}{key}"
            mode = self.fields.get(path)
            if mode is None and isinstance(wanted, Mapping) and self._walks_into(path):
                if not self._matches(held.get(key), wanted, f"{path}."):
                    return False
                continue
            if not _compare(mode or self.others, held.get(key), wanted):
                return False
        return True

    def _walks_into(self, path: str) -> bool:
        return any(p.startswith(f"{path}.") for p in self.fields)


_NOT_BODY = frozenset({"apiVersion", "kind", "metadata", "status"})


def _compare(mode: Compare, have: object, want: object) -> bool:
    if mode is Compare.CONTAINS:
        return contains(have, want)
    if have is None and isinstance(want, Mapping | list) and not want:
        return True  # absent equals empty: a list that must lose every item
    return have == want


def contains(have: object, want: object) -> bool:
    """*want* is found in *have*: maps may hold more keys (server defaults), lists match
    item by item, scalars are equal."""
    if isinstance(want, Mapping):
        if not isinstance(have, Mapping):
            return False
        return all(k in have and contains(have[k], v) for k, v in want.items())
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return False
        return all(contains(h, w) for h, w in zip(have, want, strict=True))
    return have == want
