"""The worker's reconcilers on one manager: capacity profiling and the Kueue chain.

``setup_worker(manager, config)`` registers seven independent controllers (each with its
own work queue and workers) on the manager's shared informers:

- ``capacity`` (NodeFeatures, docs/labels.md) at once: it needs no Kueue;
- ``unpooled`` (docs/devices.md, "Why a device gets no pool") at once: an Event and a gauge
  for devices that feed no pool;
- ``kueueconfig`` (docs/workloads.md) beside the queue controllers: it reads Kueue's own
  configuration and reports what the queues need from it;
- ``resourceflavor``, ``cohort``, ``clusterqueue``, ``localqueue`` (docs/worker.md) once Kueue is
  found. Kueue is a prerequisite the worker checks for, not installs (docs/worker.md): a
  discovery loop (on every replica, leader or not) asks which ``kueue.x-k8s.io`` versions the
  cluster serves, prefers v1beta2 over v1beta1, keeps ``/readyz`` failing with one clear log
  line while neither is served, and retries. Once a version is known, the Kueue informers
  start (on standbys too, so a new leader starts warm; earlier they could never sync) and
  the four queue controllers join the manager, which runs them while it leads.

Build the manager with :func:`new_worker_manager` to get the worker's informer transform
(Nodes trimmed to what the reconcilers read); any manager works, at a memory cost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final

import anyio
import structlog

from gpustack_operator.apis import KUEUE_GROUP, KueueResources, kueue_resources
from gpustack_operator.controllers.capacity import setup_capacity
from gpustack_operator.controllers.clusterqueue import NAME as CLUSTER_QUEUE
from gpustack_operator.controllers.clusterqueue import build_cluster_queue_controller
from gpustack_operator.controllers.cohort import NAME as COHORT
from gpustack_operator.controllers.cohort import build_cohort_controller
from gpustack_operator.controllers.declaredpool import DeclaredPoolReconciler, add_pool_controller
from gpustack_operator.controllers.flavor import NAME as FLAVOR
from gpustack_operator.controllers.flavor import build_flavor_controller
from gpustack_operator.controllers.kueueconfig import NAME as KUEUE_CONFIG
from gpustack_operator.controllers.kueueconfig import (
    build_kueue_config_controller,
    kueue_configmap_informer,
)
from gpustack_operator.controllers.localqueue import NAME as LOCAL_QUEUE
from gpustack_operator.controllers.localqueue import build_local_queue_controller
from gpustack_operator.controllers.teams import NAME as TEAMS
from gpustack_operator.controllers.teams import build_teams_controller
from gpustack_operator.controllers.topology import NAME as TOPOLOGY
from gpustack_operator.controllers.topology import build_topology_controller
from gpustack_operator.controllers.unpooled import setup_unpooled
from gpustack_operator.domain.chain.kueueconfig import (
    DEFAULT_KUEUE_CONFIGMAP,
    DEFAULT_KUEUE_NAMESPACE,
)
from gpustack_operator.domain.chain.tenancy import TenantSettings
from gpustack_operator.domain.labels import MANAGED_BY_VALUE
from gpustack_operator.domain.node.workertimers import TIMERS_CONFIGMAP, timers_configmap
from gpustack_operator.domain.node.workerverdicts import VERDICTS_CONFIGMAP, verdicts_configmap
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.runtime.backoff import BackoffPolicy
from gpustack_operator.runtime.channel import Channel
from gpustack_operator.runtime.client import ApiError, Client
from gpustack_operator.runtime.clock import WALL_CLOCK, Clock
from gpustack_operator.runtime.coalesce import CoalescePresets, Hold
from gpustack_operator.runtime.controller import (
    Controller,
)
from gpustack_operator.runtime.informer import HandlerFuncs, InformerFactory, ReflectorSettings
from gpustack_operator.runtime.manager import Manager, ManagerOptions
from gpustack_operator.runtime.poll import poll_until
from gpustack_operator.runtime.resources import CONFIGMAPS, NODES, RESOURCE_SLICES
from gpustack_operator.worker.availability import AvailabilityTracker
from gpustack_operator.worker.caches import (
    KueueCaches,
    add_node_indexes,
    fleet_settling,
    node_models,
)
from gpustack_operator.worker.common import Writer, trim_for_worker
from gpustack_operator.worker.declarations import status_configmap_informer
from gpustack_operator.worker.declaredpools import BY_DECLARED_POOL, PoolRegistry, PoolsChanged
from gpustack_operator.worker.liveteams import LiveTeams, teams_configmap_informer

log = structlog.get_logger(__name__)

TENANT_NO_NODE_FEATURES: Final = (
    "vCluster tenant: no NodeFeatures, no NFD and no device managers (the host runs NFD and "
    "the GPU stacks); pools come from the host-owned labels and allocatable of synced Nodes, "
    "none from pseudo nodes (docs/tenants.md)"
)

KUEUE_MISSING_MESSAGE: Final = (
    "Kueue CRDs are not installed: install Kueue >= 0.13 (it serves kueue.x-k8s.io/v1beta2; "
    "v1beta1 is accepted too), e.g. `kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/kueue/releases/download/<version>/manifests.yaml`. "
    "The worker stays not ready and keeps checking."
)


WORKER_INFORMER_BACKOFF: Final = BackoffPolicy(initial=0.8, cap=3.0, jitter=0.3)
"""The worker's list/watch retries: 0.8 s doubling to 3 s plus up to 30% jitter (at most
3.9 s), so its caches, and ``/readyz``, follow the API server within seconds of it
recovering; one process with a handful of informers (docs/runtime.md, "Recovery after
faults")."""


@dataclass(frozen=True)
class WorkerTiming:
    """The worker's waits and coalescing windows (docs/worker.md, "Batching"); the
    coalescing presets of its controllers are built from it (:meth:`presets`)."""

    kueue_discovery_interval: float = 10.0
    """Seconds between Kueue discovery attempts while Kueue is missing."""
    pool_discovery_interval: float = 30.0
    """Seconds between looks for pool kinds not served yet (a NodePool CRD installed
    later, docs/autoscaling.md "In the worker")."""
    verdicts_interval: float = 5.0
    """Seconds between looks for changed per-node verdicts to publish for ``queues``
    (docs/node-lifecycle.md, "Seeing why")."""
    reserved_requeue: float = 15.0
    """Seconds before re-checking a flavorless ClusterQueue that still has reservations."""
    waiting_requeue: float = 1.0
    """Seconds before retrying a ClusterQueue whose Cohort is not in the cache yet."""
    cohort_deleting_requeue: float = 15.0
    """Seconds before re-checking a Cohort that is being deleted while nodes need it."""
    batch_window: float = 1.0
    """The coalescing window of the queue reconcilers' Node, flavor and ClusterQueue watches
    (``runtime.coalesce``): the first event after a quiet window is reconciled at once, later
    ones once the events pause this long (a fleet joining rewrites each queue a few times,
    not once per node). Changes to the reconciled objects themselves are not delayed."""
    batch_max_delay: float = 10.0
    """ClusterQueues only: while Node or flavor events for a queue keep coming (closer than
    ``batch_window`` apart), its reconcile waits for a pause, but at most this many seconds
    after the first event. Its quotas are sums over nodes: writing each intermediate sum
    while a fleet joins is wasted work for the API server and Kueue."""
    capacity_window: float = 1.0
    """The coalescing window of the capacity controller's Node (and ResourceSlice) watches,
    per node: a node whose labels flip many times a second gets its NodeFeature written at
    most once per window, with the state at the end of the window; the first change after a
    quiet window is written at once (docs/worker.md, "Flapping nodes"). Changes to the
    NodeFeature itself are not delayed."""
    settling_max_delay: float = 60.0
    """ClusterQueues only, while Nodes are on their way to the capacity labels the worker
    publishes for them (start-up on an unprofiled cluster, a fleet joining; see
    ``gpustack_operator.worker.caches.fleet_settling``): pauses in the events do not count, a
    queue is reconciled when that ends or this many seconds after its first event. (Values below
    ``batch_max_delay``, and that below ``batch_window``, are raised to it.)"""

    def __post_init__(self) -> None:
        if not self.capacity_window > 0:
            raise ValueError(
                f"capacity_window must be a positive number of seconds, got {self.capacity_window}"
            )

    def presets(self, settling: Hold | None = None) -> CoalescePresets:
        """The queue controllers' coalescing presets; *settling* holds their bursts while
        nodes await their capacity labels."""
        return CoalescePresets(
            window=self.batch_window,
            max_delay=self.batch_max_delay,
            hold=settling,
            hold_max_delay=self.settling_max_delay,
        )

    def capacity_presets(self) -> CoalescePresets:
        """The capacity controller's: one window per node (docs/worker.md, "Flapping nodes")."""
        return CoalescePresets(window=self.capacity_window)


@dataclass
class WorkerConfig:
    """What the worker's reconcilers need to know about their cluster."""

    policy: ChainPolicy = field(default_factory=lambda: ChainPolicy(load_manufacturers()))
    """What the chain is made of (docs/configuration.md, "Chain policy"); every reconciler
    takes it whole. A pinned Kueue version still waits until the cluster serves it."""
    dra: bool = False
    """Read DRA ResourceSlices (set when the cluster serves ``resource.k8s.io/v1``; see
    :func:`serves_dra`)."""
    field_manager: str = MANAGED_BY_VALUE
    kueue_namespace: str = DEFAULT_KUEUE_NAMESPACE
    kueue_configmap: str = DEFAULT_KUEUE_CONFIGMAP
    """Where Kueue's configuration is read from (docs/workloads.md, "Kueue's configuration")."""
    max_concurrent_reconciles: int = 2
    timing: WorkerTiming = field(default_factory=WorkerTiming)
    """Every wait and coalescing window of the worker, one value."""
    clock: Clock = WALL_CLOCK
    """Wall-clock seconds the availability rule's timers run on (docs/node-lifecycle.md);
    tests pass a clock they drive."""

    def __post_init__(self) -> None:
        if self.max_concurrent_reconciles < 1:
            raise ValueError("max_concurrent_reconciles must be at least 1")

    @property
    def tenant(self) -> TenantSettings:
        """The tenant settings of :attr:`policy`, resolved (docs/tenants.md): the worker
        tells an unset tenancy from the live Nodes at start (:func:`detect_tenancy_at_start`);
        a policy that never went through it counts as an ordinary cluster."""
        return self.policy.tenant_settings()


class Worker:
    """The worker's state on one manager (returned by :func:`setup_worker`)."""

    def __init__(self, manager: Manager, config: WorkerConfig) -> None:
        self.manager = manager
        self.config = config
        self.writer = Writer(manager.client, config.field_manager, manager.recorder, manager.fence)
        self.kueue: KueueResources | None = None
        """The Kueue kinds in use, once discovered."""
        self.kueue_found = anyio.Event()
        self._reported_missing_kueue = False
        self.caches: KueueCaches | None = None
        self.queue_controllers: list[Controller] = []
        """The Kueue controllers (four queue controllers and the configuration check), once
        Kueue is discovered (they run on the leader)."""
        self.facts = node_models(
            manager.informer(NODES),
            config.policy.manufacturers,
            publishes_labels=not config.tenant.is_tenant,
            topology=None if config.tenant.is_tenant else config.policy.topology,
            tolerations=config.policy.flavor_tolerations,
        )
        """Per-Node derived data shared by all five controllers and the Node indexes."""
        self.settling = fleet_settling(manager.informer(NODES))
        """Whether Nodes still await their capacity labels (the ClusterQueues' hold)."""
        self.availability = AvailabilityTracker(
            config.policy.lifecycle, clock=config.clock, recorder=manager.recorder
        )
        """Each node's availability and what the worker remembers of it
        (docs/node-lifecycle.md)."""
        manager.informer(NODES).add_event_handler(HandlerFuncs(delete=self.availability.forget))
        self.pool_controller: Controller | None = None
        """The declared-pool controller, once Kueue is found (docs/autoscaling.md)."""
        self.pools = PoolRegistry()
        """The declared pools (docs/autoscaling.md); the Node facts ask it which nodes are
        claimed."""
        self.facts.pools = self.pools
        pools = self.pools
        self.pool_changes: Channel[PoolsChanged] = Channel(
            "declared pools",
            replay=lambda: [PoolsChanged((), pools.sound)] if pools.known else [],
        )
        """The declared-pool controller's changes of :attr:`pools`, watched by the flavor,
        Cohort and ClusterQueue controllers (each maps a change to its own names): the one
        fan-out between reconcilers, owned here (docs/architecture.md)."""

    @property
    def excluded_namespaces(self) -> tuple[str, ...]:
        return self.config.policy.namespaces_without_queues

    def kueue_ready(self) -> bool:
        """Readiness: Kueue is served (the informers-synced check covers its caches)."""
        return self.kueue is not None

    async def discover_kueue(self) -> None:
        """Find the Kueue version to write; log one clear line while it is missing; then
        look for pool kinds installed later (:meth:`watch_pool_kinds`)."""
        await poll_until(self._found_kueue, self.config.timing.kueue_discovery_interval)
        await self.watch_pool_kinds()

    async def watch_pool_kinds(self) -> None:
        """While a pool kind is not served, ask API discovery again every
        ``pool_discovery_interval`` and watch it once it is (docs/autoscaling.md, "In the
        worker"); a failed discovery is tried again."""
        controller = self.pool_controller
        reconciler = getattr(controller, "reconciler", None) if controller else None
        if not isinstance(reconciler, DeclaredPoolReconciler):
            return
        looked = False  # start-up discovery just ran: the first look waits an interval

        async def every_kind_watched() -> bool:
            nonlocal looked
            if not reconciler.missing_kinds():
                return True
            if looked:
                try:
                    await reconciler.rediscover(self.manager.client)
                except ApiError as err:
                    log.warning("pool kind discovery failed; retrying", error=str(err))
            looked = True
            return not reconciler.missing_kinds()

        await poll_until(every_kind_watched, self.config.timing.pool_discovery_interval)

    async def _found_kueue(self) -> bool:
        """One discovery attempt: True once a Kueue version is chosen and its controllers added."""
        try:
            served = await self.manager.client.served_versions(KUEUE_GROUP)
        except ApiError as err:
            log.warning("Kueue discovery failed; retrying", error=str(err))
            return False
        version = self.config.policy.kueue_version_among(served)
        if version is None:
            if not self._reported_missing_kueue:
                if served:
                    log.error(
                        f"Kueue serves {', '.join(served)}, not the requested "
                        f"{self.config.policy.kueue_version}: pass --kueue-version=auto or "
                        "upgrade Kueue. The worker stays not ready and keeps checking."
                    )
                else:
                    log.error(KUEUE_MISSING_MESSAGE)
                self._reported_missing_kueue = True
            return False
        self.kueue = kueue_resources(version)
        try:
            topologies = await self.manager.client.served_resources(KUEUE_GROUP, version.value)
        except ApiError as err:
            log.warning("Kueue discovery failed; retrying", error=str(err))
            return False
        if "topologies" not in topologies:
            # A Kueue older than 0.14, or one installed after the worker started without the
            # kind: no Topology informer, no TAS objects (docs/topology.md, "The switch").
            self.kueue = replace(self.kueue, topologies=None)
            if self.config.policy.topology.enabled:
                log.warning(TAS_UNSERVED)
        log.info("Kueue found", version=version.value, served=served)
        # Caches warm up on standbys too, so a new leader starts with them full; the
        # controllers are the manager's: they run while it leads.
        self.caches = KueueCaches.create(self.manager, self.kueue, self.facts, self.config.tenant)
        self.caches.teams = LiveTeams(  # docs/teams.md, "Where the declaration lives"
            teams_configmap_informer(self.manager, self.config.policy.system_namespace),
            self.config.policy.system_namespace,
            fallback=self.config.policy.teams,
            manufacturers=self.config.policy.manufacturers,
            cluster_queues=self.caches.cluster_queues,
            namespaces=self.caches.namespaces,
            status=status_configmap_informer(self.manager, self.config.policy.system_namespace),
            recorder=self.manager.recorder,
        )
        self.queue_controllers = self._add_queue_controllers(self.caches)
        self.pool_controller = await add_pool_controller(
            self.manager,
            self.caches,
            self.writer,
            self.config.policy,
            self.pools,
            self.pool_changes,
            clock=self.config.clock,
        )
        self.kueue_found.set()
        return True

    def _add_queue_controllers(self, caches: KueueCaches) -> list[Controller]:
        """Add the four queue controllers, the Kueue configuration check and the teams
        reporter to the manager (started at once when it leads)."""
        config = self.config
        policy = config.policy
        timing = config.timing
        manager = self.manager
        workers = config.max_concurrent_reconciles
        presets = timing.presets(self.settling)
        controllers = [
            build_flavor_controller(
                manager.controller(FLAVOR),
                caches,
                self.writer,
                workers=workers,
                coalesce=presets.until_quiet(),
                policy=policy,
                pools=self.pools,
                pool_changes=self.pool_changes,
            ),
            build_cohort_controller(
                manager.controller(COHORT),
                caches,
                self.writer,
                workers=workers,
                deleting_requeue=timing.cohort_deleting_requeue,
                coalesce=presets.until_quiet(),
                policy=policy,
                tracker=self.availability,
                pools=self.pools,
                pool_changes=self.pool_changes,
            ),
            build_cluster_queue_controller(
                manager.controller(CLUSTER_QUEUE),
                caches,
                self.writer,
                workers=workers,
                reserved_requeue=timing.reserved_requeue,
                waiting_requeue=timing.waiting_requeue,
                coalesce=presets.until_quiet_or_late(),
                policy=policy,
                tracker=self.availability,
                pools=self.pools,
                pool_changes=self.pool_changes,
            ),
            build_local_queue_controller(
                manager.controller(LOCAL_QUEUE),
                caches,
                self.writer,
                workers=workers,
                policy=policy,
                coalesce=presets.deletes_at_once(),
            ),
            *(
                [
                    build_topology_controller(
                        manager.controller(TOPOLOGY),
                        caches,
                        self.writer,
                        workers=workers,
                        policy=policy.topology,
                    )
                ]
                if caches.topologies is not None
                else []
            ),
            build_kueue_config_controller(
                manager.controller(KUEUE_CONFIG),
                caches,
                kueue_configmap_informer(manager, config.kueue_namespace, config.kueue_configmap),
                manager.recorder,
                namespace=config.kueue_namespace,
                name=config.kueue_configmap,
            ),
        ]
        if caches.teams is not None:  # docs/teams.md, "Refused declarations"
            controllers.append(
                build_teams_controller(manager.controller(TEAMS), caches.teams, self.writer)
            )
        return controllers


async def serves_dra(client: Client) -> bool:
    """Whether the cluster serves DRA ``resource.k8s.io/v1`` (ResourceSlices); a failed
    discovery counts as no, with a warning."""
    try:
        return "v1" in await client.served_versions(RESOURCE_SLICES.group)
    except ApiError as exc:
        log.warning(
            "cannot discover resource.k8s.io; DRA ResourceSlices are not read", error=str(exc)
        )
        return False


TAS_UNSERVED: Final = (
    "Kueue serves no topologies in v1beta2 or v1beta1 (Kueue older than 0.14): "
    "Topology-Aware Scheduling is off, the chain is built without it"
)


async def detect_topology_at_start(client: Client, policy: ChainPolicy) -> ChainPolicy:
    """*policy* with TAS turned off, said once, when the Kueue installed serves no
    ``topologies`` in a version this project writes (docs/topology.md, "The switch"). With
    no Kueue yet, TAS stays as the policy says (a Kueue installed now is 0.14 or later)."""
    topology = policy.topology
    if not topology.enabled:
        if topology.reason:
            log.info("topology-aware scheduling off", reason=topology.reason)
        return policy
    try:
        served = await client.served_versions(KUEUE_GROUP)
        found = [
            v
            for v in ("v1beta2", "v1beta1")
            if v in served and "topologies" in await client.served_resources(KUEUE_GROUP, v)
        ]
    except ApiError as exc:
        log.warning("cannot discover Kueue's topologies; TAS stays on", error=str(exc))
        return policy
    if served and not found:
        log.warning(TAS_UNSERVED)
        return replace(policy, topology=topology.off(TAS_UNSERVED))
    return policy


async def detect_tenancy_at_start(client: Client, policy: ChainPolicy) -> ChainPolicy:
    """*policy* with its kind of cluster told from the cluster's Nodes, read once at start
    when it is not set (docs/tenants.md, "Three kinds of cluster"), logged in one line."""
    detected = policy.tenancy is None
    nodes = (await client.list_all(NODES)).items if detected else ()
    resolved = policy.with_tenancy_of(nodes)
    log.info(
        "tenancy",
        tenancy=resolved.tenant_settings().tenancy.value,
        detected=detected,
        virtual_scheduler=resolved.virtual_scheduler,
        quota_caps=dict(resolved.tenant_quota_caps),
    )
    return resolved


async def publish_timers(writer: Writer, policy: ChainPolicy) -> None:
    """Apply the ConfigMap of the lifecycle timers in force, so ``queues`` reads them
    (docs/node-lifecycle.md, "Timers"). A refusal is logged, not fatal: ``queues`` then
    assumes its own flags."""
    want = timers_configmap(policy.lifecycle, policy.system_namespace)
    try:
        await writer.apply(CONFIGMAPS, want, existed=True)
    except Exception as exc:  # a Role without configmaps create/patch, transport errors
        log.warning(
            "could not publish the lifecycle timers; queues assumes its own flags",
            configmap=TIMERS_CONFIGMAP,
            error=str(exc),
        )


async def publish_verdicts(
    writer: Writer, tracker: AvailabilityTracker, namespace: str, interval: float
) -> None:
    """Apply the ConfigMap of the per-node verdicts whenever they change, looking every
    *interval* seconds, so ``queues`` shows what the worker's memory knows
    (docs/node-lifecycle.md, "Seeing why"). A refusal is logged and tried again."""
    last: dict[str, Any] | None = None

    async def publish() -> bool:
        nonlocal last
        want = verdicts_configmap(tracker.verdicts(), namespace)
        if want == last:
            return False
        try:
            await writer.apply(CONFIGMAPS, want, existed=last is not None)
        except Exception as exc:  # a Role without configmaps create/patch, transport errors
            log.warning(
                "could not publish the node verdicts; queues judges nodes without them",
                configmap=VERDICTS_CONFIGMAP,
                error=str(exc),
            )
            return False
        last = want
        return False  # never done: publish for as long as the worker leads

    await poll_until(publish, interval)


def setup_worker(manager: Manager, config: WorkerConfig) -> Worker:
    """Register the worker's seven reconcilers and Kueue discovery on *manager*.

    Call before ``manager.run()``. The capacity and unpooled controllers are added at once;
    the four Kueue controllers are added once Kueue is discovered (on every replica; they run
    on the leader). Adds the readiness check ``kueue``.
    """
    worker = Worker(manager, config)
    add_node_indexes(manager.informer(NODES), worker.facts)
    if BY_DECLARED_POOL not in manager.informer(NODES).indexer.index_names:
        manager.informer(NODES).add_index(
            BY_DECLARED_POOL, lambda n: [c] if (c := worker.pools.claim(n)) else []
        )
    if config.tenant.is_tenant:
        log.info(TENANT_NO_NODE_FEATURES, tenancy=config.tenant.tenancy.value)
    else:
        setup_capacity(
            manager,
            worker.writer,
            policy=config.policy,
            facts=worker.facts,
            max_concurrent_reconciles=config.max_concurrent_reconciles,
            dra=config.dra,
            coalesce=config.timing.capacity_presets().per_key(),
        )
    setup_unpooled(
        manager,
        facts=worker.facts,
        dra=config.dra,
        settling=config.policy.unpooled_settling,
    )
    manager.add_readyz_check("kueue", worker.kueue_ready)
    manager.add_runnable(worker.discover_kueue, name="kueue discovery", needs_leader=False)
    manager.add_runnable(
        lambda: publish_timers(worker.writer, config.policy), name="lifecycle timers"
    )
    manager.add_runnable(
        lambda: publish_verdicts(
            worker.writer,
            worker.availability,
            config.policy.system_namespace,
            config.timing.verdicts_interval,
        ),
        name="node verdicts",
    )
    return worker


def new_worker_manager(
    client: Client,
    options: ManagerOptions | None = None,
    *,
    clock: Callable[[], float] | None = None,
) -> Manager:
    """A manager whose shared informers use the worker's transform (:func:`trim_for_worker`);
    *clock* is its leader election's monotonic clock."""
    opts = options or ManagerOptions()
    if opts.reflector is None:
        opts = replace(opts, reflector=ReflectorSettings(backoff=WORKER_INFORMER_BACKOFF))
    informers = InformerFactory(
        client,
        default_transform=trim_for_worker,
        resync_period=opts.resync_period,
        settings=opts.reflector,
    )
    return Manager(client, opts, informers=informers, clock=clock)
