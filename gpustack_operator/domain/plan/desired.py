"""The whole chain the worker converges to, computed at once (used by ``plan`` and tests).

Order of the computation mirrors the cluster: the device manager's labels (given as extra
NodeFeatures, e.g. by ``domain.plan`` for simulated devices), then the worker's capacity
labels, each merged onto the Node as NFD would; then
ResourceFlavors, Cohorts, ClusterQueues and LocalQueues from the merged labels.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack_operator.domain.chain.declaredpools import (
    PoolRejection,
    claimed_nodes,
    pools_from_objects,
)
from gpustack_operator.domain.chain.explain import NodeExplanation
from gpustack_operator.domain.chain.flavors import flavor_nodes
from gpustack_operator.domain.chain.nodepool import (
    NodePool,
    PoolMembers,
    PoolSettings,
    TenantPools,
    node_flavor,
    node_pool,
    pool_cohort,
    with_cohort_share,
)
from gpustack_operator.domain.chain.poolchain import declared_pool_chain
from gpustack_operator.domain.chain.queues import (
    active_namespaces,
    desired_cohorts,
    desired_local_queues,
)
from gpustack_operator.domain.chain.teams import (
    PoolFacts,
    PoolSplit,
    check_teams,
    desired_local_queues_with_teams,
    is_team_queue,
)
from gpustack_operator.domain.chain.tenancy import (
    Tenancy,
    TenantFleet,
    tenant_fleet,
)
from gpustack_operator.domain.chain.topology import desired_topologies
from gpustack_operator.domain.labels import QUEUE_ANNOTATION
from gpustack_operator.domain.node.availability import NodeAvailability, node_availability
from gpustack_operator.domain.node.devicesources.dra import node_slices
from gpustack_operator.domain.node.nodedevices import NodeDevices
from gpustack_operator.domain.node.nodefeature import merge_node_features, worker_node_feature
from gpustack_operator.domain.node.nodemodel import ModelSettings, node_model
from gpustack_operator.domain.node.nodeprofiles import Profile, is_managed
from gpustack_operator.domain.nodeview import annotations_of, name_of
from gpustack_operator.domain.plan.policy import ChainPolicy


@dataclass
class DesiredState:
    """Every object of the chain, each group sorted by name."""

    node_features: list[dict[str, Any]] = field(default_factory=list)
    topologies: list[dict[str, Any]] = field(default_factory=list)
    """Kueue Topologies of the TAS flavors (docs/topology.md), created before them."""
    resource_flavors: list[dict[str, Any]] = field(default_factory=list)
    cohorts: list[dict[str, Any]] = field(default_factory=list)
    cluster_queues: list[dict[str, Any]] = field(default_factory=list)
    local_queues: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    """The input nodes with every NodeFeature merged (not part of :meth:`objects`)."""
    explanations: list[NodeExplanation] = field(default_factory=list)
    """Per node, what it feeds and why not more (``plan`` only; not part of :meth:`objects`)."""
    tenancy: Tenancy = Tenancy.ORDINARY
    """The kind of cluster the chain was built for (docs/tenants.md)."""
    fleet: TenantFleet | None = None
    """A tenant's Nodes as its pools see them (``None`` outside a tenant)."""
    availability: dict[str, NodeAvailability] = field(default_factory=dict)
    """Per managed node, whether it counts now and why not (docs/node-lifecycle.md)."""
    admission_checks: list[dict[str, Any]] = field(default_factory=list)
    """ProvisioningRequest checks of autoscaled pools (docs/autoscaling.md)."""
    provisioning_configs: list[dict[str, Any]] = field(default_factory=list)
    pool_rejections: list[PoolRejection] = field(default_factory=list)
    pool_warnings: list[PoolRejection] = field(default_factory=list)
    """Pools with a queue that lack something they asked for (docs/autoscaling.md)."""
    """Declared pools that get no queue, each with the fix (not part of :meth:`objects`)."""
    team_splits: dict[str, list[PoolSplit]] = field(default_factory=dict)
    """Per Cohort, its pools divided among teams (docs/teams.md; not part of :meth:`objects`)."""

    def objects(self) -> list[dict[str, Any]]:
        """NodeFeatures, Topologies, ResourceFlavors, Cohorts, ClusterQueues, LocalQueues, in
        that order (each before what refers to it)."""
        return [
            *self.node_features,
            *self.topologies,
            *self.resource_flavors,
            *self.cohorts,
            *self.provisioning_configs,
            *self.admission_checks,
            *self.cluster_queues,
            *self.local_queues,
        ]

    def as_list(self) -> dict[str, Any]:
        """One ``v1`` ``List`` holding :meth:`objects`."""
        return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": self.objects()}


