"""A shared-node tenant's Nodes as its pools see them, for the queue reconcilers.

In a vCluster tenant no NodeFeature is written, so the capacity labels the queue reconcilers
read are never on the Nodes: they are derived in memory (``domain.tenancy.tenant_fleet``,
docs/tenants.md, "Shared host nodes"). Pools the host's labels cannot tell apart are merged,
which depends on the whole fleet, so the view is recomputed from the Node cache whenever
what the worker reads of a Node changes, and a Node event reaches every flavor, queue and
cohort of the fleet before and after it (a tenant's fleet is small; docs/tenants.md, "Cost").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpustack_operator.domain.chain.tenancy import TenantSettings, tenant_fleet
from gpustack_operator.domain.node.nodeprofiles import is_managed
from gpustack_operator.domain.nodeview import name_of, uid_of
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.worker.nodemodels import NodeModels, Part

_PARTS: tuple[Part, ...] = ("flavor", "queue", "cohort")


def _uid(entry: tuple[str, tuple[Any, ...]]) -> str:
    return entry[0]


@dataclass
class _Snapshot:
    members: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    """part -> name -> managed effective Nodes, by name."""


class TenantView:
    """The tenant fleet of a Node informer, recomputed when a Node changes."""

    def __init__(self, nodes: Informer, facts: NodeModels, settings: TenantSettings) -> None:
        self.nodes = nodes
        self.facts = facts
        self.settings = settings
        self._key: tuple[tuple[str, tuple[Any, ...]], ...] | None = None
        self._current = _Snapshot()
        self._previous = _Snapshot()

    def _snapshot(self) -> _Snapshot:
        cached = self.nodes.indexer.list()
        # What the pools depend on (NodeModels.view, cached per Node version): a status
        # update that changes none of it reuses the last fleet.
        key = tuple(sorted(((uid_of(n), self.facts.view(n)) for n in cached), key=_uid))
        if key != self._key:
            fleet = tenant_fleet(
                cached,
                self.facts.manufacturers,
                virtual_scheduler=self.settings.virtual_scheduler,
            )
            snapshot = _Snapshot({part: {} for part in _PARTS})
            for node in fleet.nodes:
                if not is_managed(node):
                    continue
                for part in _PARTS:
                    for name in self.facts.names(node, part):
                        snapshot.members[part].setdefault(name, []).append(node)
            self._previous, self._current, self._key = self._current, snapshot, key
        return self._current

    def members(self, part: str, name: str) -> list[dict[str, Any]]:
        """The managed Nodes (capacity labels merged) whose profiles name *name*, by name."""
        return sorted(self._snapshot().members.get(part, {}).get(name, []), key=name_of)

    def event_names(self, part: Part) -> list[str]:
        """Every *part* name of the fleet now and before the last change: where a Node
        event may have moved quota or a selector."""
        current = self._snapshot()
        names = set(current.members.get(part, {})) | set(self._previous.members.get(part, {}))
        return sorted(names)
