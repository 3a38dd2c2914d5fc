"""The recent writes to the simulated server, for saying WHAT kept a cluster from settling.

:meth:`SimCluster.converge` fails with "the chain matched but the cluster kept changing"
when the chain is right but the server never stays still; that alone names nothing. A
``WriteLog`` is a commit hook on the store: it keeps the last writes (bounded), each with
the object it touched, the field manager that wrote it and the fields that changed, so the
failure can list the objects that kept being written and by whom.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpustack_sim.apiserver.store import Event, ResourceId, Store

IGNORED_METADATA = frozenset({"resourceVersion", "managedFields", "generation"})


@dataclass(frozen=True, slots=True)
class Write:
    """One committed change (the store's event, never mutated), described only when a
    failure needs it: a commit hook must stay cheap."""

    at: float
    event: Event
    rid: ResourceId

    @property
    def type(self) -> str:
        return self.event.type

    @property
    def kind(self) -> str:
        return str(self.event.obj.get("kind") or self.rid[1])

    @property
    def name(self) -> str:
        return _name(self.event.obj)

    @property
    def manager(self) -> str:
        return _manager(self.event)

    @property
    def changed(self) -> tuple[str, ...]:
        prev = self.event.prev
        return () if prev is None else tuple(changed_paths(prev, self.event.obj))


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _manager(event: Event) -> str:
    """The field manager whose entry this write added or changed (else the last one)."""
    entries = (event.obj.get("metadata") or {}).get("managedFields") or []
    before = ((event.prev or {}).get("metadata") or {}).get("managedFields") or []
    for entry in entries:
        if entry not in before:
            return str(entry.get("manager") or "?")
    return str(entries[-1].get("manager") or "?") if entries else "?"


def changed_paths(old: Any, new: Any, prefix: str = "", depth: int = 3) -> list[str]:
    """The dotted paths, at most *depth* deep, where *old* and *new* differ (server-kept
    metadata aside)."""
    if old == new:
        return []
    if depth == 0 or not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return [prefix or "."]
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        if prefix == "metadata" and key in IGNORED_METADATA:
            continue
        path = f"{prefix}.{key}" if prefix else str(key)
        out += changed_paths(old.get(key), new.get(key), path, depth - 1)
    return out


class WriteLog:
    """The last *size* writes to *store*, kept while installed (a context manager)."""

    def __init__(self, store: Store, size: int = 2000, clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.writes: deque[Write] = deque(maxlen=size)
        self.clock = clock
        self._remove: Callable[[], None] | None = None

    def __enter__(self) -> WriteLog:
        self._remove = self.store.add_commit_hook(self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None

    def _record(self, event: Event, rid: ResourceId) -> None:
        self.writes.append(Write(self.clock(), event, rid))

    def summary(self, since: float, limit: int = 8) -> list[str]:
        """The objects written since *since*, most written first: kind, name, how many
        writes, by whom, and which fields changed."""
        recent = [w for w in self.writes if w.at >= since]
        counts = Counter((w.kind, w.name) for w in recent)
        out: list[str] = []
        for (kind, name), count in counts.most_common(limit):
            mine = [w for w in recent if (w.kind, w.name) == (kind, name)]
            managers = sorted({w.manager for w in mine})
            types = sorted({w.type for w in mine})
            fields = sorted({path for w in mine for path in w.changed})
            out.append(
                f"{kind} {name}: {count} write(s) ({', '.join(types)}) by "
                f"{', '.join(managers)}; changed {', '.join(fields[:6]) or 'nothing'}"
                + (" ..." if len(fields) > 6 else "")
            )
        if len(counts) > limit:
            out.append(f"... and {len(counts) - limit} more object(s) written")
        return out
