"""Kueue Topologies of the TAS flavors (docs/topology.md, "Order of creation and deletion").

Key: the Topology name (``gpustack-topology-<levels digest>``). The managed Nodes whose
group names it come from the Node index; with one whose levels hash to the name, the
Topology is created with those levels. A Topology's levels never change (its name is their
digest), so an existing one is never patched. With no node left and no flavor naming it,
a Topology carrying the managed-by label is deleted; Kueue's ``resource-in-use`` finalizer
keeps it while a flavor still refers to it. Flavor events reach the Topology they name, so
the last flavor's deletion brings it here.
"""

from __future__ import annotations

from typing import Any, Final

from gpustack_operator.domain.chain.topology import topology_manifest
from gpustack_operator.domain.node.nodetopology import (
    TopologyPolicy,
    node_levels,
    parse_group,
    topology_name,
    topology_name_of_digest,
)
from gpustack_operator.domain.nodeview import is_deleting
from gpustack_operator.runtime.controller import Controller, ControllerBuilder, Request
from gpustack_operator.runtime.resources import NODES, Resource
from gpustack_operator.worker.caches import BY_TOPOLOGY, KueueCaches
from gpustack_operator.worker.common import (
    METADATA_OR_SPEC_CHANGED,
    NodeChanged,
    Writer,
    is_managed_object,
)

NAME: Final = "topology"


class TopologyReconciler:
    def __init__(
        self, caches: KueueCaches, writer: Writer, policy: TopologyPolicy, resource: Resource
    ) -> None:
        self.caches = caches
        self.writer = writer
        self.policy = policy
        self.resource = resource

    def _levels(self, name: str) -> tuple[str, ...] | None:
        for node in self.caches.managed_nodes(BY_TOPOLOGY, name):
            levels = node_levels(node, self.policy)
            if levels and topology_name(levels) == name:
                return levels
        return None

    def _named_by_a_flavor(self, name: str) -> bool:
        return any(
            (f.get("spec") or {}).get("topologyName") == name
            for f in self.caches.flavors.indexer.list()
        )

    async def __call__(self, request: Request) -> None:
        name = request.name
        assert self.caches.topologies is not None
        have = self.caches.topologies.indexer.get(name)
        levels = self._levels(name)
        if have is not None and not is_managed_object(have):
            if levels is not None:
                self.writer.not_ours(self.resource, have)
            return
        if levels is None:
            if have is not None and not is_deleting(have) and not self._named_by_a_flavor(name):
                await self.writer.delete(self.resource, have, "no managed node has this topology")
            return
        if have is None:
            want = topology_manifest(levels, self.caches.kueue.version)
            await self.writer.apply(self.resource, want, existed=False)


def build_topology_controller(
    builder: ControllerBuilder,
    caches: KueueCaches,
    writer: Writer,
    *,
    workers: int,
    policy: TopologyPolicy,
) -> Controller:
    """The Topology controller; only while TAS is on (``caches.topologies`` is set)."""
    assert caches.topologies is not None and caches.kueue.topologies is not None
    resource = caches.kueue.topologies

    def by_node(node: dict[str, Any]) -> list[str]:
        # managed or not: a node leaving the pools must still reach its old Topology
        parsed = parse_group(caches.facts.model(node).group)
        return [topology_name_of_digest(parsed[0])] if parsed else []

    def by_flavor(flavor: dict[str, Any]) -> list[str]:
        name = (flavor.get("spec") or {}).get("topologyName")
        return [str(name)] if name else []

    return (
        builder.for_(resource, METADATA_OR_SPEC_CHANGED)
        .watches(NODES, by_node, NodeChanged(caches.facts))
        .watches(caches.kueue.resource_flavors, by_flavor, METADATA_OR_SPEC_CHANGED)
        .with_options(max_concurrent_reconciles=workers)
        .complete(TopologyReconciler(caches, writer, policy, resource))
    )
