"""A pool's objects from the worker's caches, shared by the flavor, ClusterQueue and Cohort
reconcilers.

Each reads its pool's managed nodes and their models from the caches and asks the one
per-pool function ``plan`` uses too (``domain/chain/nodepool.py``): the ClusterQueue
reconciler writes the pool's queue (or its team queues), the Cohort reconciler the Cohort's
share when teams divide the pool (docs/teams.md), so neither imports the other. What is
about the cluster's state rather than the pool's shape stays here: what retiring queues
still hold (docs/teams.md, "Moving a pool to teams, and back").
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final, cast

from gpustack_operator.domain.chain.kueueusage import held_in, usage_is_final
from gpustack_operator.domain.chain.nodepool import (
    NodePool,
    PoolMembers,
    PoolSettings,
    TenantPools,
    node_pool,
)
from gpustack_operator.domain.chain.queues import HOLD, cluster_queue_cohort
from gpustack_operator.domain.chain.teams import pool_of
from gpustack_operator.domain.chain.transition import held_by, own_quota
from gpustack_operator.domain.node.availability import NodeAvailability
from gpustack_operator.domain.nodeview import name_of
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.runtime.predicates import Predicate
from gpustack_operator.worker.availability import AvailabilityTracker
from gpustack_operator.worker.caches import BY_FLAVOR, BY_POOL, KueueCaches
from gpustack_operator.worker.common import is_managed_object


def pool_settings(caches: KueueCaches, policy: ChainPolicy) -> PoolSettings:
    """What shapes every pool now: the policy, the Kueue version served, the teams in force
    and, in a tenant, its settings (docs/tenants.md)."""
    tenant = caches.tenant
    return PoolSettings(
        caches.manufacturers,
        caches.kueue.version,
        quota_resources=policy.quota_resources,
        host_counting=policy.host_counting,
        tolerations=policy.flavor_tolerations,
        topology_on=caches.facts.topology is not None,
        teams=caches.teams_for(policy),
        tenant=(
            TenantPools(tenant.settings.quota_caps, tenant.settings.virtual_scheduler)
            if tenant is not None
            else None
        ),
    )


def desired_pool(
    caches: KueueCaches,
    policy: ChainPolicy,
    name: str,
    flavors: list[dict[str, Any]],
    tracker: AvailabilityTracker | None = None,
    *,
    cohort_uid: str = "",
) -> tuple[NodePool, float | None]:
    """Pool *name*'s queues for *flavors* from the cache's managed nodes (each counted as
    *tracker* says), as ``node_pool`` makes them for ``plan`` too, and when a node's verdict
    next changes by time alone."""
    untils: list[float] = []
    availability = None
    if tracker is not None:

        def availability(node: object) -> NodeAvailability:
            raw = cast(Mapping[str, Any], node)  # the caches' Nodes
            verdict = tracker.look(raw, caches.facts.model(raw))
            if verdict.until is not None:
                untils.append(verdict.until)
            return verdict

    index: dict[str, list[object]] = {
        name_of(f): list(caches.managed_nodes(BY_FLAVOR, name_of(f))) for f in flavors
    }
    # A tenant's fleet is made of views of the host's Nodes (docs/tenants.md).
    host = caches.tenant is None
    members = PoolMembers(
        index,
        availability,
        devices_of=caches.facts.devices if host else None,
        profiles_of=caches.facts.profiles if host else None,
    )
    pool = node_pool(name, flavors, members, pool_settings(caches, policy), cohort_uid=cohort_uid)
    return pool, min(untils, default=None)


class RetiringReleased(Predicate):
    """Updates in which a queue the worker holds (``stopPolicy: Hold``) holds less work, or
    Kueue first reports on it since the hold (``usage_is_final``): the queues replacing it
    may grow, or it may go (docs/teams.md, "Moving a pool to teams, and back").
    Kueue's status writes pass no other predicate of these controllers."""

    def create(self, obj: dict[str, Any]) -> bool:
        return False

    def delete(self, obj: dict[str, Any]) -> bool:
        return False

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        spec = new.get("spec")
        held = isinstance(spec, Mapping) and spec.get("stopPolicy") == HOLD
        return (
            held
            and is_managed_object(new)
            and (held_in(old) != held_in(new) or usage_is_final(old) != usage_is_final(new))
        )

    def __repr__(self) -> str:
        return "RetiringReleased()"


RETIRING_RELEASED: Final = RetiringReleased()


def new_queues(caches: KueueCaches, pool: NodePool) -> tuple[NodePool, bool]:
    """*pool* given only what its retiring queues do not hold (docs/teams.md, "Moving a
    pool to teams, and back"), and whether a retiring queue still holds anything.

    Retiring: with teams, the pool's own queue and the team queues no team has now; without,
    every team queue of the pool. Their usage is read from Kueue's status in the cache.
    """
    name = pool.name
    team_queues = [
        q for q in caches.cluster_queues.indexer.by_index(BY_POOL, name) if is_managed_object(q)
    ]
    if pool.split is not None:
        kept = {name_of(q) for q in pool.split.team_queues}
        retiring = [q for q in team_queues if name_of(q) not in kept]
        own = caches.cluster_queues.indexer.get(name)
        if own is not None and is_managed_object(own) and not pool_of(own):
            retiring.append(own)
    else:
        retiring = team_queues
    held = held_by(retiring)
    pending = bool(held)
    if pool.queue is not None and not all(usage_is_final(q) for q in retiring):
        # Kueue has not yet reported on a retiring queue since it stopped admitting: work
        # it admitted a moment ago may be missing from its status, so it may hold the whole
        # pool (docs/teams.md, "Never more admitted than exists, meanwhile").
        held, pending = own_quota(pool.queue), True
    if pool.split is None and pool.queue is not None:
        # A Cohort's own quota (what teams left over) is borrowable by the pool's queue
        # until the Cohort reconciler drops it: until then it counts as held.
        cohort = caches.cohorts.indexer.get(cluster_queue_cohort(pool.queue))
        for key, amount in own_quota(cohort).items():
            held[key] = held.get(key, Fraction(0)) + amount
    if not held:
        return pool, False
    return pool.less(held), pending
