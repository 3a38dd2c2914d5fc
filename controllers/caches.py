"""The shared informers and indexes the queue reconcilers read (one of each per manager).

Indexes make every reconcile proportional to the objects it touches: Nodes by the flavor,
queue and cohort names of their profiles (managed nodes only: the index *is* the node count
SPEC §6.2 speaks of), ResourceFlavors by their target queue and cohort annotations,
ClusterQueues by cohort, LocalQueues by namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from controllers.common import index_values
from gpustack_operator.apis import KueueResources
from gpustack_operator.domain.flavors import node_profile_names, node_profiles
from gpustack_operator.domain.labels import COHORT_ANNOTATION, QUEUE_ANNOTATION
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.nodeview import annotations_of
from gpustack_operator.domain.queues import cluster_queue_cohort
from gpustack_operator.runtime.cache import namespace_index
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.resources import NAMESPACES, NODES

BY_FLAVOR: Final = "flavor"
BY_QUEUE: Final = "queue"
BY_COHORT: Final = "cohort"
BY_NAMESPACE: Final = "namespace"


def add_node_indexes(nodes: Informer, manufacturers: Mapping[str, Manufacturer]) -> None:
    """Managed Nodes by flavor, queue and cohort name (idempotent)."""
    existing = set(nodes.indexer.index_names)
    for part in (BY_FLAVOR, BY_QUEUE, BY_COHORT):
        if part in existing:
            continue

        def index(obj: dict[str, Any], part: Any = part) -> list[str]:
            return node_profile_names(obj, manufacturers, part)

        nodes.add_index(part, index)


def node_names(
    node: Mapping[str, Any], manufacturers: Mapping[str, Manufacturer], part: str
) -> list[str]:
    """The flavor/queue/cohort names a Node's labels describe, managed or not.

    Event mapping uses this rather than the index: a node relabelled unmanaged or being
    deleted must still reach the objects it used to count for.
    """
    return index_values(getattr(p, part) for p in node_profiles(node, manufacturers))


def _annotation_index(key: str) -> Any:
    def index(obj: dict[str, Any]) -> list[str]:
        return index_values([annotations_of(obj).get(key, "")])

    return index


def _cohort_index(obj: dict[str, Any]) -> list[str]:
    return index_values([cluster_queue_cohort(obj)])


@dataclass
class KueueCaches:
    """Informers (with their indexes) of everything the four queue reconcilers read."""

    kueue: KueueResources
    manufacturers: Mapping[str, Manufacturer]
    nodes: Informer
    namespaces: Informer
    flavors: Informer
    cohorts: Informer
    cluster_queues: Informer
    local_queues: Informer

    @classmethod
    def create(
        cls,
        manager: Manager,
        kueue: KueueResources,
        manufacturers: Mapping[str, Manufacturer],
    ) -> KueueCaches:
        nodes = manager.informer(NODES)
        add_node_indexes(nodes, manufacturers)
        flavors = manager.informer(kueue.resource_flavors)
        _ensure_index(flavors, BY_QUEUE, _annotation_index(QUEUE_ANNOTATION))
        _ensure_index(flavors, BY_COHORT, _annotation_index(COHORT_ANNOTATION))
        cluster_queues = manager.informer(kueue.cluster_queues)
        _ensure_index(cluster_queues, BY_COHORT, _cohort_index)
        local_queues = manager.informer(kueue.local_queues)
        _ensure_index(local_queues, BY_NAMESPACE, namespace_index)
        return cls(
            kueue=kueue,
            manufacturers=manufacturers,
            nodes=nodes,
            namespaces=manager.informer(NAMESPACES),
            flavors=flavors,
            cohorts=manager.informer(kueue.cohorts),
            cluster_queues=cluster_queues,
            local_queues=local_queues,
        )

    def managed_nodes(self, part: str, name: str) -> list[dict[str, Any]]:
        """Managed Nodes whose profiles name *name* as their flavor/queue/cohort, by name."""
        return sorted(self.nodes.indexer.by_index(part, name), key=lambda n: n["metadata"]["name"])

    def informers(self) -> Iterable[Informer]:
        return (
            self.nodes,
            self.namespaces,
            self.flavors,
            self.cohorts,
            self.cluster_queues,
            self.local_queues,
        )


def _ensure_index(informer: Informer, name: str, fn: Any) -> None:
    if name not in informer.indexer.index_names:
        informer.add_index(name, fn)
