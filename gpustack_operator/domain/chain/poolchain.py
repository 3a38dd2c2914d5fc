"""The Kueue chain of declared pools (docs/autoscaling.md): what a pool at zero nodes gets.

One ResourceFlavor selecting the pool's own label, one Cohort and one ClusterQueue whose
quota is the declared maximum: the same objects at zero nodes and at many, so nodes that
appear fall in the flavor and a live count above the maximum still counts. Where
ProvisioningRequests are served, a pool with a class gets an AdmissionCheck and its
ProvisioningRequestConfig, scoped to its flavor. The pools themselves are
``domain/chain/declaredpools.py``'s. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpustack_operator.domain.chain.declaredpools import (
    CLASS_GKE_QUEUED,
    POOL_LABEL,
    UNBOUNDED_CPU,
    UNBOUNDED_MEMORY_GI,
    DeclaredPool,
    PoolRejection,
    PoolResult,
)
from gpustack_operator.domain.chain.kueue import (
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    KueueVersion,
    Meta,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
)
from gpustack_operator.domain.labels import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    QUEUE_ANNOTATION,
    RESOURCE_TYPE_INSTANCETYPES,
    RESOURCE_TYPE_LABEL,
    note,
)
from gpustack_operator.domain.node.nodeprofiles import is_managed
from gpustack_operator.domain.node.taints import Toleration
from gpustack_operator.domain.nodeview import status_field
from gpustack_operator.domain.quantities import (
    format_binary_quantity,
    format_decimal_quantity,
    parse_quantity,
)
from gpustack_operator.domain.validation import is_valid_dns_label

POOL_COVERED: Final = ("cpu", "memory")
"""Host resources a pool's queue covers beside its device resource."""
PROVISIONING_CONTROLLER: Final = "kueue.x-k8s.io/provisioning-request"
UNBOUNDED_NOTE: Final = note("unbounded")
"""On a pool's ClusterQueue: the host resources (``cpu,memory``) nothing the pool says
bounds; their quota is a placeholder (``UNBOUNDED_CPU``), shown as "unbounded"."""
"""Kueue's controller name of ProvisioningRequest admission checks."""


def _live_devices(pool: DeclaredPool, nodes: Iterable[object]) -> tuple[int, int]:
    """(nodes, devices) the pool's managed nodes hold now."""
    count = devices = 0
    for node in nodes:
        if not is_managed(node):
            continue
        count += 1
        allocatable = parse_quantity(status_field(node, "allocatable").get(pool.resource))
        devices += int(allocatable) if allocatable is not None and allocatable > 0 else 0
    return count, devices


@dataclass
class PoolChain:
    """The Kueue objects of the declared pools, by name."""

    resource_flavors: dict[str, dict[str, Any]] = field(default_factory=dict)
    cohorts: dict[str, dict[str, Any]] = field(default_factory=dict)
    cluster_queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    admission_checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    provisioning_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    rejections: list[PoolRejection] = field(default_factory=list)
    warnings: list[PoolRejection] = field(default_factory=list)
    """Sound pools that get less than they ask for (a queue, but no provisioning check)."""


def _meta(pool: DeclaredPool, **extra: Any) -> Meta:
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, POOL_LABEL: pool.key, **extra.pop("labels", {})}
    return Meta(name=pool.object_name, labels=labels, **extra)


def pool_flavor(pool: DeclaredPool, version: KueueVersion) -> dict[str, Any]:
    """The pool's one flavor: it selects the pool's own label, whatever the number of nodes."""
    annotations = {
        QUEUE_ANNOTATION: pool.object_name,
        note("acceleratable"): "true",
        note("manufacturer"): pool.manufacturer,
        note("accelerator"): str(pool.devices_per_node),
        note("declaredMaximum"): str(pool.max_devices),
    }
    if pool.product:
        annotations[note("product")] = pool.product
    return ResourceFlavor(
        metadata=_meta(pool, annotations=annotations),
        node_labels=dict(pool.node_selector),
        tolerations=tuple(Toleration(key=k, value=v, effect=e) for k, v, e in pool.taints),
    ).manifest(version)


