"""The shared informers and indexes the queue reconcilers read (one of each per manager).

Indexes make every reconcile proportional to the objects it touches: Nodes by the flavor,
queue and cohort names of their profiles (managed nodes only: the index *is* the node count
docs/worker.md speaks of; profiles come from the shared :class:`NodeModels`), ResourceFlavors by
their target queue and cohort annotations, ClusterQueues by cohort and team queues by pool,
LocalQueues by namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpustack_operator.apis import KueueResources
from gpustack_operator.domain.chain.queues import cluster_queue_cohort
from gpustack_operator.domain.chain.teams import Teams, pool_of
from gpustack_operator.domain.chain.tenancy import TenantSettings
from gpustack_operator.domain.labels import COHORT_ANNOTATION, QUEUE_ANNOTATION
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.nodetopology import (
    TopologyPolicy,
    parse_group,
    topology_name_of_digest,
)
from gpustack_operator.domain.node.taints import TolerationPolicy
from gpustack_operator.domain.nodeview import annotations_of
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.runtime.cache import namespace_index
from gpustack_operator.runtime.coalesce import IndexHold
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.resources import NAMESPACES, NODES, RESOURCE_SLICES
from gpustack_operator.worker.common import index_values
from gpustack_operator.worker.liveteams import LiveTeams
from gpustack_operator.worker.nodemodels import NodeModels, Part
from gpustack_operator.worker.tenantview import TenantView

BY_FLAVOR: Final = "flavor"
BY_QUEUE: Final = "queue"
BY_COHORT: Final = "cohort"
BY_NAMESPACE: Final = "namespace"
BY_POOL: Final = "pool"
"""ClusterQueue index: a team queue under its pool's name (docs/teams.md)."""
BY_TOPOLOGY: Final = "topology"
"""Node index: managed Nodes by the Topology their group names (docs/topology.md)."""
BY_SLICE_NODE: Final = "resourceslice-node"
"""ResourceSlice index: the slices of one Node (DRA), read by the capacity and unpooled
controllers."""
AWAITING_LABELS: Final = "awaiting-labels"
"""Node index: the Nodes that do not carry their capacity labels yet, under "yes"."""
_YES: Final = "yes"
SETTLING_STALL: Final = 10.0
"""Seconds without a Node entering or leaving :data:`AWAITING_LABELS` after which the fleet
no longer counts as settling (a node NFD never labels cannot hold the queues for good)."""


def node_models(
    nodes: Informer,
    manufacturers: Mapping[str, Manufacturer],
    publishes_labels: bool = True,
    topology: TopologyPolicy | None = None,
    tolerations: TolerationPolicy = None,
) -> NodeModels:
    """A :class:`NodeModels` for the Node informer *nodes*, sized by its Node count. Create
    one per informer and share it: the cache pays off when every user asks the same one.
    *publishes_labels* is False in a vCluster tenant (no capacity labels to await)."""
    models = NodeModels(
        manufacturers,
        size_hint=lambda: len(nodes.indexer),
        publishes_labels=publishes_labels,
        topology=topology,
        tolerations=tolerations,
    )
    nodes.on_released(models.release)  # no model kept of a version the cache replaced
    return models


def add_node_indexes(nodes: Informer, facts: NodeModels) -> None:
    """Managed Nodes by flavor, queue and cohort name, and the Nodes awaiting their capacity
    labels (idempotent)."""
    existing = set(nodes.indexer.index_names)
    if AWAITING_LABELS not in existing:
        nodes.add_index(AWAITING_LABELS, lambda obj: [_YES] if facts.awaits_labels(obj) else [])
    if BY_TOPOLOGY not in existing:

        def by_topology(obj: dict[str, Any]) -> list[str]:
            model = facts.model(obj)
            return topology_index_of(model.group) if model.managed else []

        nodes.add_index(BY_TOPOLOGY, by_topology)
    for part in (BY_FLAVOR, BY_QUEUE, BY_COHORT):
        if part in existing:
            continue

        def index(obj: dict[str, Any], part: Part = part) -> list[str]:
            return facts.index_names(obj, part)

        nodes.add_index(part, index)


def fleet_settling(nodes: Informer) -> IndexHold:
    """The ClusterQueues' hold: Nodes are on their way to the capacity labels the worker
    published for them (start-up on an unprofiled cluster, a fleet joining), read from the
    :data:`AWAITING_LABELS` index of *nodes*."""
    return IndexHold(nodes, AWAITING_LABELS, _YES, stall=SETTLING_STALL)


def _annotation_index(key: str) -> Any:
    def index(obj: dict[str, Any]) -> list[str]:
        return index_values([annotations_of(obj).get(key, "")])

    return index


def _pool_index(obj: dict[str, Any]) -> list[str]:
    return index_values([pool_of(obj)])


