"""Cohorts (docs/worker.md) with the safe deletion rule (docs/worker.md).

Key: the cohort name. While a managed Node's profile names it, the Cohort exists (a name, an
empty spec and the managed-by label). It is deleted only when no managed node's profile and
no ClusterQueue (``spec.cohortName``, anyone's) references it: ClusterQueues are owned by
their Cohort, so deleting it earlier would let the garbage collector cascade into queues
that still have flavors. A Cohort being deleted is looked at again after a while; one a
person made (no managed-by label) is never changed or deleted.

A declared pool's Cohort (docs/autoscaling.md, "In the worker") is written here too, from
the pools' registry and the per-pool function ``plan`` uses, and deleted once no pool wants
it; the pools' changes arrive on the wiring's channel.
"""

from __future__ import annotations

from typing import Any, Final, cast

from gpustack_operator.domain.chain.declaredpools import is_pool_chain_object
from gpustack_operator.domain.chain.nodepool import NodePool, with_cohort_share
from gpustack_operator.domain.chain.queues import (
    cluster_queue_cohort,
    cohort_may_be_deleted,
    desired_cohort,
    queue_flavors,
)
from gpustack_operator.domain.labels import QUEUE_ANNOTATION
from gpustack_operator.domain.nodeview import annotations_of, is_deleting
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.runtime.channel import Channel
from gpustack_operator.runtime.coalesce import Coalesce
from gpustack_operator.runtime.controller import Controller, ControllerBuilder, Request, Result
from gpustack_operator.runtime.resources import NODES
from gpustack_operator.worker.availability import AvailabilityTracker
from gpustack_operator.worker.caches import BY_COHORT, KueueCaches
from gpustack_operator.worker.common import (
    METADATA_OR_SPEC_CHANGED,
    NodeChanged,
    Writer,
    is_managed_object,
    is_up_to_date,
)
from gpustack_operator.worker.declaredpools import PoolRegistry, PoolsChanged, put_pool_object
from gpustack_operator.worker.liveteams import watch_teams
from gpustack_operator.worker.poolqueue import (
    RETIRING_RELEASED,
    desired_pool,
    new_queues,
)

NAME: Final = "cohort"
RESOURCE_GROUPS: Final = ("spec", "resourceGroups")
"""The Cohort's own quota: what its pools' teams leave over (docs/teams.md)."""


class CohortReconciler:
    def __init__(
        self,
        caches: KueueCaches,
        writer: Writer,
        policy: ChainPolicy,
        *,
        deleting_requeue: float,
        tracker: AvailabilityTracker | None = None,
        pools: PoolRegistry | None = None,
    ) -> None:
        self.caches = caches
        self.pools = pools
        """The declared pools in force (docs/autoscaling.md); ``None``: none are read."""
        self.tracker = tracker
        """Each node's availability, as the ClusterQueue reconciler counts it (docs/teams.md)."""
        self.policy = policy
        self.writer = writer
        self.resource = caches.kueue.cohorts
        self.deleting_requeue = deleting_requeue

    async def __call__(self, request: Request) -> Result | None:
        name = request.name
        have = self.caches.cohorts.indexer.get(name)
        pools = self.pools
        if pools is not None and pools.concerns(name, have):
            if pools.known:  # docs/autoscaling.md, "In the worker"
                caches = self.caches
                objects = pools.objects(name, caches.nodes, caches.kueue.version)
                want = objects.cohort if objects is not None else None
                await put_pool_object(self.writer, self.resource, caches.cohorts, have, want)
            return None
        if is_pool_chain_object(have):
            return None  # a declared pool's, and no pools are read here
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
            want, later = self._with_team_remainder(name, have, want)
            if is_up_to_date(have, want):
                return later
            if have is not None and want["spec"].get("resourceGroups") == []:
                # Applying the spec without its one field would make it null (docs/worker.md,
                # "Writes and ownership"): the quota is removed by a patch; anything else
                # that differs is applied by the reconcile the Cohort's change starts.
                await self.writer.remove(
                    self.resource, _applied(want), RESOURCE_GROUPS, cache=self.caches.cohorts
                )
                return later
            await self.writer.apply(
                self.resource, _applied(want), existed=have is not None, cache=self.caches.cohorts
            )
            return later
        if have is None:
            return None
        queues = self.caches.cluster_queues.indexer.by_index(BY_COHORT, name)
        if cohort_may_be_deleted(name, nodes, queues, self.policy.manufacturers):
            await self.writer.delete(self.resource, have, "no node or ClusterQueue references it")
        return None

    def _with_team_remainder(
        self, name: str, have: dict[str, Any] | None, want: dict[str, Any]
    ) -> tuple[dict[str, Any], Result | None]:
        """*want* holding what its pools' teams leave over as its own quota (docs/teams.md);
        a quota it held before and no longer needs is compared as an empty list. With the
        requeue for when a node's verdict next changes by time alone (docs/node-lifecycle.md)."""
        teams = self.caches.teams_for(self.policy)
        held = bool(((have or {}).get("spec") or {}).get("resourceGroups"))
        if teams is None and not held:
            return want, None
        divided: list[NodePool] = []
        untils: list[float] = []
        retiring = False
        flavors = self.caches.flavors.indexer.by_index(BY_COHORT, name)
        pools = sorted({annotations_of(f).get(QUEUE_ANNOTATION, "") for f in flavors} - {""})
        for pool_name in pools if teams is not None else ():
            members = cast("list[dict[str, Any]]", queue_flavors(pool_name, flavors))
            pool, until = desired_pool(self.caches, self.policy, pool_name, members, self.tracker)
            if until is not None:
                untils.append(until)
            if pool.queue is None:
                continue
            # docs/teams.md: while retiring queues hold work, the remainder is of what they
            # do not hold; looked at again until they hold nothing.
            pool, pending = new_queues(self.caches, pool)
            retiring = retiring or pending
            divided.append(pool)
        want = with_cohort_share(want, divided)
        if held and "resourceGroups" not in want["spec"]:
            want["spec"]["resourceGroups"] = []
        tracker = self.tracker
        later = Result(requeue_after=self.deleting_requeue) if retiring else None
        if not untils or tracker is None:
            return want, later
        at = Result.at(min(untils), tracker.clock())
        if later is not None and (at.requeue_after or 0) >= self.deleting_requeue:
            return want, later
        return want, at