def pool_cluster_queue(
    pool: DeclaredPool,
    nodes: Iterable[object],
    version: KueueVersion,
    admission_check: str = "",
) -> dict[str, Any]:
    """The pool's ClusterQueue: its quota is the declared maximum, or what its live nodes
    hold when that is more (docs/autoscaling.md, "Quota")."""
    live_nodes, live_devices = _live_devices(pool, nodes)
    devices = max(pool.max_devices, live_devices)
    cpu = pool.host_quota("cpu", live_nodes)
    memory = pool.host_quota("memory", live_nodes)
    unbounded = [r for r, q in (("cpu", cpu), ("memory", memory)) if q is None]
    quotas = (
        ResourceQuota(
            name="cpu", nominal_quota=format_decimal_quantity(UNBOUNDED_CPU if cpu is None else cpu)
        ),
        ResourceQuota(
            name="memory",
            nominal_quota=format_binary_quantity(
                UNBOUNDED_MEMORY_GI * 2**30 if memory is None else memory
            ),
        ),
        ResourceQuota(name=pool.resource, nominal_quota=format_decimal_quantity(devices)),
    )
    group = ResourceGroup(
        covered_resources=(*POOL_COVERED, pool.resource),
        flavors=(FlavorQuotas(name=pool.object_name, resources=quotas),),
    )
    annotations = {
        note("acceleratable"): "true",
        note("declaredMaximum"): str(pool.max_devices),
        note("manufacturer"): pool.manufacturer,
    }
    if pool.product:
        annotations[note("product")] = pool.product
    if unbounded:
        annotations[UNBOUNDED_NOTE] = ",".join(unbounded)
    annotations.update(_unit_notes(pool))
    manifest = ClusterQueue(
        metadata=_meta(
            pool,
            labels={RESOURCE_TYPE_LABEL: RESOURCE_TYPE_INSTANCETYPES},
            annotations=annotations,
        ),
        cohort=pool.object_name,
        resource_groups=(group,),
    ).manifest(version)
    if admission_check:
        manifest["spec"]["admissionChecksStrategy"] = {
            "admissionChecks": [{"name": admission_check, "onFlavors": [pool.object_name]}]
        }
    return manifest


def unbounded_resources(queue: Mapping[str, Any]) -> tuple[str, ...]:
    """The host resources a pool's ClusterQueue holds only a placeholder for
    (:data:`UNBOUNDED_NOTE`)."""
    notes = (queue.get("metadata") or {}).get("annotations") or {}
    return tuple(r for r in str(notes.get(UNBOUNDED_NOTE) or "").split(",") if r)


def _unit_notes(pool: DeclaredPool) -> dict[str, str]:
    """CPU and memory that come with one device (docs/workloads.md, "What to request"):
    the node's share per device, rounded down; none where the node's size is not declared."""
    if not pool.devices_per_node:
        return {}
    out = {}
    if pool.cpu_per_node is not None:
        out[note("unitCPU")] = str(int(pool.cpu_per_node / pool.devices_per_node))
    if pool.memory_per_node is not None:
        gi = int(pool.memory_per_node / pool.devices_per_node / 2**30)
        out[note("unitRAM")] = f"{gi}Gi"
    return out


GKE_QUEUED_POD_SET_UPDATE: Final = {
    "key": "autoscaling.gke.io/provisioning-request",
    "valueFromProvisioningClassDetail": "ResizeRequestName",
}
"""GKE queued provisioning labels the nodes it adds for a ProvisioningRequest with the
request's resize request name, which it reports in the request's ``provisioningClassDetails``;
this ``podSetUpdates.nodeSelector`` entry makes Kueue pin a Job's Pods to the nodes made for
its own request (docs/autoscaling.md, "Provisioning requests")."""


@dataclass(frozen=True)
class ProvisioningSettings:
    """Whether and how autoscaled flavors get a ProvisioningRequest admission check."""

    served: bool | None = None
    """Kueue serves ProvisioningRequestConfig and the cluster ProvisioningRequest v1;
    ``None``: the worker asks the cluster at start (``plan`` without a cluster: no)."""
    backoff_limit: int = 3
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 1800
    inactive_grace_seconds: float = 60.0
    """How long a pool's AdmissionCheck may stay without ``Active=True`` before the worker
    takes it out of the pool's queue (docs/autoscaling.md, "A check that never becomes
    Active")."""


