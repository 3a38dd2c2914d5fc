"""ResourceFlavors (docs/worker.md) and their cleanup (docs/worker.md), one reconciler.

Key: the flavor name. The managed Nodes whose profiles name the flavor come from the Node
index; with at least one, the flavor is applied as ``desired_resource_flavor`` renders it
from the first node by name (it provides the notes) with the tolerations the dedication
taints of all those nodes need (docs/worker.md, "Tolerations"). With
none, a flavor carrying the managed-by label is deleted (Kueue's ``resource-in-use``
finalizer keeps it until no ClusterQueue lists it). A flavor of the same name without the
label was made by a person: it is left alone and reported with a Warning Event. Node
updates are mapped to the flavor names of both the old and the new Node, so a node that
stops carrying a flavor still reaches it.
"""

from __future__ import annotations

from typing import Any, Final

from gpustack_operator.controllers.caches import BY_FLAVOR, KueueCaches
from gpustack_operator.controllers.common import (
    METADATA_OR_SPEC_CHANGED,
    NodeChanged,
    Writer,
    is_managed_object,
    is_up_to_date,
)
from gpustack_operator.domain.declaredpools import is_pool_chain_object
from gpustack_operator.domain.flavors import desired_resource_flavor
from gpustack_operator.domain.nodeview import is_deleting
from gpustack_operator.domain.policy import ChainPolicy
from gpustack_operator.domain.tenancy import tenant_flavor
from gpustack_operator.runtime.coalesce import Coalesce
from gpustack_operator.runtime.controller import Controller, ControllerBuilder, Request
from gpustack_operator.runtime.resources import NODES

NAME: Final = "resourceflavor"


class FlavorReconciler:
    def __init__(self, caches: KueueCaches, writer: Writer, policy: ChainPolicy) -> None:
        self.caches = caches
        self.writer = writer
        self.policy = policy
        self.resource = caches.kueue.resource_flavors

    async def __call__(self, request: Request) -> None:
        name = request.name
        have = self.caches.flavors.indexer.get(name)
        if is_pool_chain_object(have):
            return  # the declared-pool reconciler's (docs/autoscaling.md)
        nodes = self.caches.managed_nodes(BY_FLAVOR, name)
        want = desired_resource_flavor(
            name,
            nodes,
            self.caches.manufacturers,
            self.caches.kueue.version,
            profiles_of=self.caches.facts.profiles,
            tolerations=self.policy.flavor_tolerations,
        )
        tenant = self.caches.tenant
        if want is not None and tenant is not None:  # docs/tenants.md, "Flavors"
            want = tenant_flavor(want, nodes, tenant.settings.virtual_scheduler)
        if want is None:
            if have is not None and is_managed_object(have) and not is_deleting(have):
                await self.writer.delete(self.resource, have, "no managed node has this flavor")
            return
        if have is not None and not is_managed_object(have):
            self.writer.not_ours(self.resource, have)
            return
        if have is not None and is_deleting(have):
            return  # Kueue still holds it; recreated once it is gone
        if not is_up_to_date(have, want):
            await self.writer.apply(self.resource, want, existed=have is not None)


def build_flavor_controller(
    builder: ControllerBuilder,
    caches: KueueCaches,
    writer: Writer,
    *,
    workers: int,
    coalesce: Coalesce,
    policy: ChainPolicy,
) -> Controller:
    """*coalesce*: the Node watch's preset (docs/worker.md, "Batching"), held while nodes
    still await their capacity labels, so a joining fleet renders each flavor about once
    rather than once a window."""
    facts = caches.facts

    def by_node(node: dict[str, Any]) -> list[str]:
        return caches.event_names(node, "flavor")

    return (
        builder.for_(caches.kueue.resource_flavors, METADATA_OR_SPEC_CHANGED)
        .watches(NODES, by_node, NodeChanged(facts), coalesce=coalesce)
        .with_options(max_concurrent_reconciles=workers)
        .complete(FlavorReconciler(caches, writer, policy))
    )