def _applied(want: dict[str, Any]) -> dict[str, Any]:
    """*want* as written: an empty ``resourceGroups`` (compared, to notice a remainder to
    drop) is left out; the reconciler removes the field with a patch."""
    spec = want.get("spec") or {}
    if spec.get("resourceGroups") == []:
        return {**want, "spec": {k: v for k, v in spec.items() if k != "resourceGroups"}}
    return want


def build_cohort_controller(
    builder: ControllerBuilder,
    caches: KueueCaches,
    writer: Writer,
    *,
    workers: int,
    deleting_requeue: float,
    coalesce: Coalesce,
    policy: ChainPolicy,
    tracker: AvailabilityTracker | None = None,
    pools: PoolRegistry | None = None,
    pool_changes: Channel[PoolsChanged] | None = None,
) -> Controller:
    """*coalesce*: the Node and ClusterQueue watches' preset, as for flavors (docs/worker.md,
    "Batching"); *tracker*: node availability, for the Cohort's own quota with teams;
    *pools* and *pool_changes*: the declared pools whose Cohorts it writes too, and their
    changes (the wiring's channel)."""
    facts = caches.facts

    def by_node(node: dict[str, Any]) -> list[str]:
        return caches.event_names(node, "cohort")

    def by_queue(queue: dict[str, Any]) -> list[str]:
        cohort = cluster_queue_cohort(queue)
        return [cohort] if cohort else []

    builder = watch_teams(
        builder, caches.teams, lambda: caches.flavors.indexer.index_values(BY_COHORT)
    )
    if pool_changes is not None:
        builder = builder.watches_channel(pool_changes, lambda c: c.keys("cohort", caches.cohorts))
    return (
        builder.for_(caches.kueue.cohorts, METADATA_OR_SPEC_CHANGED)
        .watches(NODES, by_node, NodeChanged(facts), coalesce=coalesce)
        .watches(caches.kueue.cluster_queues, by_queue, METADATA_OR_SPEC_CHANGED, coalesce=coalesce)
        .watches(caches.kueue.cluster_queues, by_queue, RETIRING_RELEASED, coalesce=coalesce)
        .with_options(max_concurrent_reconciles=workers)
        .complete(
            CohortReconciler(
                caches,
                writer,
                policy,
                deleting_requeue=deleting_requeue,
                tracker=tracker,
                pools=pools,
            )
        )
    )
