"""One node-derived pool's objects, from its member nodes' models (docs/architecture.md,
"One function per pool").

A pool of nodes is one ClusterQueue's flavors and the managed nodes of each. Its objects
are the ClusterQueue (or, where teams divide the pool, the team queues), the part of its
Cohort's own quota the teams leave over, and its ResourceFlavors. ``desired_state`` loops
over these functions for every pool at once; the worker's ResourceFlavor, ClusterQueue and
Cohort reconcilers call them for the one pool a key names. Each feature's branch
(availability verdicts and holds, tenant caps, host counting, teams' split and the
Cohort's share, TAS and the tenant's selector on a flavor) is written here once, so the
two paths cannot drift apart. Pure: the cluster's state (what retiring queues hold, the
Cohort's uid) is given, never read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack_operator.domain.chain.flavors import ProfilesOf, desired_resource_flavor
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.kueueusage import Held
from gpustack_operator.domain.chain.queues import (
    DEFAULT_HOST_COUNTING,
    DEFAULT_QUOTA_RESOURCES,
    AvailabilityOf,
    HostCounting,
    QuotaResources,
    desired_cluster_queue,
    without_flavors,
)
from gpustack_operator.domain.chain.teams import (
    PoolSplit,
    Teams,
    cohort_resource_groups,
    divides,
    split_pool,
    with_cohort_quota,
)
from gpustack_operator.domain.chain.tenancy import tenant_cluster_queue, tenant_flavor
from gpustack_operator.domain.chain.transition import less_held
from gpustack_operator.domain.labels import COHORT_ANNOTATION, QUEUE_ANNOTATION
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.nodedevices import DevicesOf
from gpustack_operator.domain.node.taints import TolerationPolicy
from gpustack_operator.domain.nodeview import annotations_of, name_of


@dataclass(frozen=True)
class TenantPools:
    """How a vCluster tenant's pools differ (docs/tenants.md): flavors select host-owned
    labels, device quotas follow the declared caps."""

    quota_caps: Mapping[str, int] = field(default_factory=dict)
    virtual_scheduler: bool = False


@dataclass(frozen=True)
class PoolSettings:
    """What shapes every pool the same way: the policy's part, the Kueue version rendered,
    the teams in force and, in a tenant, its settings."""

    manufacturers: Mapping[str, Manufacturer]
    version: KueueVersion = KueueVersion.V1BETA2
    quota_resources: QuotaResources = DEFAULT_QUOTA_RESOURCES
    host_counting: HostCounting = DEFAULT_HOST_COUNTING
    tolerations: TolerationPolicy = None
    topology_on: bool = False
    """TAS is on: a plain flavor selects ``topology=none`` (docs/topology.md)."""
    teams: Teams | None = None
    tenant: TenantPools | None = None


@dataclass(frozen=True)
class PoolMembers:
    """A pool's managed nodes per flavor name (in node-name order) and where their models'
    facts come from: the availability verdict of each (None: every node counts), its
    device amounts and its profiles (None: derived from the node)."""

    by_flavor: Mapping[str, Sequence[object]]
    availability: AvailabilityOf | None = None
    devices_of: DevicesOf | None = None
    profiles_of: ProfilesOf | None = None


@dataclass(frozen=True)
class NodePool:
    """One pool's queues: ``queue`` as the nodes make it, before teams divide it (what
    teams' shares and ``PoolFacts`` are read from), and its ``split`` among the teams
    (None: no team has a share), whose remainder is the pool's part of its Cohort's own
    quota."""

    name: str
    queue: dict[str, Any] | None
    split: PoolSplit | None = None
    teams: Teams | None = None

    @property
    def cluster_queues(self) -> list[dict[str, Any]]:
        """The ClusterQueues the pool writes: its team queues, else its own queue."""
        if self.split is not None:
            return list(self.split.team_queues)
        return [self.queue] if self.queue is not None else []

    def without_flavors(self) -> NodePool:
        """The pool's queues listing no flavor (docs/worker.md, "Chain objects deleted by
        hand"), divided among the same teams."""
        queue = without_flavors(self.queue) if self.queue is not None else None
        return _divided(self.name, queue, self.teams)

    def less(self, held: Held) -> NodePool:
        """The pool given only what *held* says retiring queues hold (docs/teams.md, "Moving
        a pool to teams, and back"), divided among the same teams."""
        if self.queue is None or not held:
            return self
        return _divided(self.name, less_held(self.queue, held), self.teams)