def _sorted_nodes(nodes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Nodes by name; duplicates ordered by content so input order never matters."""
    return sorted(nodes, key=lambda n: (name_of(n), json.dumps(n, sort_keys=True, default=str)))


def _unique_by_name(objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in objects:
        meta = obj.get("metadata", {})
        seen.setdefault((str(meta.get("namespace", "")), str(meta.get("name", ""))), obj)
    return [seen[k] for k in sorted(seen)]


def desired_state(
    nodes: Iterable[Mapping[str, Any]],
    namespaces: Iterable[str | Mapping[str, Any]],
    policy: ChainPolicy,
    *,
    cohort_uids: Mapping[str, str] | None = None,
    extra_node_features: Iterable[dict[str, Any]] = (),
    resource_slices: Sequence[Mapping[str, Any]] = (),
    pool_objects: Sequence[Mapping[str, Any]] = (),
    now: float | None = None,
) -> DesiredState:
    """The chain for *nodes* as the cluster holds them (device labels already present),
    shaped by *policy* alone (docs/configuration.md, "Chain policy"); a policy without a
    pinned Kueue version renders the newest.

    The worker's NodeFeatures are computed and merged onto the nodes first. *cohort_uids*
    (Cohort name -> uid) adds ClusterQueue owner references; ClusterQueue uids are not known
    before creation, so LocalQueues here carry none (the controllers add them).

    In a vCluster tenant (the policy's tenant settings, an unset tenancy told from *nodes*;
    docs/tenants.md) no NodeFeature is written: the capacity labels are merged in memory
    from host-owned labels, DRA slices are not read, flavors select host-owned labels and
    device quotas follow the declared caps.

    *pool_objects* (Karpenter NodePools, Cluster API node groups) and the policy's declared
    pools add one flavor and queue per sound pool (docs/autoscaling.md); the nodes such a
    pool selects feed its flavor, not flavors of their own.

    Each node's availability at *now* (epoch seconds; None takes every timer as run out)
    decides what it adds to its queues (docs/node-lifecycle.md); with no memory of the
    nodes, a signal the Node does not date is taken as having run out its timer.
    """
    manufacturers = policy.manufacturers
    kueue_version = policy.offline_kueue_version
    ordered = _sorted_nodes(nodes)
    tenant = policy.tenant_settings(ordered)
    features: list[dict[str, Any]] = []
    merged: list[dict[str, Any]] = []
    fleet: TenantFleet | None = None
    if tenant.is_tenant:
        fleet = tenant_fleet(ordered, manufacturers, virtual_scheduler=tenant.virtual_scheduler)
        merged = list(fleet.nodes)
    else:
        for node in ordered:
            slices = node_slices(name_of(node), resource_slices) if resource_slices else ()
            feature = worker_node_feature(
                node,
                policy.system_namespace,
                manufacturers,
                slices,
                topology=policy.topology,
                tolerations=policy.flavor_tolerations,
            )
            own = [feature] if feature is not None else []
            features.extend(own)
            merged.append(merge_node_features(node, own, owned="worker"))
    # One model per merged Node (domain/node/nodemodel.py): every stage below reads its
    # profiles, device amounts and lifecycle from it.
    settings = ModelSettings(
        manufacturers, policy.topology, policy.flavor_tolerations, capacity=False
    )
    models = {id(n): node_model(n, settings) for n in merged}

    def profiles_of(node: object) -> tuple[Profile, ...]:
        return models[id(node)].profiles

    def devices_of(node: object) -> NodeDevices:
        return models[id(node)].devices

    pools = pools_from_objects(
        pool_objects, policy.declared_pools, policy.manufacturers_by_resource
    )
    chain = declared_pool_chain(pools, merged, kueue_version, policy.provisioning)
    claimed = claimed_nodes(merged, pools) if pools else set()
    all_nodes = merged
    merged = [n for n in merged if name_of(n) not in claimed]
    # One function per pool (domain/chain/nodepool.py), the worker's reconcilers' too.
    pool_settings = PoolSettings(
        manufacturers,
        kueue_version,
        quota_resources=policy.quota_resources,
        host_counting=policy.host_counting,
        tolerations=policy.flavor_tolerations,
        topology_on=policy.topology.enabled,
        teams=policy.teams,
        tenant=(
            TenantPools(tenant.quota_caps, tenant.virtual_scheduler) if tenant.is_tenant else None
        ),
    )
    index = flavor_nodes(merged, manufacturers, profiles_of)
    flavors = {
        name: flavor
        for name in sorted(index)
        if (flavor := node_flavor(name, index[name], pool_settings, profiles_of)) is not None
    }
    cohorts = desired_cohorts(merged, manufacturers, kueue_version, profiles_of)
    verdicts: dict[str, NodeAvailability] = {}

    def availability(node: object) -> NodeAvailability:
        name = name_of(node)
        if name not in verdicts:
            verdicts[name] = node_availability(models[id(node)].lifecycle, policy.lifecycle, now)
        return verdicts[name]

    members = PoolMembers(index, availability, devices_of, profiles_of)
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for flavor in flavors.values():
        by_queue.setdefault(annotations_of(flavor).get(QUEUE_ANNOTATION, ""), []).append(flavor)
    by_queue.pop("", None)
    node_pools: dict[str, NodePool] = {}
    for name in sorted(by_queue):
        uid = (cohort_uids or {}).get(pool_cohort(name, by_queue[name]), "")
        pool = node_pool(name, by_queue[name], members, pool_settings, cohort_uid=uid)
        if pool.queue is not None:
            node_pools[name] = pool
    flavors.update(chain.resource_flavors)
    cohorts.update(chain.cohorts)
    namespace_list = list(namespaces)
    if policy.teams is not None:  # the worker's checks against the cluster (docs/teams.md)
        facts = [PoolFacts.of(p.queue) for p in node_pools.values() if p.queue is not None]
        check_teams(policy.teams, facts, namespace_list)
    queues = {name_of(q): q for p in node_pools.values() for q in p.cluster_queues}
    # A declared pool's queue stays whole: teams divide the pools of nodes (docs/teams.md,
    # "Which pools teams divide").
    queues.update(chain.cluster_queues)
    splits: dict[str, list[PoolSplit]] = {}
    by_cohort: dict[str, list[NodePool]] = {}
    for pool in node_pools.values():
        if pool.split is not None:
            splits.setdefault(pool.split.cohort, []).append(pool.split)
            by_cohort.setdefault(pool.split.cohort, []).append(pool)
    for cohort_name, divided in by_cohort.items():
        if cohort_name in cohorts:
            cohorts[cohort_name] = with_cohort_share(cohorts[cohort_name], divided)
    locals_ = desired_local_queues(
        [q for q in queues.values() if not is_team_queue(q)],
        namespace_list,
        system_namespace=policy.system_namespace,
        excluded=policy.excluded_namespaces,
        version=kueue_version,
    )
    if splits:
        active = active_namespaces(
            namespace_list,
            system_namespace=policy.system_namespace,
            excluded=policy.excluded_namespaces,
        )
        locals_ = desired_local_queues_with_teams(
            queues.values(),
            namespace_list,
            policy.teams,
            plain=locals_,
            version=kueue_version,
            active=active,
        )
    topologies = (
        {}
        if tenant.is_tenant
        else desired_topologies(merged, policy.topology, kueue_version, is_member=is_managed)
    )
    return DesiredState(
        node_features=_unique_by_name([*extra_node_features, *features]),
        topologies=list(topologies.values()),
        resource_flavors=[flavors[k] for k in sorted(flavors)],
        cohorts=[cohorts[k] for k in sorted(cohorts)],
        cluster_queues=[queues[k] for k in sorted(queues)],
        local_queues=list(locals_.values()),
        nodes=all_nodes,
        tenancy=tenant.tenancy,
        fleet=fleet,
        availability=dict(sorted(verdicts.items())),
        admission_checks=[chain.admission_checks[n] for n in sorted(chain.admission_checks)],
        provisioning_configs=[
            chain.provisioning_configs[n] for n in sorted(chain.provisioning_configs)
        ],
        pool_rejections=chain.rejections,
        pool_warnings=chain.warnings,
        team_splits=splits,
    )
