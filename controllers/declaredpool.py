"""Declared pools in the worker (docs/autoscaling.md): the chain of pools with no node yet.

One key (:data:`KEY`) for all pools: they are few, and which nodes the node-derived chain
counts depends on all of them at once. A reconcile reads the pool objects the cluster serves
(Karpenter NodePools, Cluster API MachineDeployments and MachinePools) and the policy's
declared pools, keeps the registry of sound pools (``worker/declaredpools.py``), says what
it refuses and lacks, and writes the kinds no other reconciler writes: the pools'
AdmissionChecks and ProvisioningRequestConfigs (deleting those no pool wants once their
queue is gone). The pools' flavors, Cohorts and ClusterQueues are written by the flavor,
Cohort and ClusterQueue reconcilers from the same registry (one writer per kind,
docs/architecture.md). When the registry changes, the nodes the old or new pools select are
filed again in the Node indexes and one :class:`PoolsChanged` goes out on the channel the
wiring gave it; it knows nothing of who listens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final

import structlog

from gpustack_operator.domain.chain.declaredpools import (
    CAPI_GROUP,
    CAPI_INFRASTRUCTURE_GROUP,
    DECLARED_POOLS_CONFIGMAP,
    DECLARED_POOLS_KEY,
    POOL_KINDS,
    POOL_LABEL,
    DeclaredPool,
    PoolKind,
    PoolRejection,
    PoolResult,
    pools_from_objects,
    validate_declared_pools,
)
from gpustack_operator.domain.chain.kueue import KUEUE_GROUP
from gpustack_operator.domain.chain.poolchain import declared_pool_chain
from gpustack_operator.domain.comparison import Compare, ObjectComparison
from gpustack_operator.domain.node.nodemodel import Part
from gpustack_operator.domain.nodeview import is_deleting, labels_of, name_of
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.runtime.channel import Channel
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.clock import WALL_CLOCK, Clock
from gpustack_operator.runtime.controller import (
    Controller,
    ControllerBuilder,
    EventRecorderLike,
    Request,
    Result,
    enqueue_mapped,
)
from gpustack_operator.runtime.errors import ApiError
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.resources import CONFIGMAPS, Resource
from gpustack_operator.worker.caches import KueueCaches
from gpustack_operator.worker.common import (
    METADATA_OR_SPEC_CHANGED,
    Writer,
    is_managed_object,
    is_up_to_date,
)
from gpustack_operator.worker.declarations import (
    Ignore,
    LiveDeclaration,
    status_configmap_informer,
)
from gpustack_operator.worker.declaredpools import PoolRegistry, PoolsChanged

log = structlog.get_logger(__name__)

NAME: Final = "declaredpool"
KEY: Final = "declared-pools"

_PARTS: Final[tuple[Part, ...]] = ("flavor", "queue", "cohort")
"""The node indexes (``BY_FLAVOR``, ``BY_QUEUE``, ``BY_COHORT``) a pool change refiles."""
INFRASTRUCTURE_KIND_SUFFIXES: Final = ("MachineTemplate", "MachinePool")
"""What a node group's ``infrastructureRef`` names (``DockerMachineTemplate``,
``AWSMachinePool``)."""
PROVISIONING_GROUP: Final = "autoscaling.x-k8s.io"

PROVISIONING_NOT_SERVED: Final = (
    "ProvisioningRequests are not available (Kueue serves no ProvisioningRequestConfig, or "
    "the cluster no autoscaling.x-k8s.io/v1 ProvisioningRequest; Kueue sets its check up "
    "only if that CRD is served when Kueue starts): autoscaled pools get no provisioning "
    "check; turn on Kueue's waitForPodsReady (docs/workloads.md, 'Pools that scale from zero')"
)

INACTIVE_CHECK: Final = (
    "the AdmissionCheck of an autoscaled pool is not Active: Kueue runs no ProvisioningRequest "
    "controller, most likely because the ProvisioningRequest CRD was installed after Kueue "
    "started; the check is left out of the pool's ClusterQueue (workloads are admitted "
    "without it: turn on waitForPodsReady, docs/workloads.md) until it becomes Active. "
    "Restart Kueue's controller manager"
)

_CHECK_COMPARISON: Final = ObjectComparison({"spec": Compare.CONTAINS})
"""AdmissionChecks and ProvisioningRequestConfigs: Kueue's CRDs default fields inside."""


def _is_active(check: Mapping[str, Any]) -> bool:
    conditions = (check.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)


