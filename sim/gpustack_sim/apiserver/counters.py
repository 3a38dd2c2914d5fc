"""Request counters by audit verb and kind, read by tests and benchmarks.

Verbs are Kubernetes audit verbs: get, list, watch, create, update, patch, delete,
deletecollection. A server-side apply is a PATCH, so it counts under ``patch``; it is also
counted under ``apply`` so benchmarks can tell applies apart (``writes()`` does not count it
twice). Requests to a ``/status`` subresource count under the object's kind.
"""

from __future__ import annotations

from collections import Counter

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
REJECTED = "rejected"
"""Pseudo-verb: writes answered with an error, counted by status code (``get(REJECTED,
"422")``: those a schema or CEL rule turned down)."""


class RequestCounters:
    """How many API requests the simulated server answered, by (verb, kind)."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()

    def record(self, verb: str, kind: str) -> None:
        self._counts[(verb, kind)] += 1

    def get(self, verb: str, kind: str = "*") -> int:
        """Requests with ``verb`` for ``kind`` (a Kind name such as "Node", or "*" for all)."""
        if kind == "*":
            return sum(n for (v, _), n in self._counts.items() if v == verb)
        return self._counts[(verb, kind)]

    def snapshot(self) -> dict[tuple[str, str], int]:
        """A copy of every non-zero count, keyed by (verb, kind)."""
        return dict(self._counts)

    def reset(self) -> None:
        self._counts.clear()

    def writes(self, kind: str = "*") -> int:
        """create + update + patch (applies included) + delete + deletecollection requests."""
        return sum(self.get(verb, kind) for verb in WRITE_VERBS)
