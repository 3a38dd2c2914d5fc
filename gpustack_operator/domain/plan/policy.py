"""The chain policy: every option that shapes the Kueue chain, as one frozen value.

``plan``, ``sim``, ``queues`` and the worker build it from the same flags
(docs/configuration.md, "Chain policy"); :func:`desired_state` and every reconciler take it
whole, so an option added here reaches each of them without being threaded by hand, and
``plan`` cannot drift from the worker by missing one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from gpustack_operator.domain.chain.declaredpools import PoolResult
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.poolchain import ProvisioningSettings
from gpustack_operator.domain.chain.queues import (
    DEFAULT_EXCLUDED_NAMESPACES,
    DEFAULT_HOST_COUNTING,
    DEFAULT_QUOTA_RESOURCES,
    HostCounting,
    QuotaResources,
)
from gpustack_operator.domain.chain.teams import Teams
from gpustack_operator.domain.chain.tenancy import Tenancy, TenantSettings, detect_tenancy
from gpustack_operator.domain.manufacturers import Manufacturer, default_manufacturers
from gpustack_operator.domain.node.availability import LifecycleTimers
from gpustack_operator.domain.node.nodefeature import DEFAULT_SYSTEM_NAMESPACE
from gpustack_operator.domain.node.nodetopology import TopologyPolicy
from gpustack_operator.domain.node.taints import TolerationPolicy

DEFAULT_UNPOOLED_SETTLING = 300.0
"""Five minutes: a first install pulls the agent's image and starts a Pod per node."""

NEWEST_FIRST: tuple[KueueVersion, ...] = (KueueVersion.V1BETA2, KueueVersion.V1BETA1)
"""The Kueue versions the chain can be written in, preferred first."""