def _uses_check(queue: Mapping[str, Any] | None, check: str) -> bool:
    """Whether *queue* (a pool's ClusterQueue, if cached) lists the admission check *check*."""
    strategy = ((queue or {}).get("spec") or {}).get("admissionChecksStrategy") or {}
    return any(c.get("name") == check for c in strategy.get("admissionChecks") or ())


def _created(obj: Mapping[str, Any], now: float) -> float:
    """The object's creationTimestamp as seconds since the epoch (*now* when absent)."""
    stamp = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return now


def pool_resource(kind: PoolKind, version: str) -> Resource:
    """The API resource of a pool kind (``domain.declaredpools.POOL_KINDS``) at *version*."""
    return Resource(kind.group, version, kind.kind, kind.plural, namespaced=kind.namespaced)


def provisioning_resources(version: str) -> tuple[Resource, Resource]:
    """Kueue's AdmissionCheck and ProvisioningRequestConfig at *version*."""
    return (
        Resource(KUEUE_GROUP, version, "AdmissionCheck", "admissionchecks", namespaced=False),
        Resource(
            KUEUE_GROUP,
            version,
            "ProvisioningRequestConfig",
            "provisioningrequestconfigs",
            namespaced=False,
        ),
    )


@dataclass
class PoolSources:
    """The informers of the pool objects the cluster serves, and what else it serves."""

    informers: list[Informer] = field(default_factory=list)
    provisioning: bool = False
    declarations: Informer | None = None
    """The ConfigMap a person declares pools in (``DECLARED_POOLS_CONFIGMAP``)."""
    live: LiveDeclaration[tuple[DeclaredPool, ...]] | None = None
    """The pools of that ConfigMap in force."""


async def served_pool_kinds(client: Client) -> list[Resource]:
    """The pool kinds the cluster serves now, each at the first of its versions served
    (``domain.declaredpools.POOL_KINDS``); with a Cluster API kind, the infrastructure
    providers' machine templates and machine pools too (their ``status.capacity`` sizes a
    node group, docs/autoscaling.md)."""
    versions: dict[str, list[str]] = {}
    kinds: list[Resource] = []
    for kind in POOL_KINDS:
        if kind.group not in versions:
            versions[kind.group] = await _served_versions(client, kind.group)
        for version in (v for v in kind.versions if v in versions[kind.group]):
            resource = pool_resource(kind, version)
            if await _serves(client, resource):
                kinds.append(resource)
            break
    if any(r.group == CAPI_GROUP for r in kinds):
        infra = await _served_versions(client, CAPI_INFRASTRUCTURE_GROUP)
        if infra:
            try:
                found = await client.served_kinds(CAPI_INFRASTRUCTURE_GROUP, infra[0])
            except ApiError as exc:
                log.warning("cannot discover Cluster API's infrastructure kinds", error=str(exc))
                found = []
            kinds.extend(r for r in found if r.kind.endswith(INFRASTRUCTURE_KIND_SUFFIXES))
    return kinds


def all_pool_kinds() -> list[Resource]:
    """Every pool kind the worker can read, at every version."""
    return [pool_resource(k, v) for k in POOL_KINDS for v in k.versions]


async def discover_pool_sources(
    client: Client, informer_of: Callable[[Resource], Informer], policy: ChainPolicy, kueue: str
) -> PoolSources:
    """Which pool objects the cluster serves (informers for those), and whether
    ProvisioningRequests are available (the policy's ``on``/``off`` wins over ``auto``)."""
    sources = PoolSources()
    for resource in await served_pool_kinds(client):
        sources.informers.append(informer_of(resource))
    wanted = policy.provisioning.served
    if wanted is None:
        _, config = provisioning_resources(kueue)
        request = Resource(
            PROVISIONING_GROUP, "v1", "ProvisioningRequest", "provisioningrequests", True
        )
        wanted = await _serves(client, config) and await _serves(client, request)
    sources.provisioning = bool(wanted)
    return sources


async def _served_versions(client: Client, group: str) -> list[str]:
    try:
        return await client.served_versions(group)
    except ApiError as exc:
        log.warning(
            "cannot discover an API group; its pools are not read", group=group, error=str(exc)
        )
        return []


async def _serves(client: Client, resource: Resource) -> bool:
    """Whether the cluster serves *resource* (API discovery: no RBAC on it needed)."""
    try:
        return resource.plural in await client.served_resources(resource.group, resource.version)
    except ApiError as exc:
        log.warning(
            "cannot discover a kind the declared pools use; left out",
            kind=resource.kind,
            group=resource.group,
            error=str(exc),
        )
        return False


