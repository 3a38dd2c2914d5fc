"""ResourceFlavors (docs/worker.md) and their cleanup (docs/worker.md), one reconciler.

Key: the flavor name. The managed Nodes whose profiles name the flavor come from the Node
index; with at least one, the flavor is applied as the per-flavor function ``plan`` uses
too (``node_flavor``) renders it from the first node by name (it provides the notes) with
the tolerations the dedication taints of all those nodes need (docs/worker.md,
"Tolerations"). With
none, a flavor carrying the managed-by label is deleted (Kueue's ``resource-in-use``
finalizer keeps it until no ClusterQueue lists it). A flavor of the same name without the
label was made by a person: it is left alone and reported with a Warning Event. Node
updates are mapped to the flavor names of both the old and the new Node, so a node that
stops carrying a flavor still reaches it.

A declared pool's flavor (docs/autoscaling.md, "In the worker") is written here too, from the
pools' registry and the per-pool function ``plan`` uses, and deleted once no pool wants it;
the pools' changes arrive on the wiring's channel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import structlog

from gpustack_operator.domain.chain.declaredpools import is_pool_chain_object
from gpustack_operator.domain.chain.kueueusage import flavor_in_use, queue_usage, usage_fields
from gpustack_operator.domain.chain.nodepool import node_flavor
from gpustack_operator.domain.labels import QUEUE_ANNOTATION, TOPOLOGY_LABEL
from gpustack_operator.domain.node.nodetopology import manifests_digest, parse_group, tas_queue_name
from gpustack_operator.domain.nodeview import annotations_of, is_deleting, name_of
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.profiles import strip_tas_suffix
from gpustack_operator.runtime.channel import Channel
from gpustack_operator.runtime.coalesce import Coalesce
from gpustack_operator.runtime.controller import Controller, ControllerBuilder, Request
from gpustack_operator.runtime.predicates import Predicate
from gpustack_operator.runtime.resources import NODES
from gpustack_operator.worker.caches import BY_FLAVOR, BY_QUEUE, BY_TOPOLOGY, KueueCaches
from gpustack_operator.worker.common import (
    METADATA_OR_SPEC_CHANGED,
    NodeChanged,
    Writer,
    is_managed_object,
    is_up_to_date,
)
from gpustack_operator.worker.declaredpools import PoolRegistry, PoolsChanged, put_pool_object
from gpustack_operator.worker.poolqueue import pool_settings

NAME: Final = "resourceflavor"

log = structlog.get_logger(__name__)


class FlavorReconciler:
    def __init__(
        self,
        caches: KueueCaches,
        writer: Writer,
        policy: ChainPolicy,
        pools: PoolRegistry | None = None,
    ) -> None:
        self.caches = caches
        self.writer = writer
        self.policy = policy
        self.pools = pools
        """The declared pools in force (docs/autoscaling.md); ``None``: none are read."""
        self.resource = caches.kueue.resource_flavors

    async def __call__(self, request: Request) -> None:
        name = request.name
        have = self.caches.flavors.indexer.get(name)
        pools = self.pools
        if pools is not None and pools.concerns(name, have):
            if pools.known:  # docs/autoscaling.md, "In the worker"
                caches = self.caches
                objects = pools.objects(name, caches.nodes, caches.kueue.version)
                want = objects.flavor if objects is not None else None
                await put_pool_object(self.writer, self.resource, caches.flavors, have, want)
            return
        if is_pool_chain_object(have):
            return  # a declared pool's, and no pools are read here
        nodes = self.caches.managed_nodes(BY_FLAVOR, name)
        settings = pool_settings(self.caches, self.policy)
        want = node_flavor(name, nodes, settings, profiles_of=self.caches.facts.profiles)
        if want is None:
            if have is not None and is_managed_object(have) and not is_deleting(have):
                if self._in_use(have):
                    return  # docs/topology.md, "Upgrading a chain built without TAS"
                await self.writer.delete(self.resource, have, "no managed node has this flavor")
            return
        if have is not None and not is_managed_object(have):
            self.writer.not_ours(self.resource, have)
            return
        if have is not None and is_deleting(have):
            return  # Kueue still holds it; recreated once it is gone
        if not self._tas_ready(name, have, want):
            return
        if not is_up_to_date(have, want):
            await self.writer.apply(
                self.resource, want, existed=have is not None, cache=self.caches.flavors
            )

    def _in_use(self, flavor: Mapping[str, Any]) -> bool:
        """*flavor*'s nodes may feed the TAS queue of its profile now (its nodes moved to
        TAS, or to another TAS group) and Kueue reports usage or reservations of *flavor*
        in its ClusterQueue: it stays (listed, with no quota) until that is zero, so no
        admitted workload loses the flavor it was admitted to (docs/topology.md, "Upgrading
        a chain built without TAS")."""
        name = name_of(flavor)
        queue = annotations_of(flavor).get(QUEUE_ANNOTATION, "")
        moved_to = tas_queue_name(strip_tas_suffix(queue)) if queue else ""
        if not moved_to or not self.caches.managed_nodes(BY_QUEUE, moved_to):
            return False  # its nodes left the pools: it goes at once, as it always did
        have = self.caches.cluster_queues.indexer.get(queue)
        return have is not None and flavor_in_use(have, name)

    def _tas_ready(
        self, name: str, have: Mapping[str, Any] | None, want: Mapping[str, Any]
    ) -> bool:
        """A TAS flavor is written only once its Topology exists and only while the frozen
        fields match its name; an existing one is never patched in a frozen field
        (docs/topology.md, "Flavors")."""
        topology = want["spec"].get("topologyName")
        if not topology:
            return True
        if have is not None:
            return all(
                (have.get("spec") or {}).get(k) == want["spec"].get(k) for k in FROZEN_FIELDS
            ) or not _log_frozen(name)
        topologies = self.caches.topologies
        existing = topologies.indexer.get(topology) if topologies is not None else None
        if existing is None or is_deleting(existing):
            return False  # the Topology's creation brings the flavor back here
        group = want["spec"]["nodeLabels"].get(TOPOLOGY_LABEL, "")
        parsed = parse_group(group)
        return parsed is not None and parsed[1] == manifests_digest(want["spec"]["tolerations"])


FROZEN_FIELDS: Final = ("nodeLabels", "tolerations", "topologyName")
"""What Kueue 0.17-0.19 freezes on a TAS flavor (0.14-0.16: the whole spec, which the
worker writes as exactly these fields)."""


def _log_frozen(name: str) -> bool:
    log.info("TAS flavor differs in a frozen field; its nodes move to a new flavor", flavor=name)
    return True


def build_flavor_controller(
    builder: ControllerBuilder,
    caches: KueueCaches,
    writer: Writer,
    *,
    workers: int,
    coalesce: Coalesce,
    policy: ChainPolicy,
    pools: PoolRegistry | None = None,
    pool_changes: Channel[PoolsChanged] | None = None,
) -> Controller:
    """*coalesce*: the Node watch's preset (docs/worker.md, "Batching"), held while nodes
    still await their capacity labels, so a joining fleet renders each flavor about once
    rather than once a window. *pools*: the declared pools whose flavors it writes too;
    *pool_changes*: their changes (the wiring's channel), mapped to the flavors to look at."""
    facts = caches.facts

    def by_node(node: dict[str, Any]) -> list[str]:
        return caches.event_names(node, "flavor")

    def by_queue(queue: dict[str, Any]) -> list[str]:
        """A queue's usage reaching zero lets the flavors it no longer needs go."""
        return sorted(queue_usage(queue).flavors)

    def by_topology(topology: dict[str, Any]) -> list[str]:
        """A Topology's creation lets the TAS flavors that name it be written."""
        topology_name = name_of(topology)
        return sorted(
            {
                flavor
                for node in caches.managed_nodes(BY_TOPOLOGY, topology_name)
                for flavor in facts.names(node, "flavor")
            }
        )

    built = (
        builder.for_(caches.kueue.resource_flavors, METADATA_OR_SPEC_CHANGED)
        .watches(NODES, by_node, NodeChanged(facts), coalesce=coalesce)
        .watches(caches.kueue.cluster_queues, by_queue, UsageChanged())
    )
    if caches.topologies is not None and caches.kueue.topologies is not None:
        built = built.watches(caches.kueue.topologies, by_topology, METADATA_OR_SPEC_CHANGED)
    if pool_changes is not None:
        built = built.watches_channel(pool_changes, lambda c: c.keys("flavor", caches.flavors))
    return built.with_options(max_concurrent_reconciles=workers).complete(
        FlavorReconciler(caches, writer, policy, pools)
    )


class UsageChanged(Predicate):
    """ClusterQueue updates that change what Kueue reports reserved or used per flavor."""

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return usage_fields(old) != usage_fields(new)
