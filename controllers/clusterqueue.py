"""ClusterQueues (docs/worker.md): quotas aggregated over the managed nodes of their flavors.

Key: the queue name. The ResourceFlavors that target it (annotation index) and the managed
Nodes of each flavor (Node index) go to the per-pool function ``plan`` uses too
(``node_pool``, through ``worker/poolqueue.py``), which does all the arithmetic and the
teams' split. The queue is owned by its Cohort when the Cohort is ours; until the Cohort is
in the cache the queue waits (the Cohort's creation enqueues it again).

With no flavor left (or retired by teams) the queue is held first (``stopPolicy: Hold``)
and deleted once Kueue, reporting on the held queue, shows nothing reserved or used in it
(``status.flavorsReservation`` / ``flavorsUsage`` / workload counts, read from the cache
and then from the API; ``usage_is_final``); otherwise it is looked at again after
``reserved_requeue`` seconds, or at Kueue's next report. Queues without the managed-by
label are never touched.
A queue the reconciler creates gets a Normal Event ``PoolCreated`` naming its unit, so the
Events that tell a person about devices (``DeviceNotPooled`` and its resolution on Nodes) are
followed by the pool they ended in.

A declared pool's queue (docs/autoscaling.md, "In the worker") is written here too, from the
pools' registry and the per-pool function ``plan`` uses: its quota is the declared maximum,
or what the live nodes the pool selects hold when that is more; with no pool wanting it, it
is deleted once nothing is reserved in it. The pools' changes arrive on the wiring's channel.

Node, flavor and the queue's own events are coalesced per queue (``runtime.coalesce``): the
first after a quiet batch window is reconciled at once; later ones once the events pause for
the window, or ``batch_max_delay`` after the first (while nodes still await their capacity
labels, the ``settling`` hold, the longer ``settling_max_delay``), so a fleet joining node by
node rewrites each queue a few times, not once per window.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import structlog
from prometheus_client import Counter

from gpustack_operator.domain.chain.declaredpools import is_pool_chain_object
from gpustack_operator.domain.chain.kueueusage import STOPPED, has_reservations, usage_is_final
from gpustack_operator.domain.chain.nodepool import NodePool, pool_cohort
from gpustack_operator.domain.chain.poolinfo import local_queue_metadata
from gpustack_operator.domain.chain.queues import (
    HOLD,
    HOLD_NOTE,
    cluster_queue_cohort,
    devices_gone,
    quota_below_usage,
)
from gpustack_operator.domain.chain.teams import pool_of
from gpustack_operator.domain.chain.transition import (
    lending_nothing,
)
from gpustack_operator.domain.labels import QUEUE_ANNOTATION, UNIT_ANNOTATION
from gpustack_operator.domain.nodeview import (
    annotations_of,
    is_deleting,
    labels_of,
    metadata,
    name_of,
    uid_of,
)
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.runtime.channel import Channel
from gpustack_operator.runtime.client import NotFound
from gpustack_operator.runtime.coalesce import Coalesce
from gpustack_operator.runtime.controller import Controller, ControllerBuilder, Request, Result
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_operator.runtime.resources import NODES
from gpustack_operator.worker.availability import AvailabilityTracker
from gpustack_operator.worker.caches import (
    BY_COHORT,
    BY_POOL,
    BY_QUEUE,
    KueueCaches,
)
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

log = structlog.get_logger(__name__)

NAME: Final = "clusterqueue"
POOL_CREATED: Final = "PoolCreated"
NO_DEVICES_ADVERTISED: Final = "NoDevicesAdvertised"
QUOTA_BELOW_USAGE = Counter(
    "gpustack_quota_below_usage",
    "Times a ClusterQueue's nominal quota was lowered below what Kueue reports in use "
    '(docs/node-lifecycle.md, "Seeing why").',
    ["clusterqueue"],
    registry=REGISTRY,
)


def _without_deletion(obj: dict[str, Any]) -> dict[str, Any]:
    """*obj* as if it were not being deleted (to render what its queue holds besides it)."""
    meta = {k: v for k, v in metadata(obj).items() if k != "deletionTimestamp"}
    return {**obj, "metadata": meta}


def resource_version(obj: Mapping[str, Any] | None) -> str:
    return str(metadata(obj).get("resourceVersion", "")) if obj is not None else ""


def _sooner(a: Result | None, b: Result | None) -> Result | None:
    """The earlier of two requeues (``None``: none asked)."""
    if a is None or b is None:
        return a or b
    return a if (a.requeue_after or 0) <= (b.requeue_after or 0) else b


class ClusterQueueReconciler:
    def __init__(
        self,
        caches: KueueCaches,
        writer: Writer,
        *,
        reserved_requeue: float,
        waiting_requeue: float,
        policy: ChainPolicy,
        tracker: AvailabilityTracker | None = None,
        pools: PoolRegistry | None = None,
    ) -> None:
        self.caches = caches
        self.policy = policy
        self.pools = pools
        """The declared pools in force (docs/autoscaling.md); ``None``: none are read."""
        self.tracker = tracker
        self._team_writes: dict[str, tuple[str, dict[str, Any]]] = {}
        """Team queue -> (the resourceVersion it had, what was applied) of its last write."""
        """Each node's availability (docs/node-lifecycle.md); None counts every node."""
        self.writer = writer
        self.resource = caches.kueue.cluster_queues
        self.reserved_requeue = reserved_requeue
        self.waiting_requeue = waiting_requeue

    async def __call__(self, request: Request) -> Result | None:
        name = request.name
        caches = self.caches
        have = caches.cluster_queues.indexer.get(name)
        pools = self.pools
        if pools is not None and pools.concerns(name, have):
            return await self._pool_queue(pools, name, have)
        if is_pool_chain_object(have):
            return None  # a declared pool's, and no pools are read here
        if have is not None and pool_of(have) and is_managed_object(have):
            return None  # a team queue: its pool's key handles it (docs/teams.md)
        if have is not None and not is_managed_object(have):
            if caches.flavors.indexer.by_index(BY_QUEUE, name):
                self.writer.not_ours(self.resource, have)
            return None
        flavors = caches.flavors.indexer.by_index(BY_QUEUE, name)
        wanted = self._wanted_flavors(name)
        if have is not None and not wanted <= {name_of(f) for f in flavors}:
            # A flavor the nodes want is missing from the cache (a person deleted it): the
            # flavor reconciler recreates it, and its creation brings the queue back here.
            return Result(requeue_after=self.waiting_requeue)
        # The Cohort's uid makes the queues' owner reference (docs/worker.md); the queues
        # wait for their Cohort below.
        cohort = caches.cohorts.indexer.get(pool_cohort(name, flavors))
        uid = uid_of(cohort) if cohort is not None and is_managed_object(cohort) else ""
        pool, until = self._desired(name, flavors, uid)
        # A grace or join window ending changes the quota with no event: look again then.
        later = (
            Result.at(until, self.tracker.clock())
            if until is not None and self.tracker is not None
            else None
        )
        if pool.queue is None and wanted and have is not None:
            # Every flavor is being deleted (Kueue holds a flavor while a queue lists it):
            # the queue lets go of them instead of going away (docs/worker.md, "Chain
            # objects deleted by hand").
            live = [_without_deletion(f) for f in flavors]
            full, _ = self._desired(name, live, uid)
            pool = full.without_flavors()
        if pool.queue is None:
            return _sooner(await self._delete(have), await self._prune_teams(name, set()))
        cohort = caches.cohorts.indexer.get(cluster_queue_cohort(pool.queue))
        if cohort is None or is_deleting(cohort):
            return Result(requeue_after=self.waiting_requeue)  # its creation enqueues us too
        # docs/teams.md: queues replacing retiring ones get what those do not hold; the
        # retiring ones' deletion requeues this key until they hold nothing.
        pool, _ = new_queues(caches, pool)
        if pool.split is not None:  # docs/teams.md: the pool's teams' queues replace its own
            kept = {name_of(q) for q in pool.split.team_queues}
            # The retiring queues are held (or deleted) before their replacements are
            # written, so Kueue never sees both admitting.
            gone = _sooner(await self._delete(have), await self._prune_teams(name, kept))
            for team_queue in pool.split.team_queues:
                have_team = caches.cluster_queues.indexer.get(name_of(team_queue))
                await self._put(have_team, team_queue, len(flavors), team=True)
            return _sooner(gone, later)
        gone = await self._prune_teams(name, set())
        for queue in pool.cluster_queues:  # the pool's own queue, teams having no share
            await self._put(have, queue, len(flavors))
        return _sooner(gone, later)

    async def _pool_queue(
        self, pools: PoolRegistry, name: str, have: dict[str, Any] | None
    ) -> Result | None:
        """A declared pool's queue (docs/autoscaling.md, "Quota"): its quota is the declared
        maximum, or what its live nodes hold when that is more; one no pool wants is
        deleted once Kueue reports nothing reserved in it."""
        if not pools.known:
            return None  # the pools are read first; their change brings the key back
        caches = self.caches
        objects = pools.objects(name, caches.nodes, caches.kueue.version)
        want = objects.cluster_queue if objects is not None else None
        held = await put_pool_object(
            self.writer, self.resource, caches.cluster_queues, have, want, held=has_reservations
        )
        return Result(requeue_after=self.reserved_requeue) if held else None

    async def _put(
        self,
        have: dict[str, Any] | None,
        want: dict[str, Any],
        flavors: int,
        *,
        team: bool = False,
    ) -> None:
        if have is not None and not is_managed_object(have):
            self.writer.not_ours(self.resource, have)
            return
        if have is not None and is_deleting(have):
            return  # its deletion event brings it back here, to be created anew
        if is_up_to_date(have, want) or self.writer.cache_lags(
            self.resource, want, self.caches.cluster_queues
        ):
            return
        seen = resource_version(have)
        # The pool's team queues are written in one reconcile, and the event of one brings
        # the pool back before the cache holds the others' writes: what the cache shows is
        # the version this very write replaced (docs/teams.md, "Shares follow the hardware":
        # one write per queue). A creation the cache does not show yet looks like a queue
        # deleted since (by teams off, or by hand): the API tells them apart.
        if (
            team
            and self._team_writes.get(name_of(want)) == (seen, want)
            and (have is not None or await self._exists(name_of(want)))
        ):
            return
        self._say_shrink_below_usage(want, have)
        gone = devices_gone(want, have)
        applied = await self.writer.apply(
            self.resource, want, existed=have is not None, cache=self.caches.cluster_queues
        )
        self._say_devices_gone(applied, gone)
        if have is None:
            self._created(applied, flavors)
        if team:
            self._team_writes[name_of(want)] = (seen, want)

    async def _prune_teams(self, pool: str, kept: set[str]) -> Result | None:
        """Delete the team queues of *pool* no team has now, each once nothing is reserved."""
        result: Result | None = None
        for queue in self.caches.cluster_queues.indexer.by_index(BY_POOL, pool):
            if name_of(queue) not in kept and is_managed_object(queue):
                self._team_writes.pop(name_of(queue), None)  # a later creation is a new one
                result = _sooner(result, await self._delete(queue))
        return result

    async def _exists(self, name: str) -> bool:
        """Whether ClusterQueue *name* exists, asked of the API (the cache may lag)."""
        try:
            await self.writer.client.get(self.resource, name)
        except NotFound:
            return False
        return True

    def _say_shrink_below_usage(
        self, want: Mapping[str, Any], have: Mapping[str, Any] | None
    ) -> None:
        """Kueue evicts nothing when a quota drops below usage, but admits nothing there
        until usage falls: say so (docs/node-lifecycle.md, "Seeing why")."""
        below = quota_below_usage(want, have)
        if not below or have is None:
            return
        QUOTA_BELOW_USAGE.labels(clusterqueue=name_of(want)).inc()
        message = "nominal quota below usage (nothing is evicted; nothing new is admitted " + (
            "until usage falls): " + "; ".join(below)
        )
        log.warning("quota below usage", clusterqueue=name_of(want), below=below)
        recorder = self.writer.recorder
        if recorder is not None:
            recorder.event(have, "Warning", "QuotaBelowUsage", message, resource=self.resource)

    def _say_devices_gone(self, queue: Mapping[str, Any], gone: list[str]) -> None:
        """A flavor whose nodes report no devices stays in *queue* (as written) at quota 0;
        a Warning Event says why (docs/node-lifecycle.md, "Seeing why")."""
        if not gone or not isinstance(queue, Mapping):
            return
        message = (
            f"flavor(s) {', '.join(gone)}: the nodes report no devices in "
            "status.allocatable (the device plugin is down, or every card unhealthy, for "
            "longer than --device-grace): each stays in the queue with device quota 0; "
            "check the device plugin's pods on those nodes"
        )
        log.warning("no devices advertised", clusterqueue=name_of(queue), flavors=gone)
        recorder = self.writer.recorder
        if recorder is not None:
            recorder.event(queue, "Warning", NO_DEVICES_ADVERTISED, message, resource=self.resource)

    def _created(self, queue: Mapping[str, Any], flavors: int) -> None:
        """A Normal Event ``PoolCreated`` on a new pool: what one unit is, and its flavors."""
        if self.writer.recorder is None:
            return
        _, annotations = local_queue_metadata(queue)
        unit = annotations.get(UNIT_ANNOTATION) or "its unit"
        message = f"pool created: {unit}, from {flavors} flavor(s) of the managed nodes"
        self.writer.recorder.event(queue, "Normal", POOL_CREATED, message, resource=self.resource)

    def _wanted_flavors(self, name: str) -> set[str]:
        """The flavors the managed nodes of queue *name* have in their profiles."""
        profiles = self.caches.facts.profiles
        return {
            p.flavor
            for node in self.caches.managed_nodes(BY_QUEUE, name)
            for p in profiles(node)
            if p.queue == name and p.flavor
        }

    def _desired(
        self, name: str, flavors: list[dict[str, Any]], cohort_uid: str
    ) -> tuple[NodePool, float | None]:
        """The queues pool *name* wants, and when a node's verdict next changes by time alone."""
        return desired_pool(
            self.caches, self.policy, name, flavors, self.tracker, cohort_uid=cohort_uid
        )

    async def _delete(self, have: Mapping[str, Any] | None) -> Result | None:
        if have is None or is_deleting(have):
            return None
        # Held first, deleted once Kueue has reported on the held queue and that report
        # shows nothing reserved: its status can lag an admission by a second or more
        # (docs/teams.md, "Never more admitted than exists, meanwhile"). Kueue's report
        # of the hold brings the key back (RETIRING_RELEASED).
        if has_reservations(have) or not usage_is_final(have):
            await self._hold(have)
            return Result(requeue_after=self.reserved_requeue)
        try:  # the cache may lag behind Kueue's status: ask the API before deleting
            fresh = await self.writer.client.get(self.resource, name_of(have))
        except NotFound:
            return None
        if has_reservations(fresh) or not usage_is_final(fresh):
            return Result(requeue_after=self.reserved_requeue)
        await self.writer.delete(
            self.resource, fresh, "no flavor targets it and nothing is reserved"
        )
        return None

    async def _hold(self, have: Mapping[str, Any]) -> None:
        """A queue whose nodes are gone for good admits nothing more while Kueue still
        reports work in it (``stopPolicy: Hold`` evicts nothing; docs/node-lifecycle.md,
        "Whole-pool Hold"); it is deleted as before once nothing is reserved."""
        spec = have.get("spec")
        if not isinstance(spec, Mapping) or spec.get("stopPolicy") in STOPPED:
            return
        # Its own labels and notes stay (server-side apply would drop what is not sent):
        # a team queue keeps its pool, so its replacements still count what it holds.
        kept = {k: v for k, v in annotations_of(have).items() if "gpustack.ai/" in k}
        meta: dict[str, Any] = {
            "name": name_of(have),
            "labels": dict(labels_of(have)),
            "annotations": {
                **kept,
                HOLD_NOTE: "retiring (its nodes are gone, or teams changed): held until "
                "nothing is reserved, then deleted",
            },
        }
        owners = metadata(have).get("ownerReferences")
        if owners:
            meta["ownerReferences"] = owners
        held = {
            "apiVersion": have.get("apiVersion"),
            "kind": have.get("kind"),
            "metadata": meta,
            # It lends nothing: the queues replacing it are given what it does not hold.
            "spec": {**lending_nothing(spec), "stopPolicy": HOLD},
        }
        await self.writer.apply(self.resource, held, existed=True)