@dataclass(frozen=True)
class ChainPolicy:
    """What the chain is made of, beside the nodes and namespaces (docs/configuration.md,
    "Chain policy")."""

    manufacturers: Mapping[str, Manufacturer] = field(default_factory=default_manufacturers)
    """The manufacturers profiled, each with its facts (resource name, vendor, runtime)."""
    system_namespace: str = DEFAULT_SYSTEM_NAMESPACE
    """Where NodeFeatures go; it never gets LocalQueues."""
    excluded_namespaces: tuple[str, ...] = DEFAULT_EXCLUDED_NAMESPACES
    """Namespaces without LocalQueues besides the system namespace."""
    kueue_version: KueueVersion | None = None
    """The Kueue API version to write; ``None``: the newest the cluster serves."""
    quota_resources: QuotaResources = DEFAULT_QUOTA_RESOURCES
    """What device ClusterQueues are measured in (docs/devices.md, "Quota resources")."""
    host_counting: HostCounting = DEFAULT_HOST_COUNTING
    """Whether a node's CPU and memory count in every pool it feeds (the reference's
    arithmetic) or once, divided among them (docs/worker.md, "CPU and memory: counted in
    every pool, or once")."""
    flavor_tolerations: TolerationPolicy = None
    """Which dedication taints flavors tolerate: ``None`` every one common to the flavor's
    nodes, else only these keys (docs/worker.md, "Tolerations")."""
    tenancy: Tenancy | None = None
    """The kind of cluster; ``None``: told from the Nodes (docs/tenants.md, "Three kinds of
    cluster")."""
    virtual_scheduler: bool = False
    """A shared-node tenant runs vCluster's virtual scheduler (docs/tenants.md, "The virtual
    scheduler")."""
    tenant_quota_caps: Mapping[str, int] = field(default_factory=dict)
    """A shared-node tenant's declared share per device resource (docs/tenants.md, "Quota a
    tenant may count on")."""
    unpooled_settling: float = DEFAULT_UNPOOLED_SETTLING
    """Seconds a node's device sources get, from when the worker first sees the node, before
    its devices are judged to feed no pool, unless our agent has published for it already
    (docs/devices.md, "Why a device gets no pool")."""
    topology: TopologyPolicy = field(default_factory=TopologyPolicy)
    """Kueue Topology-Aware Scheduling: on/off and a person's level list (docs/topology.md,
    "The switch")."""
    lifecycle: LifecycleTimers = field(default_factory=LifecycleTimers)
    """The timers of the availability rule: how long a cordoned, NotReady or maintained
    node keeps counting, and how long a returning one waits (docs/node-lifecycle.md)."""
    declared_pools: tuple[PoolResult, ...] = ()
    """Pools a person declared (docs/autoscaling.md, "Pools declared by a person"); those of
    NodePools and Cluster API node groups come from the cluster."""
    provisioning: ProvisioningSettings = field(default_factory=ProvisioningSettings)
    """Whether autoscaled flavors get a ProvisioningRequest admission check, and its retry
    (docs/autoscaling.md, "Provisioning requests")."""
    teams: Teams | None = None
    """Each team's share of the pools (docs/teams.md); ``None``: no teams, every pool one
    ClusterQueue with a LocalQueue in every namespace."""

    def __post_init__(self) -> None:
        if not self.manufacturers:
            raise ValueError("a chain policy needs at least one manufacturer")
        # The system namespace is excluded anyway; listing it twice would only confuse.
        excluded = tuple(dict.fromkeys(self.excluded_namespaces))
        object.__setattr__(
            self, "excluded_namespaces", tuple(n for n in excluded if n != self.system_namespace)
        )
        if not self.unpooled_settling >= 0:
            raise ValueError(
                f"unpooled settling {self.unpooled_settling!r}: give a duration of at least 0"
            )
        bad = [f"{r}={n}" for r, n in self.tenant_quota_caps.items() if not r or n < 0]
        if bad:
            raise ValueError(
                f"tenant quota cap {', '.join(bad)}: give a resource name and a whole number "
                "of at least 0, e.g. nvidia.com/gpu=4"
            )
        # A copy the caller cannot change behind the policy's back, in a stable order.
        object.__setattr__(self, "tenant_quota_caps", dict(sorted(self.tenant_quota_caps.items())))

    @property
    def namespaces_without_queues(self) -> tuple[str, ...]:
        """The system namespace and the excluded ones."""
        return (self.system_namespace, *self.excluded_namespaces)

    @property
    def offline_kueue_version(self) -> KueueVersion:
        """The version ``plan`` renders without a cluster to ask: the pinned one, else the
        newest."""
        return self.kueue_version or NEWEST_FIRST[0]

    def kueue_version_among(self, served: Iterable[str]) -> KueueVersion | None:
        """The version to write when the cluster serves *served*: the pinned one if served,
        else the newest served; ``None`` when none fits."""
        offered = set(served)
        wanted = (self.kueue_version,) if self.kueue_version is not None else NEWEST_FIRST
        return next((v for v in wanted if v.value in offered), None)

    def with_tenancy_of(self, nodes: Iterable[object]) -> ChainPolicy:
        """This policy with the kind of cluster told from *nodes* when it is not set (no
        vCluster Node, or none at all: an ordinary cluster); a set one is kept."""
        if self.tenancy is not None:
            return self
        return replace(self, tenancy=detect_tenancy(nodes))

    def tenant_settings(self, nodes: Iterable[object] = ()) -> TenantSettings:
        """What the tenant rules read (docs/tenants.md): the kind of cluster (told from
        *nodes* when not set), the virtual scheduler and the quota caps."""
        return TenantSettings(
            tenancy=self.with_tenancy_of(nodes).tenancy or Tenancy.ORDINARY,
            virtual_scheduler=self.virtual_scheduler,
            quota_caps=dict(self.tenant_quota_caps),
        )

    @property
    def manufacturers_by_resource(self) -> dict[str, str]:
        """Device resource -> manufacturer, for the pools' declarations."""
        return {m.resource_name: name for name, m in sorted(self.manufacturers.items())}

    def with_manufacturers(self, names: Iterable[str]) -> ChainPolicy:
        """This policy profiling only *names*; ``ValueError`` naming any unknown one."""
        chosen = sorted(set(names))
        unknown = [n for n in chosen if n not in self.manufacturers]
        if unknown:
            raise ValueError(
                f"unknown manufacturer(s) {', '.join(unknown)}: use "
                f"{', '.join(sorted(self.manufacturers))}"
            )
        return replace(self, manufacturers={n: self.manufacturers[n] for n in chosen})