class DeclaredPoolReconciler:
    def __init__(
        self,
        caches: KueueCaches,
        writer: Writer,
        policy: ChainPolicy,
        registry: PoolRegistry,
        sources: PoolSources,
        changes: Channel[PoolsChanged] | None = None,
        clock: Clock = WALL_CLOCK,
        informer_of: Callable[[Resource], Informer] | None = None,
    ) -> None:
        self.caches = caches
        self.clock = clock
        """Wall-clock seconds the inactive-check grace runs on (the worker's clock)."""
        self.writer = writer
        self.policy = policy
        self.registry = registry
        self.sources = sources
        self.changes = changes
        """Where a change of the registry goes out (the wiring's channel)."""
        self.settings = replace(policy.provisioning, served=sources.provisioning)
        registry.provisioning = self.settings
        kueue = caches.kueue
        self.check, self.config = provisioning_resources(kueue.version.value)
        self.pool_informers: dict[str, Informer] = {}
        self.controller: Controller | None = None
        """Its own controller, once built (it watches pool kinds served later)."""
        self.informer_of = informer_of
        """The manager's informers (for pool kinds served later)."""
        self._reported: tuple[str, ...] = ()
        self._said_provisioning = False
        self._said_inactive: set[str] = set()

    def missing_kinds(self) -> bool:
        """Whether a pool kind may still be installed (no NodePools, or no Cluster API kind
        watched yet)."""
        kinds = {(i.resource.group, i.resource.kind) for i in self.sources.informers}
        return not {(r.group, r.kind) for r in all_pool_kinds()} <= kinds

    async def rediscover(self, client: Client) -> None:
        """Watch the pool kinds the cluster serves now and did not before (a NodePool CRD
        installed after the worker started), and look at the pools again
        (docs/autoscaling.md, "In the worker")."""
        watched = {(i.resource.group, i.resource.kind) for i in self.sources.informers}
        for resource in await served_pool_kinds(client):
            if (resource.group, resource.kind) in watched:
                continue
            if self.controller is None or self.informer_of is None:
                return
            source = self.informer_of(resource)
            self.controller.watch(source, enqueue_mapped(lambda _: [KEY]))
            self.sources.informers.append(source)
            watched.add((resource.group, resource.kind))
            log.info("a pool kind is served now; its pools are read", kind=resource.kind)
            self.controller.queue.add(KEY)

    async def _declared(self) -> tuple[DeclaredPool, ...]:
        """The pools of the declarations ConfigMap in force
        (gpustack_operator/worker/declarations.py: each revision validated once, off the loop;
        a refused one leaves the last good pools in force, with a Warning Event), published in
        ``gpustack-declarations``."""
        live = self.sources.live
        if live is None:
            return ()
        await live.refresh()
        await live.publish(self.writer)
        return live.current() or ()

    def _objects(self) -> list[Mapping[str, Any]]:
        return [o for informer in self.sources.informers for o in informer.indexer.list()]

    async def __call__(self, request: Request) -> Result | None:
        declared = [*self.policy.declared_pools, *await self._declared()]
        results = pools_from_objects(
            self._objects(), declared, self.policy.manufacturers_by_resource
        )
        if (
            not self._said_provisioning
            and not self.sources.provisioning
            and self.policy.provisioning.served is None
            and any(isinstance(r, DeclaredPool) for r in results)
        ):
            log.warning(PROVISIONING_NOT_SERVED)  # once per process
            self._said_provisioning = True
        # Only the checks and the warnings of the chain are read here: no nodes needed.
        chain = declared_pool_chain(results, (), self.caches.kueue.version, self.settings)
        self._report(results, chain.warnings)
        unchecked, recheck = self._inactive_checks(chain.admission_checks)
        change = self._take(results, unchecked)
        try:
            await self._write_checks(chain.admission_checks, chain.provisioning_configs)
        finally:
            # After the checks, so a pool's queue is mostly written once its check exists;
            # sent even when a write failed (the registry has changed already).
            if change is not None and self.changes is not None:
                self.changes.send(change)
        return Result(requeue_after=recheck) if recheck else None

    async def _write_checks(
        self, checks: dict[str, dict[str, Any]], configs: dict[str, dict[str, Any]]
    ) -> None:
        """Apply the pools' AdmissionChecks and ProvisioningRequestConfigs (configs first)
        and delete those no pool wants, each once the pool's queue names the check no more
        (the ClusterQueue reconciler writes the queue)."""
        wanted: list[tuple[Resource, Informer | None, dict[str, dict[str, Any]]]] = [
            (self.config, self.pool_informers.get("config"), configs),
            (self.check, self.pool_informers.get("check"), checks),
        ]
        for resource, informer, objects in wanted:
            for name, want in objects.items():
                have = informer.indexer.get(name) if informer is not None else None
                if have is not None and not is_managed_object(have):
                    self.writer.not_ours(resource, have)
                    continue
                if have is not None and is_deleting(have):
                    continue  # its deletion brings the key back; then it is created anew
                if not is_up_to_date(have, want, _CHECK_COMPARISON):
                    await self.writer.apply(resource, want, existed=have is not None)
        queues = self.caches.cluster_queues.indexer
        for resource, informer, objects in reversed(wanted):
            if informer is None:
                continue
            for have in informer.indexer.list():
                if POOL_LABEL not in labels_of(have) or name_of(have) in objects:
                    continue
                if not is_managed_object(have) or is_deleting(have):
                    continue
                if _uses_check(queues.get(name_of(have)), name_of(have)):
                    continue  # its queue lets go first (the queue's change brings us back)
                await self.writer.delete(resource, have, "no declared pool wants it")

    def _inactive_checks(self, checks: Mapping[str, Any]) -> tuple[set[str], float | None]:
        """docs/autoscaling.md, "A check that never becomes Active": the pools whose check,
        older than the grace without ``Active=True``, their queue leaves out (said once per
        check); and the seconds until a younger one's grace ends, if any."""
        informer = self.pool_informers.get("check")
        if informer is None:
            return set(), None
        grace = self.settings.inactive_grace_seconds
        now = self.clock()
        soonest: float | None = None
        unchecked: set[str] = set()
        for name in checks:
            have = informer.indexer.get(name)
            if have is None or _is_active(have):
                self._said_inactive.discard(name)
                continue
            age = now - _created(have, now)
            if age < grace:
                soonest = grace - age if soonest is None else min(soonest, grace - age)
                continue
            unchecked.add(name)
            if name not in self._said_inactive:
                log.warning(INACTIVE_CHECK, check=name)
                self._said_inactive.add(name)
        return unchecked, soonest

    def _take(self, results: Sequence[PoolResult], unchecked: set[str]) -> PoolsChanged | None:
        """Make *results* (and the checks left out) the registry's. When they change, the
        nodes the old or new pools select are filed again in the Node indexes, and one
        :class:`PoolsChanged` (returned, for the channel) says what changed: the pools
        before and after and the names those nodes had (under the old pools) and have
        (under the new)."""
        sound = [r for r in results if isinstance(r, DeclaredPool)]
        registry = self.registry
        first = not registry.known
        pools = [*registry.sound, *sound] if tuple(sound) != registry.sound else []
        indexer = self.caches.nodes.indexer
        touched = [n for n in indexer.list() if any(p.matches(n) for p in pools)]
        old = {part: self._names(touched, part) for part in _PARTS}
        before = registry.update(results, unchecked)
        if before is None:
            return None
        for node in touched:
            indexer.upsert(node)
        names = {part: frozenset(old[part] | self._names(touched, part)) for part in _PARTS}
        return PoolsChanged(before, registry.sound, names, first=first)

    def _names(self, nodes: Iterable[dict[str, Any]], part: Part) -> set[str]:
        facts = self.caches.facts
        return {name for n in nodes for name in facts.names(n, part)}

    def _report(self, results: Sequence[PoolResult], warnings: Sequence[PoolRejection]) -> None:
        """One warning per rejected pool and per pool that lacks something it asked for
        (docs/autoscaling.md), again only when the set of reasons changes."""
        rejected = sorted(
            f"{r.key}: {r.reason}" for r in results if not isinstance(r, DeclaredPool)
        )
        lacking = sorted(f"{r.key}: {r.reason}" for r in warnings)
        reasons = (*rejected, *("+" + w for w in lacking))
        if reasons == self._reported:
            return
        self._reported = reasons
        for reason in rejected:
            log.warning("declared pool gets no queue", reason=reason)
        for reason in lacking:
            log.warning("declared pool gets no provisioning check", reason=reason)