def build_cluster_queue_controller(
    builder: ControllerBuilder,
    caches: KueueCaches,
    writer: Writer,
    *,
    workers: int,
    reserved_requeue: float,
    waiting_requeue: float,
    coalesce: Coalesce,
    policy: ChainPolicy,
    tracker: AvailabilityTracker | None = None,
    pools: PoolRegistry | None = None,
    pool_changes: Channel[PoolsChanged] | None = None,
) -> Controller:
    """*coalesce*: one preset shared by the queue's own, Cohort, Node and flavor watches
    (docs/worker.md, "Batching"); *tracker*: each node's availability
    (docs/node-lifecycle.md); *pools* and *pool_changes*: the declared pools whose queues
    it writes too, and their changes (the wiring's channel)."""
    facts = caches.facts

    def by_node(node: dict[str, Any]) -> list[str]:
        names = caches.event_names(node, "queue")
        pool = pools.pool_of(node) if pools is not None else None
        # A declared pool's quota counts its live nodes (docs/autoscaling.md, "Quota").
        return [*names, pool.object_name] if pool is not None else names

    def by_flavor(flavor: dict[str, Any]) -> list[str]:
        queue = annotations_of(flavor).get(QUEUE_ANNOTATION, "")
        return [queue] if queue else []

    def by_cohort(cohort: dict[str, Any]) -> list[str]:
        cohort_name = name_of(cohort)
        queues = {
            annotations_of(f).get(QUEUE_ANNOTATION, "")
            for f in caches.flavors.indexer.by_index(BY_COHORT, cohort_name)
        }
        queues.update(
            name_of(q) for q in caches.cluster_queues.indexer.by_index(BY_COHORT, cohort_name)
        )
        return sorted(q for q in queues if q)

    reconciler = ClusterQueueReconciler(
        caches,
        writer,
        reserved_requeue=reserved_requeue,
        waiting_requeue=waiting_requeue,
        policy=policy,
        tracker=tracker,
        pools=pools,
    )

    # A queue's quotas are sums over its nodes: while nodes keep arriving, wait for a pause
    # (bounded; longer while nodes still await their labels) rather than write every
    # intermediate sum. Node, flavor, Cohort and the queue's own events share one window per
    # queue (one Coalesce value): an edit in a quiet moment is reconciled at once (the
    # leading edge), but during a burst neither the queue's own writes nor its Cohort's
    # creation may start a write per round trip.
    def by_team_queue(queue: dict[str, Any]) -> list[str]:
        pool = pool_of(queue)  # docs/teams.md: a team queue's events reach its pool
        return [pool] if pool else []

    def by_pool(queue: dict[str, Any]) -> list[str]:
        return [pool_of(queue) or name_of(queue)]

    builder = watch_teams(
        builder, caches.teams, lambda: caches.flavors.indexer.index_values(BY_QUEUE)
    )
    if pool_changes is not None:
        builder = builder.watches_channel(
            pool_changes, lambda c: c.keys("queue", caches.cluster_queues)
        )
    return (
        builder.for_(caches.kueue.cluster_queues, METADATA_OR_SPEC_CHANGED, coalesce=coalesce)
        .watches(
            caches.kueue.cluster_queues, by_team_queue, METADATA_OR_SPEC_CHANGED, coalesce=coalesce
        )
        .watches(caches.kueue.cluster_queues, by_pool, RETIRING_RELEASED, coalesce=coalesce)
        .watches(caches.kueue.cohorts, by_cohort, METADATA_OR_SPEC_CHANGED, coalesce=coalesce)
        .watches(NODES, by_node, NodeChanged(facts), coalesce=coalesce)
        .watches(
            caches.kueue.resource_flavors, by_flavor, METADATA_OR_SPEC_CHANGED, coalesce=coalesce
        )
        .with_options(max_concurrent_reconciles=workers)
        .complete(reconciler)
    )