def _cohort_index(obj: dict[str, Any]) -> list[str]:
    return index_values([cluster_queue_cohort(obj)])


@dataclass
class KueueCaches:
    """Informers (with their indexes) of everything the four queue reconcilers read."""

    kueue: KueueResources
    facts: NodeModels
    nodes: Informer
    namespaces: Informer
    flavors: Informer
    cohorts: Informer
    cluster_queues: Informer
    local_queues: Informer
    tenant: TenantView | None = None
    topologies: Informer | None = None
    """Kueue Topologies, while TAS is on (docs/topology.md)."""
    """In a shared-node or pseudo-node tenant, the Nodes as its pools see them
    (docs/tenants.md); ``None`` in an ordinary cluster."""
    teams: LiveTeams | None = None
    """The teams declaration in force (docs/teams.md); ``None``: the policy's alone."""

    @classmethod
    def create(
        cls,
        manager: Manager,
        kueue: KueueResources,
        facts: NodeModels,
        tenant: TenantSettings | None = None,
    ) -> KueueCaches:
        """The caches on *manager*'s shared informers; *facts* is the Node informer's
        :class:`NodeModels` (:func:`node_models`); *tenant*, the tenant settings."""
        nodes = manager.informer(NODES)
        add_node_indexes(nodes, facts)
        flavors = manager.informer(kueue.resource_flavors)
        _ensure_index(flavors, BY_QUEUE, _annotation_index(QUEUE_ANNOTATION))
        _ensure_index(flavors, BY_COHORT, _annotation_index(COHORT_ANNOTATION))
        cluster_queues = manager.informer(kueue.cluster_queues)
        _ensure_index(cluster_queues, BY_COHORT, _cohort_index)
        _ensure_index(cluster_queues, BY_POOL, _pool_index)
        local_queues = manager.informer(kueue.local_queues)
        _ensure_index(local_queues, BY_NAMESPACE, namespace_index)
        return cls(
            kueue=kueue,
            facts=facts,
            nodes=nodes,
            namespaces=manager.informer(NAMESPACES),
            flavors=flavors,
            cohorts=manager.informer(kueue.cohorts),
            cluster_queues=cluster_queues,
            local_queues=local_queues,
            topologies=(
                manager.informer(kueue.topologies)
                if kueue.topologies is not None and facts.topology is not None
                else None
            ),
            tenant=(
                TenantView(nodes, facts, tenant)
                if tenant is not None and tenant.is_tenant
                else None
            ),
        )

    @property
    def manufacturers(self) -> Mapping[str, Manufacturer]:
        return self.facts.manufacturers

    def managed_nodes(self, part: str, name: str) -> list[dict[str, Any]]:
        """Managed Nodes whose profiles name *name* as their flavor/queue/cohort, by name."""
        if self.tenant is not None:
            return self.tenant.members(part, name)
        return sorted(self.nodes.indexer.by_index(part, name), key=lambda n: n["metadata"]["name"])

    def event_names(self, node: dict[str, Any], part: Part) -> list[str]:
        """The *part* names a Node event reaches (in a tenant: the whole fleet's)."""
        if self.tenant is not None:
            return self.tenant.event_names(part)
        return self.facts.names(node, part)

    def teams_for(self, policy: ChainPolicy) -> Teams | None:
        """The teams in force: the live declaration's, else the policy's (docs/teams.md)."""
        return self.teams.current() if self.teams is not None else policy.teams

    def informers(self) -> Iterable[Informer]:
        return (
            self.nodes,
            self.namespaces,
            self.flavors,
            self.cohorts,
            self.cluster_queues,
            self.local_queues,
            *((self.topologies,) if self.topologies is not None else ()),
        )


def topology_index_of(group: str) -> list[str]:
    """The Topology a managed node's *group* names (none for ``""``)."""
    parsed = parse_group(group)
    return [topology_name_of_digest(parsed[0])] if parsed else []


def _ensure_index(informer: Informer, name: str, fn: Any) -> None:
    if name not in informer.indexer.index_names:
        informer.add_index(name, fn)


def slices_by_node(manager: Manager) -> Informer:
    """*manager*'s ResourceSlice informer with its :data:`BY_SLICE_NODE` index, added by
    whichever of the capacity and unpooled controllers is set up first (a vCluster tenant
    runs only the second, docs/tenants.md, "Shared host nodes")."""
    slices = manager.informer(RESOURCE_SLICES)
    if BY_SLICE_NODE not in slices.indexer.index_names:
        slices.add_index(BY_SLICE_NODE, slice_node)
    return slices


def slice_node(resource_slice: Mapping[str, Any]) -> list[str]:
    """The Node a ResourceSlice describes (``spec.nodeName``), as an index value or key."""
    spec = resource_slice.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return [node] if isinstance(node, str) and node else []