async def add_pool_controller(
    manager: Manager,
    caches: KueueCaches,
    writer: Writer,
    policy: ChainPolicy,
    registry: PoolRegistry,
    changes: Channel[PoolsChanged] | None = None,
    clock: Clock = WALL_CLOCK,
) -> Controller:
    """Discover the pool sources and add the declared-pool controller to *manager*; a
    change of *registry* goes out on *changes* (the wiring's channel, which the flavor,
    Cohort and ClusterQueue controllers watch). Kinds served later are watched once
    :meth:`DeclaredPoolReconciler.rediscover` finds them."""
    sources = await discover_pool_sources(
        manager.client, manager.informer, policy, caches.kueue.version.value
    )
    sources.declarations = manager.informer(
        CONFIGMAPS,
        namespace=policy.system_namespace,
        field_selector=f"metadata.name={DECLARED_POOLS_CONFIGMAP}",
    )
    sources.live = live_declared_pools(
        sources.declarations,
        status_configmap_informer(manager, policy.system_namespace),
        policy,
        writer.recorder,
    )
    log.info(
        "declared pools",
        sources=[f"{i.resource.kind}.{i.resource.group}" for i in sources.informers],
        declared=len(policy.declared_pools),
        provisioning_requests=sources.provisioning,
    )
    return build_declared_pool_controller(
        manager.controller(NAME),
        caches,
        writer,
        policy=policy,
        registry=registry,
        sources=sources,
        informer_of=manager.informer,
        changes=changes,
        clock=clock,
    )


