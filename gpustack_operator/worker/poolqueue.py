"""What a pool's ClusterQueue is, shared by the ClusterQueue and Cohort reconcilers.

The ClusterQueue reconciler writes a pool's queue (or its team queues); the Cohort
reconciler reads the same queue for the Cohort's own quota when teams divide the pool
(docs/teams.md). Both ask these functions, so neither reconciler imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final, cast

from gpustack_operator.domain.chain.kueueusage import held_in
from gpustack_operator.domain.chain.queues import HOLD, cluster_queue_cohort, desired_cluster_queue
from gpustack_operator.domain.chain.teams import PoolSplit, Teams, divides, pool_of, split_pool
from gpustack_operator.domain.chain.tenancy import tenant_cluster_queue
from gpustack_operator.domain.chain.transition import held_by, less_held, own_quota
from gpustack_operator.domain.node.availability import NodeAvailability
from gpustack_operator.domain.nodeview import name_of
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.runtime.predicates import Predicate
from gpustack_operator.worker.availability import AvailabilityTracker
from gpustack_operator.worker.caches import BY_FLAVOR, BY_POOL, KueueCaches
from gpustack_operator.worker.common import is_managed_object


def desired_pool_queue(
    caches: KueueCaches,
    policy: ChainPolicy,
    name: str,
    flavors: list[dict[str, Any]],
    tracker: AvailabilityTracker | None = None,
) -> tuple[dict[str, Any] | None, float | None]:
    """The ClusterQueue of pool *name* for *flavors* from the cache's managed nodes (each
    counted as *tracker* says), before teams divide it, and when a node's verdict next
    changes by time alone; the Cohort reconciler reads it for the Cohort's own quota."""
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
    nodes = [n for members in index.values() for n in members]
    want = desired_cluster_queue(
        name,
        flavors,
        nodes,
        caches.manufacturers,
        version=caches.kueue.version,
        flavor_index=index,
        quota_resources=policy.quota_resources,
        availability=availability,
        host_counting=policy.host_counting,
        divided=divides(caches.teams_for(policy)),
        # A tenant's fleet is made of views of the host's Nodes (docs/tenants.md).
        devices_of=None if caches.tenant is not None else caches.facts.devices,
        profiles_of=None if caches.tenant is not None else caches.facts.profiles,
    )
    if want is not None and caches.tenant is not None:
        # docs/tenants.md, "Quota a tenant may count on"
        want = tenant_cluster_queue(want, caches.tenant.settings.quota_caps)
    return want, min(untils, default=None)


class RetiringReleased(Predicate):
    """Updates in which a queue the worker holds (``stopPolicy: Hold``) holds less work:
    the queues replacing it may grow (docs/teams.md, "Moving a pool to teams, and back").
    Kueue's status writes pass no other predicate of these controllers."""

    def create(self, obj: dict[str, Any]) -> bool:
        return False

    def delete(self, obj: dict[str, Any]) -> bool:
        return False

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        spec = new.get("spec")
        held = isinstance(spec, Mapping) and spec.get("stopPolicy") == HOLD
        return held and is_managed_object(new) and held_in(old) != held_in(new)

    def __repr__(self) -> str:
        return "RetiringReleased()"


RETIRING_RELEASED: Final = RetiringReleased()


def new_queues(
    caches: KueueCaches, teams: Teams | None, want: dict[str, Any]
) -> tuple[dict[str, Any], PoolSplit | None, bool]:
    """Pool queue *want* and its split among *teams* (None: no team has a share), each given
    only what the pool's retiring queues do not hold (docs/teams.md, "Moving a pool to
    teams, and back"), and whether a retiring queue still holds anything.

    Retiring: with teams, the pool's own queue and the team queues no team has now; without,
    every team queue of the pool. Their usage is read from Kueue's status in the cache.
    """
    name = name_of(want)
    split = split_pool(want, teams) if teams is not None else None
    team_queues = [
        q for q in caches.cluster_queues.indexer.by_index(BY_POOL, name) if is_managed_object(q)
    ]
    if split is not None:
        kept = {name_of(q) for q in split.team_queues}
        retiring = [q for q in team_queues if name_of(q) not in kept]
        own = caches.cluster_queues.indexer.get(name)
        if own is not None and is_managed_object(own) and not pool_of(own):
            retiring.append(own)
    else:
        retiring = team_queues
    held = held_by(retiring)
    pending = bool(held)
    if split is None:
        # A Cohort's own quota (what teams left over) is borrowable by the pool's queue
        # until the Cohort reconciler drops it: until then it counts as held.
        cohort = caches.cohorts.indexer.get(cluster_queue_cohort(want))
        for key, amount in own_quota(cohort).items():
            held[key] = held.get(key, Fraction(0)) + amount
    if not held:
        return want, split, False
    want = less_held(want, held)
    return (
        want,
        split_pool(want, teams) if split is not None and teams is not None else None,
        pending,
    )
