"""Keys that never settle: one key reconciled again and again, without end.

A reconcile that writes, sees its write undone and writes again (an object made for a Node
the API server no longer has, deleted by the garbage collector as soon as it is made) runs
dozens of times a second for as long as its cause lasts. Such a loop is the visible sign of a
cache that disagrees with the API server. :class:`KeyChurn` counts each key's reconciles in
fixed windows; a key reconciled at least ``limit`` times within one window is *churning*
until a whole window passes below the limit (docs/runtime.md, "Keys that never settle").
Memory is two numbers per key, so a cluster of thousands of nodes costs little.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["KeyChurn"]


@dataclass
class _Window:
    start: float
    count: int = 0
    previous: int = 0  # reconciles in the window before, when it ended less than one ago


@dataclass
class KeyChurn:
    """Counts reconciles per key; says which keys are churning."""

    limit: int = 600
    window: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _keys: dict[str, _Window] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.limit < 1 or self.window <= 0:
            raise ValueError(
                f"churn limit must be >= 1 and window > 0, got {self.limit} and {self.window}"
            )

    def record(self, key: str) -> bool:
        """Count one reconcile of *key*; True when this one made it churning."""
        now = self.clock()
        w = self._keys.get(key)
        if w is None:
            w = self._keys[key] = _Window(now)
        elif now - w.start >= self.window:
            previous = w.count if now - w.start < 2 * self.window else 0
            w = self._keys[key] = _Window(now, previous=previous)
        w.count += 1
        return w.count == self.limit and w.previous < self.limit

    def churning(self) -> dict[str, int]:
        """Churning keys and their most reconciles in one window; quiet keys are forgotten."""
        now = self.clock()
        out: dict[str, int] = {}
        for key, w in list(self._keys.items()):
            age = now - w.start
            if age >= 2 * self.window:
                del self._keys[key]
                continue
            current = w.count if age < self.window else 0
            previous = w.previous if age < self.window else w.count
            if max(current, previous) >= self.limit:
                out[key] = max(current, previous)
        return out