def _divided(name: str, queue: dict[str, Any] | None, teams: Teams | None) -> NodePool:
    split = split_pool(queue, teams) if queue is not None and teams is not None else None
    return NodePool(name, queue, split, teams)


def node_pool(
    name: str,
    flavors: Iterable[object],
    members: PoolMembers,
    settings: PoolSettings,
    *,
    cohort_uid: str = "",
) -> NodePool:
    """Pool *name*'s queues from the ResourceFlavors targeting it and their *members*
    (docs/worker.md): each node counted as its verdict says, the whole pool held when every
    node is away for a planned reason (docs/node-lifecycle.md), CPU and memory counted as
    the policy says, a tenant's device quotas capped (docs/tenants.md), then divided among
    the teams with a share of it (docs/teams.md). *cohort_uid*: the owner reference to the
    Cohort (left out without it)."""
    queue = desired_cluster_queue(
        name,
        flavors,
        (),
        settings.manufacturers,
        cohort_uid=cohort_uid,
        version=settings.version,
        flavor_index=members.by_flavor,
        quota_resources=settings.quota_resources,
        availability=members.availability,
        host_counting=settings.host_counting,
        divided=divides(settings.teams),
        devices_of=members.devices_of,
        profiles_of=members.profiles_of,
    )
    if queue is not None and settings.tenant is not None:
        # docs/tenants.md, "Quota a tenant may count on"
        queue = tenant_cluster_queue(queue, settings.tenant.quota_caps)
    return _divided(name, queue, settings.teams)


def with_cohort_share(cohort: Mapping[str, Any], pools: Iterable[NodePool]) -> dict[str, Any]:
    """*cohort* holding, as its own quota (``spec.resourceGroups``), what the teams leave
    over of its divided *pools* (docs/teams.md, "What the operator builds"); none: no
    ``resourceGroups``."""
    groups = cohort_resource_groups(p.split for p in pools if p.split is not None)
    return with_cohort_quota(cohort, groups)


def pool_cohort(name: str, flavors: Iterable[object]) -> str:
    """The Cohort pool *name*'s queue belongs to: its flavors' (the first by name that
    targets it, as :func:`desired_cluster_queue` reads it, whether or not it is being
    deleted); ``""`` when none targets it."""
    matching = [f for f in flavors if annotations_of(f).get(QUEUE_ANNOTATION) == name]
    first = min(matching, key=name_of, default=None)
    return annotations_of(first).get(COHORT_ANNOTATION, "") if first is not None else ""


def node_flavor(
    name: str,
    nodes: Sequence[object],
    settings: PoolSettings,
    profiles_of: ProfilesOf | None = None,
) -> dict[str, Any] | None:
    """ResourceFlavor *name* of its managed *nodes* (docs/worker.md): the notes of the first
    by name, the tolerations of all (docs/worker.md, "Tolerations"), TAS's selector
    (docs/topology.md), and in a tenant the host-owned labels its members share
    (docs/tenants.md, "Flavors"). None when no node has it."""
    tenant = settings.tenant
    want = desired_resource_flavor(
        name,
        nodes,
        settings.manufacturers,
        settings.version,
        profiles_of=profiles_of,
        tolerations=settings.tolerations,
        topology_on=settings.topology_on and tenant is None,
    )
    if want is None or tenant is None:
        return want
    return tenant_flavor(want, nodes, tenant.virtual_scheduler)