def provisioning_objects(
    pool: DeclaredPool, version: KueueVersion, settings: ProvisioningSettings
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The AdmissionCheck and ProvisioningRequestConfig of a pool with a class."""
    name = pool.object_name
    spec: dict[str, Any] = {
        "provisioningClassName": pool.provisioning_class,
        "managedResources": [pool.resource],
        "retryStrategy": {
            "backoffLimitCount": settings.backoff_limit,
            "backoffBaseSeconds": settings.backoff_base_seconds,
            "backoffMaxSeconds": settings.backoff_max_seconds,
        },
    }
    if pool.provisioning_class == CLASS_GKE_QUEUED:
        spec["podSetUpdates"] = {"nodeSelector": [dict(GKE_QUEUED_POD_SET_UPDATE)]}
    config = {
        "apiVersion": version.api_version,
        "kind": "ProvisioningRequestConfig",
        "metadata": _meta(pool).manifest(),
        "spec": spec,
    }
    check = {
        "apiVersion": version.api_version,
        "kind": "AdmissionCheck",
        "metadata": _meta(pool).manifest(),
        "spec": {
            "controllerName": PROVISIONING_CONTROLLER,
            "parameters": {
                "apiGroup": "kueue.x-k8s.io",
                "kind": "ProvisioningRequestConfig",
                "name": name,
            },
        },
    }
    return check, config


def without_admission_checks(queue: Mapping[str, Any]) -> dict[str, Any]:
    """A pool's ClusterQueue with no admission check (an inactive check would hold every
    workload of the queue). Kueue's CRD allows no empty strategy: the field is left out, and
    the caller's apply (which owns it) removes it (:func:`has_stale_checks`)."""
    spec = {k: v for k, v in (queue.get("spec") or {}).items() if k != "admissionChecksStrategy"}
    return {**queue, "spec": spec}


def has_stale_checks(have: Mapping[str, Any] | None, want: Mapping[str, Any]) -> bool:
    """*have* (a pool's ClusterQueue) holds a check strategy *want* leaves out: field-wise
    comparison sees only what *want* says, so this difference is asked for separately."""
    held = (have or {}).get("spec") or {}
    return "admissionChecksStrategy" in held and "admissionChecksStrategy" not in want["spec"]


@dataclass(frozen=True)
class DeclaredPoolObjects:
    """The Kueue objects of one sound pool (:func:`declared_pool_objects`)."""

    flavor: dict[str, Any]
    cohort: dict[str, Any]
    cluster_queue: dict[str, Any]
    admission_check: dict[str, Any] | None = None
    provisioning_config: dict[str, Any] | None = None
    warning: PoolRejection | None = None
    """Set when the pool gets less than it asks for (a queue, but no provisioning check)."""


def declared_pool_objects(
    pool: DeclaredPool,
    nodes: Iterable[object],
    version: KueueVersion,
    provisioning: ProvisioningSettings = ProvisioningSettings(),
) -> DeclaredPoolObjects:
    """The one function per pool that ``plan`` and the worker's reconcilers share: the
    pool's flavor, Cohort and ClusterQueue (its quota counts those of *nodes* the pool
    selects) and, where ProvisioningRequests are served and the pool has a class, its
    AdmissionCheck and ProvisioningRequestConfig."""
    members = [n for n in nodes if pool.matches(n)]
    name = pool.object_name
    check: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    warning: PoolRejection | None = None
    if provisioning.served and pool.provisioning_class and not is_valid_dns_label(name):
        warning = PoolRejection(
            pool.source,
            pool.name,
            f"{name} is no DNS label (a dot, or over 63 characters), which Kueue's "
            "ProvisioningRequests need: the pool gets its queue but no provisioning "
            "check, so Kueue admits its workloads before nodes exist; rename it "
            "(at most 53 characters, no dot) or turn on waitForPodsReady",
        )
    elif provisioning.served and pool.provisioning_class:
        check, config = provisioning_objects(pool, version, provisioning)
    return DeclaredPoolObjects(
        flavor=pool_flavor(pool, version),
        cohort=Cohort(metadata=_meta(pool)).manifest(version),
        cluster_queue=pool_cluster_queue(pool, members, version, name if check else ""),
        admission_check=check,
        provisioning_config=config,
        warning=warning,
    )


def declared_pool_chain(
    pools: Iterable[PoolResult],
    nodes: Iterable[object],
    version: KueueVersion,
    provisioning: ProvisioningSettings = ProvisioningSettings(),
) -> PoolChain:
    """The Kueue objects of every sound pool (:func:`declared_pool_objects`) and the
    rejections of the others."""
    chain = PoolChain()
    node_list = list(nodes)
    for result in pools:
        if isinstance(result, PoolRejection):
            chain.rejections.append(result)
            continue
        objects = declared_pool_objects(result, node_list, version, provisioning)
        name = result.object_name
        if objects.warning is not None:
            chain.warnings.append(objects.warning)
        if objects.admission_check is not None and objects.provisioning_config is not None:
            chain.admission_checks[name] = objects.admission_check
            chain.provisioning_configs[name] = objects.provisioning_config
        chain.resource_flavors[name] = objects.flavor
        chain.cohorts[name] = objects.cohort
        chain.cluster_queues[name] = objects.cluster_queue
    return chain
