"""Cohorts (docs/worker.md) with the safe deletion rule (docs/worker.md).

Key: the cohort name. While a managed Node's profile names it, the Cohort exists (a name, an
empty spec and the managed-by label). It is deleted only when no managed node's profile and
no ClusterQueue (``spec.cohortName``, anyone's) references it: ClusterQueues are owned by
their Cohort, so deleting it earlier would let the garbage collector cascade into queues
that still have flavors. A Cohort being deleted is looked at again after a while; one a
person made (no managed-by label) is never changed or deleted.
"""

from __future__ import annotations

from typing import Any, Final

from gpustack_operator.controllers.caches import BY_COHORT, KueueCaches
from gpustack_operator.controllers.common import (
    METADATA_OR_SPEC_CHANGED,
    NodeChanged,
    Writer,
    is_managed_object,
    is_up_to_date,
)
from gpustack_operator.domain.declaredpools import is_pool_chain_object
from gpustack_operator.domain.nodeview import is_deleting
from gpustack_operator.domain.policy import ChainPolicy
from gpustack_operator.domain.queues import (
    cluster_queue_cohort,
    cohort_may_be_deleted,
    desired_cohort,
)
from gpustack_operator.runtime.coalesce import Coalesce
from gpustack_operator.runtime.controller import Controller, ControllerBuilder, Request, Result
from gpustack_operator.runtime.resources import NODES

NAME: Final = "cohort"


class CohortReconciler:
    def __init__(
        self, caches: KueueCaches, writer: Writer, policy: ChainPolicy, *, deleting_requeue: float
    ) -> None:
        self.caches = caches
        self.policy = policy
        self.writer = writer
        self.resource = caches.kueue.cohorts
        self.deleting_requeue = deleting_requeue

    async def __call__(self, request: Request) -> Result | None:
        name = request.name
        have = self.caches.cohorts.indexer.get(name)
        if is_pool_chain_object(have):
            return None  # the declared-pool reconciler's (docs/autoscaling.md)
        nodes = self.caches.managed_nodes(BY_COHORT, name)
        if have is not None and is_deleting(have):
            return Result(requeue_after=self.deleting_requeue) if nodes else None
        if have is not None and not is_managed_object(have):
            if nodes:
                self.writer.not_ours(self.resource, have)
            return None
        want = desired_cohort(
            name,
            nodes,
            self.policy.manufacturers,
            self.caches.kueue.version,
            profiles_of=self.caches.facts.profiles,
        )
        if want is not None:
            if not is_up_to_date(have, want):
                await self.writer.apply(self.resource, want, existed=have is not None)
            return None
        if have is None:
            return None
        queues = self.caches.cluster_queues.indexer.by_index(BY_COHORT, name)
        if cohort_may_be_deleted(name, nodes, queues, self.policy.manufacturers):
            await self.writer.delete(self.resource, have, "no node or ClusterQueue references it")
        return None


def build_cohort_controller(
    builder: ControllerBuilder,
    caches: KueueCaches,
    writer: Writer,
    *,
    workers: int,
    deleting_requeue: float,
    coalesce: Coalesce,
    policy: ChainPolicy,
) -> Controller:
    """*coalesce*: the Node and ClusterQueue watches' preset, as for flavors (docs/worker.md,
    "Batching")."""
    facts = caches.facts

    def by_node(node: dict[str, Any]) -> list[str]:
        return caches.event_names(node, "cohort")

    def by_queue(queue: dict[str, Any]) -> list[str]:
        cohort = cluster_queue_cohort(queue)
        return [cohort] if cohort else []

    return (
        builder.for_(caches.kueue.cohorts, METADATA_OR_SPEC_CHANGED)
        .watches(NODES, by_node, NodeChanged(facts), coalesce=coalesce)
        .watches(caches.kueue.cluster_queues, by_queue, METADATA_OR_SPEC_CHANGED, coalesce=coalesce)
        .with_options(max_concurrent_reconciles=workers)
        .complete(CohortReconciler(caches, writer, policy, deleting_requeue=deleting_requeue))
    )