def build_declared_pool_controller(
    builder: ControllerBuilder,
    caches: KueueCaches,
    writer: Writer,
    *,
    policy: ChainPolicy,
    registry: PoolRegistry,
    sources: PoolSources,
    informer_of: Callable[[Resource], Informer],
    changes: Channel[PoolsChanged] | None = None,
    clock: Clock = WALL_CLOCK,
) -> Controller:
    """The declared-pool controller: pool objects, the declarations, the pools' queues and
    their checks all map to :data:`KEY`."""
    reconciler = DeclaredPoolReconciler(
        caches, writer, policy, registry, sources, changes, clock=clock, informer_of=informer_of
    )

    def always(_: dict[str, Any]) -> list[str]:
        return [KEY]

    def ours(obj: dict[str, Any]) -> list[str]:
        return [KEY] if POOL_LABEL in labels_of(obj) else []

    kueue = caches.kueue
    # A pool queue's deletion lets its check go (the ClusterQueue reconciler writes it).
    built = builder.watches(kueue.cluster_queues, ours, METADATA_OR_SPEC_CHANGED)
    if sources.provisioning:
        reconciler.pool_informers["check"] = informer_of(reconciler.check)
        reconciler.pool_informers["config"] = informer_of(reconciler.config)
        built = built.watches(reconciler.check, ours).watches(reconciler.config, ours)
    for informer in sources.informers:
        built = built.watches(informer.resource, always)
    if sources.declarations is not None:
        built = built.watches(
            CONFIGMAPS,
            always,
            namespace=sources.declarations.namespace,
            field_selector=sources.declarations.field_selector,
        )
    controller = built.with_options(max_concurrent_reconciles=1).complete(reconciler)
    reconciler.controller = controller
    if sources.live is not None:  # the pools in force are known before the first reconcile
        controller.watch_with(sources.live, Ignore())
    return controller


REFUSED: Final = "DeclaredPoolsRefused"
"""The Warning Event's reason on a refused ``gpustack-declared-pools`` revision."""


def live_declared_pools(
    configmaps: Informer,
    status: Informer | None,
    policy: ChainPolicy,
    recorder: EventRecorderLike | None,
) -> LiveDeclaration[tuple[DeclaredPool, ...]]:
    """The pools of ``gpustack-declared-pools`` in force (docs/autoscaling.md, "Pools
    declared by a person"), validated as ``--declared-pools FILE`` is."""
    by_resource = dict(policy.manufacturers_by_resource)

    def validator() -> Callable[[str], tuple[DeclaredPool, ...]]:
        return lambda text: validate_declared_pools(text, by_resource)

    def names(pools: tuple[DeclaredPool, ...] | None) -> tuple[str, ...]:
        return tuple(p.name for p in pools or ())

    return LiveDeclaration(
        kind="pools",
        configmaps=configmaps,
        status=status,
        namespace=policy.system_namespace,
        name=DECLARED_POOLS_CONFIGMAP,
        key=DECLARED_POOLS_KEY,
        fallback=None,
        validator=validator,
        restore=lambda text: validate_declared_pools(text, by_resource),
        names=names,
        reason=REFUSED,
        recorder=recorder,
    )
