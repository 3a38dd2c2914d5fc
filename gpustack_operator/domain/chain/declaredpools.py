"""Declared pools: accelerator pools known before any of their nodes exists (docs/autoscaling.md).

Nodes are one source of pools; autoscaled pools kept at zero nodes are another. Three
places declare such a pool: a Karpenter ``NodePool`` (``karpenter.sh/v1``), a Cluster API
``MachineDeployment`` or ``MachinePool`` carrying the cluster autoscaler's scale-from-zero
hints, and, where the platform has no object to read (GKE node pools), a person's
declaration (:func:`parse_declarations`). Each becomes a :class:`DeclaredPool` (its shape,
its maximum, the label that selects its nodes) or a :class:`PoolRejection` naming the fix.

The Kueue objects of the pools are ``domain/chain/poolchain.py``'s. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from fractions import Fraction
from typing import Any, Final

from gpustack_operator.domain.chain.ec2gpus import GPU_MANUFACTURERS as EC2_GPU_MANUFACTURERS
from gpustack_operator.domain.chain.ec2gpus import INSTANCE_TYPES as EC2_INSTANCE_TYPES
from gpustack_operator.domain.declarationtext import (
    DeclarationError,
    brief,
    configmap_text,
    load_declaration,
)
from gpustack_operator.domain.labels import (
    INSTANCE_TYPE_LABEL,
    SYSTEM_PREFIX,
)
from gpustack_operator.domain.node.devicesources.karpenter import (
    COUNT_LABEL as KARPENTER_GPU_COUNT,
)
from gpustack_operator.domain.node.devicesources.karpenter import (
    MANUFACTURER_LABEL as KARPENTER_GPU_MANUFACTURER,
)
from gpustack_operator.domain.node.devicesources.karpenter import (
    MANUFACTURERS as KARPENTER_MANUFACTURERS,
)
from gpustack_operator.domain.node.devicesources.karpenter import (
    NAME_LABEL as KARPENTER_GPU_NAME,
)
from gpustack_operator.domain.node.taints import DEDICATION_EFFECTS
from gpustack_operator.domain.nodeview import annotations_of, labels_of, name_of
from gpustack_operator.domain.quantities import (
    parse_count,
    parse_quantity,
)
from gpustack_operator.domain.selectors import labels_match
from gpustack_operator.domain.validation import (
    is_valid_dns_label,
    is_valid_label_key,
    is_valid_label_value,
)

POOL_LABEL: Final = SYSTEM_PREFIX + "declared-pool"
"""On every object of a declared pool's chain: ``<source>.<pool name>``; the queue
controllers leave objects carrying it to the declared-pool reconciler."""
KARPENTER_NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"
"""Karpenter labels every node it launches with its NodePool's name."""
CAPI_MAX_SIZE: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
CAPI_MIN_SIZE: Final = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
CAPACITY_PREFIX: Final = "capacity.cluster-autoscaler.kubernetes.io/"
"""The cluster autoscaler's scale-from-zero hints on a Cluster API node group
(kubernetes/autoscaler ``cluster-autoscaler/cloudprovider/clusterapi/README.md``)."""
DECLARED_POOLS_CONFIGMAP: Final = "gpustack-declared-pools"
DECLARED_POOLS_KEY: Final = "pools.yaml"
"""Where a person declares pools for the worker: this key of this ConfigMap in the system
namespace, the same document ``--declared-pools FILE`` reads (docs/autoscaling.md)."""
MAX_OBJECT_NAME: Final = 253
CAPI_INFRASTRUCTURE_GROUP: Final = "infrastructure.cluster.x-k8s.io"
"""The group of Cluster API's infrastructure objects (``<Provider>MachineTemplate``,
``<Provider>MachinePool``), whose ``status.capacity`` may size a node group."""
UNBOUNDED_CPU: Final = 10**9
UNBOUNDED_MEMORY_GI: Final = 10**9
"""The number a ClusterQueue carries for a host resource the pool does not bound (no
per-node size, no limit): Kueue needs a quantity, and one far above any cluster leaves the
device quota to bound the pool. The queue's ``unbounded`` note names such resources, and
``plan`` and ``queues`` print "unbounded" instead (docs/autoscaling.md, "Quota")."""

CLASS_CHECK_CAPACITY: Final = "check-capacity.autoscaling.x-k8s.io"
CLASS_ATOMIC_SCALE_UP: Final = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CLASS_GKE_QUEUED: Final = "queued-provisioning.gke.io"


class PoolSource(StrEnum):
    """Where a pool was declared."""

    KARPENTER = "karpenter"
    CLUSTER_API = "capi"
    DECLARED = "declared"


@dataclass(frozen=True)
class DeclaredPool:
    """One autoscaled accelerator pool, as its declaration describes it."""

    source: PoolSource
    name: str
    node_selector: Mapping[str, str]
    """The labels every node of the pool carries (the flavor's ``nodeLabels``)."""
    manufacturer: str
    resource: str
    """The device resource its nodes advertise (``nvidia.com/gpu``)."""
    product: str
    """The model, as docs/devices.md names it (``NVIDIA H100``); may be empty (CAPI)."""
    devices_per_node: int
    """Devices one node brings; 0 when only a device limit is declared."""
    max_devices: int
    """The declared maximum: the queue's device quota at any number of nodes."""
    cpu_per_node: Fraction | None = None
    memory_per_node: Fraction | None = None
    max_nodes: int | None = None
    cpu_limit: Fraction | None = None
    memory_limit: Fraction | None = None
    taints: tuple[tuple[str, str, str], ...] = ()
    provisioning_class: str = ""
    """The ProvisioningRequest class that fits the platform; ``""``: none (Karpenter)."""

    @property
    def key(self) -> str:
        """``<source>.<name>``: unique among pools, the value of :data:`POOL_LABEL`."""
        return f"{self.source.value}.{self.name}"

    @property
    def object_name(self) -> str:
        """The name of its flavor, Cohort, ClusterQueue and admission objects."""
        return f"pool-{self.source.value}-{self.name}"

    def matches(self, node: object) -> bool:
        return labels_match(self.node_selector, labels_of(node))

    def host_quota(self, resource: str, nodes: int) -> int | None:
        """cpu (cores, rounded up) or memory (bytes) for the pool at its maximum, or *nodes*
        when more are live; ``None`` when nothing the pool says bounds it (docs/autoscaling.md,
        "Quota")."""
        per_node = self.cpu_per_node if resource == "cpu" else self.memory_per_node
        limit = self.cpu_limit if resource == "cpu" else self.memory_limit
        count = max(self.max_nodes or 0, nodes)
        if per_node is not None and count:
            total: Fraction = per_node * count
            if limit is not None and nodes <= (self.max_nodes or 0):
                total = min(total, limit)
        elif limit is not None:
            total = limit
        else:
            return None
        return -(-total.numerator // total.denominator)


@dataclass(frozen=True)
class PoolRejection:
    """A declaration that cannot be one pool, and what to change."""

    source: PoolSource
    name: str
    reason: str
    node_selector: tuple[tuple[str, str], ...] = ()
    """The labels of the nodes it would have selected, where the declaration said them
    (``plan --explain`` tells those nodes why their pool has no queue)."""

    @property
    def key(self) -> str:
        return f"{self.source.value}.{self.name}"

    def matches(self, node: object) -> bool:
        return bool(self.node_selector) and labels_match(self.node_selector, labels_of(node))


PoolResult = DeclaredPool | PoolRejection

MAX_FLAVOR_NODE_LABELS: Final = 8
MAX_FLAVOR_TOLERATIONS: Final = 8
"""Kueue's ResourceFlavor holds at most 8 ``nodeLabels`` and 8 ``tolerations``
(kubernetes-sigs/kueue v0.19.2 ``apis/kueue/v1beta2/resourceflavor_types.go``,
``MaxProperties=8`` and ``MaxItems=8``): a pool past either gets no flavor."""


def _within_flavor_limits(pool: DeclaredPool, reject: Callable[[str], PoolRejection]) -> PoolResult:
    """*pool*, or its rejection when its flavor would pass Kueue's limits (docs/autoscaling.md,
    "Pools that get no queue"): the API server would refuse the flavor, and only this pool
    may go without a queue for it."""
    labels, taints = len(pool.node_selector), len(pool.taints)
    selector = tuple(sorted(pool.node_selector.items()))
    if labels > MAX_FLAVOR_NODE_LABELS:
        return replace(
            reject(
                f"its nodes are selected by {labels} labels, and a Kueue ResourceFlavor holds at "
                f"most {MAX_FLAVOR_NODE_LABELS} nodeLabels: select them by at most "
                f"{MAX_FLAVOR_NODE_LABELS} (one label only the pool's nodes carry is enough)"
            ),
            node_selector=selector,
        )
    if taints > MAX_FLAVOR_TOLERATIONS:
        return replace(
            reject(
                f"its nodes carry {taints} taints, and a Kueue ResourceFlavor holds at most "
                f"{MAX_FLAVOR_TOLERATIONS} tolerations: give the pool's nodes at most "
                f"{MAX_FLAVOR_TOLERATIONS} taints"
            ),
            node_selector=selector,
        )
    return pool


# --- Karpenter --------------------------------------------------------------------------------


def _mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``obj[key]`` when it is a mapping, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _requirement_values(spec: Mapping[str, Any], key: str) -> list[str] | None:
    """The values an ``In`` requirement on *key* allows (``None``: no such requirement)."""
    for req in spec.get("requirements") or ():
        if isinstance(req, Mapping) and req.get("key") == key:
            if req.get("operator") == "In":
                return [str(v) for v in req.get("values") or ()]
            return []  # NotIn, Exists, Gt...: not one value
    return None


def _taints(items: object) -> tuple[tuple[str, str, str], ...]:
    out = set()
    for taint in items if isinstance(items, list) else ():
        if not isinstance(taint, Mapping):
            continue
        key, effect = str(taint.get("key") or ""), str(taint.get("effect") or "")
        if key and effect in DEDICATION_EFFECTS:
            out.add((key, str(taint.get("value") or ""), effect))
    return tuple(sorted(out))


@dataclass(frozen=True)
class KarpenterLabels:
    """The requirement keys one Karpenter provider gives its GPU instance facts under."""

    gpu_name: str
    gpu_count: str
    gpu_manufacturer: str
    cpu: str
    """vCPUs of the instance."""
    memory_mib: str
    """Memory of the instance, in MiB."""


KARPENTER_AWS: Final = KarpenterLabels(
    KARPENTER_GPU_NAME,
    KARPENTER_GPU_COUNT,
    KARPENTER_GPU_MANUFACTURER,
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-memory",
)
"""aws/karpenter-provider-aws ``pkg/apis/v1/labels.go``."""
KARPENTER_AZURE: Final = KarpenterLabels(
    "karpenter.azure.com/sku-gpu-name",
    "karpenter.azure.com/sku-gpu-count",
    "karpenter.azure.com/sku-gpu-manufacturer",
    "karpenter.azure.com/sku-cpu",
    "karpenter.azure.com/sku-memory",
)
"""Azure/karpenter-provider-azure ``pkg/apis/v1beta1/labels.go``."""


def _provider(tspec: Mapping[str, Any]) -> KarpenterLabels:
    """The provider whose GPU keys the requirements use (AWS when none)."""
    keys = {str(r.get("key")) for r in tspec.get("requirements") or () if isinstance(r, Mapping)}
    azure = {KARPENTER_AZURE.gpu_name, KARPENTER_AZURE.gpu_count, KARPENTER_AZURE.gpu_manufacturer}
    return KARPENTER_AZURE if keys & azure else KARPENTER_AWS


def _one(values: list[str] | None) -> str | None:
    return values[0] if values is not None and len(values) == 1 else None


@dataclass(frozen=True)
class _NodeShape:
    """What a NodePool says about one of its nodes (``None``: it does not say)."""

    devices: int | None
    cpu: Fraction | None
    """vCPUs of the instance: what Karpenter weighs against ``limits.cpu``."""
    memory: Fraction | None
    """Bytes of the instance: what Karpenter weighs against ``limits.memory``."""
    cpu_allocatable: Fraction | None
    memory_allocatable: Fraction | None
    """What the node offers to pods (the instance type's, else the instance's own)."""


def _node_shape(tspec: Mapping[str, Any], labels: KarpenterLabels) -> _NodeShape:
    """docs/autoscaling.md, "What one node brings": the count, cpu and memory requirements
    with one value, else those of the one EC2 instance type the NodePool allows."""
    count = _one(_requirement_values(tspec, labels.gpu_count))
    cpu = _one(_requirement_values(tspec, labels.cpu))
    memory = _one(_requirement_values(tspec, labels.memory_mib))
    instance_type = _one(_requirement_values(tspec, INSTANCE_TYPE_LABEL))
    known = EC2_INSTANCE_TYPES.get(instance_type or "") if labels is KARPENTER_AWS else None
    devices = parse_count(count) if count is not None else (known[2] if known else None)
    vcpus = parse_quantity(cpu) if cpu is not None else (Fraction(known[3]) if known else None)
    mib = parse_quantity(memory) if memory is not None else (Fraction(known[4]) if known else None)
    size = mib * 2**20 if mib is not None else None
    return _NodeShape(
        devices=devices or None,
        cpu=vcpus,
        memory=size,
        cpu_allocatable=Fraction(known[5], 1000) if known else vcpus,
        memory_allocatable=Fraction(known[6] * 2**20) if known else size,
    )


def _whole_nodes(limit: Fraction | None, per_node: Fraction | None) -> int | None:
    """How many nodes Karpenter launches under *limit*: it never launches one that would
    pass the limit's remainder (karpenter ``filterByRemainingResources``)."""
    if limit is None or not per_node:
        return None
    return int(limit // per_node)


def karpenter_pool(nodepool: Mapping[str, Any]) -> PoolResult | None:
    """The pool a Karpenter NodePool declares; ``None`` when it asks for no accelerator
    (docs/autoscaling.md, "Where pools are declared")."""
    name = name_of(nodepool)
    spec = _mapping(nodepool, "spec")
    tspec = _mapping(_mapping(spec, "template"), "spec")
    limits = _mapping(spec, "limits")
    labels = _provider(tspec)
    gpu_names = _requirement_values(tspec, labels.gpu_name)
    vendors = _requirement_values(tspec, labels.gpu_manufacturer)
    counts = _requirement_values(tspec, labels.gpu_count)
    instance_type = _one(_requirement_values(tspec, INSTANCE_TYPE_LABEL))
    known_type = EC2_INSTANCE_TYPES.get(instance_type or "") if labels is KARPENTER_AWS else None
    device_limits = {r: limits[r] for _, r, _ in KARPENTER_MANUFACTURERS.values() if r in limits}
    if (
        gpu_names is None
        and vendors is None
        and counts is None
        and not device_limits
        and known_type is None
    ):
        return None  # a CPU pool: not ours to queue for

    def reject(reason: str) -> PoolRejection:
        return PoolRejection(PoolSource.KARPENTER, name, reason)

    if gpu_names is None and known_type is not None:
        gpu_names = [known_type[0]]
    if gpu_names is None or len(gpu_names) != 1:
        allowed = f" ({', '.join(gpu_names)})" if gpu_names else ""
        return reject(
            f"NodePool {name} allows several GPU models{allowed}: a queue needs one; give it "
            f"the requirement {labels.gpu_name} In [<one model>], one NodePool per model"
        )
    vendor = (_one(vendors) or "").lower()
    if not vendor and len(device_limits) == 1:
        resource_only = next(iter(device_limits))
        vendor = next(v for v, (_, r, _) in KARPENTER_MANUFACTURERS.items() if r == resource_only)
    if not vendor and labels is KARPENTER_AWS:
        vendor = EC2_GPU_MANUFACTURERS.get(gpu_names[0].lower(), "")
    known = KARPENTER_MANUFACTURERS.get(vendor)
    if known is None:
        return reject(
            f"NodePool {name}: the GPU manufacturer is not known: add the requirement "
            f"{labels.gpu_manufacturer} In [nvidia] (or amd), or a limit on its device "
            "resource (nvidia.com/gpu)"
        )
    manufacturer, resource, brand = known
    shape = _node_shape(tspec, labels)
    per_node = shape.devices if counts is None or len(counts) == 1 else None
    device_limit = _limit(limits.get(resource)) if resource in limits else None
    node_limit = _limit(limits.get("nodes")) if "nodes" in limits else None
    replicas = _limit(spec.get("replicas")) if spec.get("replicas") is not None else None
    cpu_limit = parse_quantity(limits.get("cpu")) if "cpu" in limits else None
    memory_limit = parse_quantity(limits.get("memory")) if "memory" in limits else None
    if (node_limit is not None or replicas is not None) and not per_node:
        what = "a fixed number of nodes (spec.replicas)" if replicas is not None else "nodes"
        return reject(
            f"NodePool {name} is limited by {what} only and does not say how many GPUs a "
            f"node has: add the requirement {labels.gpu_count} In [<count>] or the "
            f"limit {resource}"
        )
    node_bounds = [
        n
        for n in (
            node_limit,
            replicas,
            _whole_nodes(
                Fraction(device_limit) if device_limit is not None else None,
                Fraction(per_node) if per_node else None,
            ),
            _whole_nodes(cpu_limit, shape.cpu),
            _whole_nodes(memory_limit, shape.memory),
        )
        if n is not None
    ]
    if per_node and node_bounds:
        max_nodes: int | None = min(node_bounds)
        max_devices = (max_nodes or 0) * per_node
    elif device_limit is not None:
        max_nodes, max_devices = None, device_limit
    else:
        return reject(
            f"NodePool {name} has no limit on {resource} and no node limit, so its maximum "
            f"is unbounded: set spec.limits.{resource} (or spec.limits.nodes with "
            f"{labels.gpu_count} In [<count>])"
        )
    pool = DeclaredPool(
        source=PoolSource.KARPENTER,
        name=name,
        node_selector={KARPENTER_NODEPOOL_LABEL: name},
        manufacturer=manufacturer,
        resource=resource,
        product=f"{brand} {gpu_names[0].upper()}",
        devices_per_node=per_node or 0,
        max_devices=max_devices,
        cpu_per_node=shape.cpu_allocatable,
        memory_per_node=shape.memory_allocatable,
        max_nodes=max_nodes,
        cpu_limit=cpu_limit,
        memory_limit=memory_limit,
        taints=_taints(tspec.get("taints")),
    )
    return _within_flavor_limits(pool, lambda reason: reject(f"NodePool {name}: {reason}"))


# --- Cluster API ------------------------------------------------------------------------------


def _pairs(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if key and sep:
            out[key.strip()] = value.strip()
    return out


def _capi_taints(text: str) -> tuple[tuple[str, str, str], ...]:
    out = []
    for item in text.split(","):
        head, _, effect = item.strip().rpartition(":")
        key, _, value = head.partition("=")
        if key and effect in DEDICATION_EFFECTS:
            out.append((key, value, effect))
    return tuple(sorted(set(out)))


CAPI_MANAGED_LABEL_DOMAINS: Final = (
    "node-role.kubernetes.io",
    "node-restriction.kubernetes.io",
    "node.cluster.x-k8s.io",
)
"""Label domains Cluster API propagates from a machine template to its Nodes, which the
autoscaler reads as the group's labels (its ``getManagedNodeLabelsFromLabels``)."""


def _is_propagated(key: str) -> bool:
    domain = key.split("/", 1)[0] if "/" in key else ""
    return domain == CAPI_MANAGED_LABEL_DOMAINS[0] or any(
        domain == d or domain.endswith("." + d) for d in CAPI_MANAGED_LABEL_DOMAINS[1:]
    )


def is_capi_infrastructure(obj: Mapping[str, Any]) -> bool:
    """An object of Cluster API's infrastructure group (what a node group's
    ``infrastructureRef`` names)."""
    return str(obj.get("apiVersion") or "").startswith(CAPI_INFRASTRUCTURE_GROUP + "/")


def capi_infrastructure_ref(node_group: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(namespace, kind, name) of the infrastructure object a node group's machines are
    made from (``spec.template.spec.infrastructureRef``, in the group's namespace)."""
    machine = _mapping(_mapping(_mapping(node_group, "spec"), "template"), "spec")
    ref = _mapping(machine, "infrastructureRef")
    kind, name = ref.get("kind"), ref.get("name")
    if not isinstance(kind, str) or not isinstance(name, str) or not kind or not name:
        return None
    return str(_mapping(node_group, "metadata").get("namespace") or ""), kind, name


def capi_pool(
    node_group: Mapping[str, Any],
    manufacturers_by_resource: Mapping[str, str],
    infrastructure: Mapping[str, Any] | None = None,
) -> PoolResult | None:
    """The pool a Cluster API MachineDeployment or MachinePool declares through the cluster
    autoscaler's scale-from-zero hints, read as the autoscaler reads them: annotations over
    the ``status.capacity`` of its *infrastructure* object (its machine template), the
    annotation's labels over those the machine template propagates; ``None`` without a GPU
    (docs/autoscaling.md, "Where pools are declared")."""
    annotations = annotations_of(node_group)
    status = _mapping(infrastructure or {}, "status")
    capacity = {str(k): str(v) for k, v in _mapping(status, "capacity").items()}
    gpu_type = annotations.get(CAPACITY_PREFIX + "gpu-type", "")
    count_text = annotations.get(CAPACITY_PREFIX + "gpu-count")
    if not gpu_type:
        gpu_type = next((r for r in sorted(capacity) if r in manufacturers_by_resource), "")
    if count_text is None:
        count_text = capacity.get(gpu_type)
    if not gpu_type:
        return None
    name = name_of(node_group)
    kind = str(node_group.get("kind") or "MachineDeployment")

    def reject(reason: str) -> PoolRejection:
        return PoolRejection(PoolSource.CLUSTER_API, name, f"{kind} {name}: {reason}")

    manufacturer = manufacturers_by_resource.get(gpu_type)
    if manufacturer is None:
        return reject(
            f"{CAPACITY_PREFIX}gpu-type {gpu_type} is no device resource of a known "
            "manufacturer: give the resource its nodes advertise (nvidia.com/gpu)"
        )
    per_node = parse_count(count_text)
    max_nodes = parse_count(annotations.get(CAPI_MAX_SIZE))
    if not per_node:
        return reject(f"add {CAPACITY_PREFIX}gpu-count (the devices of one node)")
    if max_nodes is None:
        return reject(f"add {CAPI_MAX_SIZE} (the autoscaler needs it too)")
    machine = _mapping(_mapping(_mapping(node_group, "spec"), "template"), "spec")
    propagated = {
        str(k): str(v)
        for k, v in _mapping(_mapping(machine, "metadata"), "labels").items()
        if _is_propagated(str(k))
    }
    selector = {**propagated, **_pairs(annotations.get(CAPACITY_PREFIX + "labels", ""))}
    if not selector:
        return reject(
            f"no label marks its nodes: add {CAPACITY_PREFIX}labels with one the nodes carry "
            "(e.g. node.cluster.x-k8s.io/pool=<name> in the machine template's labels, which "
            "Cluster API propagates to the Node)"
        )
    cpu = annotations.get(CAPACITY_PREFIX + "cpu", capacity.get("cpu"))
    memory = annotations.get(CAPACITY_PREFIX + "memory", capacity.get("memory"))
    pool = DeclaredPool(
        source=PoolSource.CLUSTER_API,
        name=name,
        node_selector=selector,
        manufacturer=manufacturer,
        resource=gpu_type,
        product=selector.get("nvidia.com/gpu.product", "").replace("-", " "),
        devices_per_node=per_node,
        max_devices=per_node * max_nodes,
        cpu_per_node=parse_quantity(cpu),
        memory_per_node=parse_quantity(memory),
        max_nodes=max_nodes,
        taints=_capi_taints(annotations.get(CAPACITY_PREFIX + "taints", "")),
        provisioning_class=CLASS_ATOMIC_SCALE_UP,
    )
    return _within_flavor_limits(pool, reject)


# --- Declared by a person ---------------------------------------------------------------------


def parse_declarations(
    document: object, manufacturers_by_resource: Mapping[str, str]
) -> list[PoolResult]:
    """The pools of a declaration document (docs/autoscaling.md, "Pools declared by a
    person"): ``{pools: [{name, nodeSelector, accelerator: {product, resource, perNode},
    cpu, memory, maxNodes, taints?, provisioningClass?}]}``. A malformed document raises
    ``ValueError`` saying what to fix; a pool with a wrong field is a rejection."""
    if not isinstance(document, Mapping) or not isinstance(document.get("pools"), list):
        raise DeclaredPoolsError("a pool declaration is a mapping with a list 'pools'")
    if len(document["pools"]) > MAX_DECLARED_POOLS:
        raise DeclaredPoolsError(
            f"a pool declaration lists at most {MAX_DECLARED_POOLS} pools, not "
            f"{len(document['pools'])}: merge pools"
        )
    results: list[PoolResult] = []
    seen: set[str] = set()
    for i, item in enumerate(document["pools"]):
        if not isinstance(item, Mapping):
            raise DeclaredPoolsError(f"pools[{i}] is {brief(item)}, not a mapping")
        result = _declared(item, i, manufacturers_by_resource)
        if result.name in seen:
            raise DeclaredPoolsError(f"pool {result.name} is declared twice: keep one entry")
        seen.add(result.name)
        results.append(result)
    return results


class DeclaredPoolsError(DeclarationError):
    """A pools declaration refused; the message names the fix."""


MAX_DECLARED_POOLS: Final = 200
"""The most pools one declaration may list (docs/autoscaling.md)."""


def validate_declared_pools(
    text: str | bytes, manufacturers_by_resource: Mapping[str, str]
) -> tuple[DeclaredPool, ...]:
    """The one validation of a person's pools declaration (the worker's ConfigMap and
    ``--declared-pools FILE`` alike): every pool sound, or :class:`DeclaredPoolsError`
    naming each pool's fix; never another exception (docs/autoscaling.md)."""
    document = load_declaration(text, "pools declaration")
    results = parse_declarations(document, manufacturers_by_resource)
    rejected = [r.reason for r in results if isinstance(r, PoolRejection)]
    if rejected:
        raise DeclaredPoolsError("; ".join(rejected))
    return tuple(r for r in results if isinstance(r, DeclaredPool))


def _declared(
    item: Mapping[str, Any], index: int, manufacturers_by_resource: Mapping[str, str]
) -> PoolResult:
    raw_name = item.get("name")
    name = raw_name if isinstance(raw_name, str) else ""
    if not is_valid_dns_label(name) or len(name) > 40:
        raise DeclaredPoolsError(
            f"pools[{index}].name {brief(raw_name)}: give a DNS label of at most 40 characters"
        )

    def reject(reason: str) -> PoolRejection:
        return PoolRejection(PoolSource.DECLARED, name, f"declared pool {name}: {reason}")

    selector = item.get("nodeSelector")
    if not isinstance(selector, Mapping) or not selector:
        return reject(
            "give nodeSelector: the labels its nodes carry (cloud.google.com/gke-nodepool)"
        )
    accelerator = _mapping(item, "accelerator")
    resource = _scalar(accelerator.get("resource")) or "nvidia.com/gpu"
    manufacturer = manufacturers_by_resource.get(resource)
    if manufacturer is None:
        return reject(f"accelerator.resource {brief(resource)} is no known device resource")
    per_node = parse_count(_scalar(accelerator.get("perNode")))
    max_nodes = parse_count(_scalar(item.get("maxNodes")))
    if not per_node or max_nodes is None:
        return reject("give accelerator.perNode (devices per node) and maxNodes")
    cpu = parse_quantity(_scalar(item.get("cpu"))) if "cpu" in item else None
    memory = parse_quantity(_scalar(item.get("memory"))) if "memory" in item else None
    if cpu is None or memory is None or cpu <= 0 or memory <= 0:
        return reject("give cpu and memory above 0: what one node offers to pods (its allocatable)")
    if not all(isinstance(v, str) for v in selector.values()):
        return reject("give nodeSelector values as strings (quote numbers and booleans)")
    bad = [
        f"{brief(k)}: {brief(v)}"
        for k, v in selector.items()
        if not (isinstance(k, str) and is_valid_label_key(k) and is_valid_label_value(v))
    ]
    if bad:
        return reject(f"nodeSelector {bad[0]} is not a label key and value: give node labels")
    for field_name in ("product", "provisioningClass"):
        raw = accelerator.get(field_name) if field_name == "product" else item.get(field_name)
        if raw is not None and not isinstance(raw, str):
            return reject(f"{field_name} is {brief(raw)}: give a string")
    pool = DeclaredPool(
        source=PoolSource.DECLARED,
        name=name,
        node_selector={str(k): str(v) for k, v in selector.items()},
        manufacturer=manufacturer,
        resource=resource,
        product=str(accelerator.get("product") or ""),
        devices_per_node=per_node,
        max_devices=per_node * max_nodes,
        cpu_per_node=cpu,
        memory_per_node=memory,
        max_nodes=max_nodes,
        taints=_taints(item.get("taints")),
        provisioning_class=str(item.get("provisioningClass") or ""),
    )
    return _within_flavor_limits(pool, reject)


def declarations_in_configmap(
    configmap: Mapping[str, Any], manufacturers_by_resource: Mapping[str, str]
) -> tuple[DeclaredPool, ...]:
    """The pools of the ConfigMap :data:`DECLARED_POOLS_CONFIGMAP`, validated as a file is;
    :class:`DeclarationError` naming the fix when it is refused."""
    text = configmap_text(configmap, DECLARED_POOLS_KEY)
    return validate_declared_pools(text, manufacturers_by_resource)


def _scalar(value: object) -> str:
    """A scalar field as text (``""`` for a map, a list or nothing)."""
    if value is None or isinstance(value, (Mapping, list)):
        return ""
    return str(value)


# --- All of them ------------------------------------------------------------------------------


def is_pool_chain_object(obj: object) -> bool:
    """An object of a declared pool's chain (it carries :data:`POOL_LABEL`)."""
    return obj is not None and POOL_LABEL in labels_of(obj)


@dataclass(frozen=True)
class PoolObjects:
    """What a pool kind's reader may consult besides its object."""

    manufacturers_by_resource: Mapping[str, str]
    infrastructure: Mapping[tuple[str, str, str], Mapping[str, Any]]
    """Cluster API infrastructure objects by (namespace, kind, name)."""


@dataclass(frozen=True)
class PoolKind:
    """One kind of object that declares pools: where the worker reads it and how."""

    source: PoolSource
    group: str
    kind: str
    plural: str
    namespaced: bool
    versions: tuple[str, ...]
    """The versions read, preferred first: the worker watches the first one served."""
    read: Callable[[Mapping[str, Any], PoolObjects], PoolResult | None]
    """The pool one object declares (``None``: it asks for no accelerator)."""


def _read_capi(obj: Mapping[str, Any], found: PoolObjects) -> PoolResult | None:
    ref = capi_infrastructure_ref(obj)
    infra = found.infrastructure.get(ref) if ref is not None else None
    return capi_pool(obj, found.manufacturers_by_resource, infra)


def _read_karpenter(obj: Mapping[str, Any], _: PoolObjects) -> PoolResult | None:
    return karpenter_pool(obj)


CAPI_GROUP: Final = "cluster.x-k8s.io"
CAPI_VERSIONS: Final = ("v1beta2", "v1beta1")
POOL_KINDS: Final[list[PoolKind]] = [
    PoolKind(
        PoolSource.KARPENTER,
        "karpenter.sh",
        "NodePool",
        "nodepools",
        False,
        ("v1",),
        _read_karpenter,
    ),
    PoolKind(
        PoolSource.CLUSTER_API,
        CAPI_GROUP,
        "MachineDeployment",
        "machinedeployments",
        True,
        CAPI_VERSIONS,
        _read_capi,
    ),
    PoolKind(
        PoolSource.CLUSTER_API,
        CAPI_GROUP,
        "MachinePool",
        "machinepools",
        True,
        CAPI_VERSIONS,
        _read_capi,
    ),
]
"""The one table of the kinds that declare pools (docs/autoscaling.md): ``plan``, the
worker's discovery and watches, the simulator's stand-in CRDs and the RBAC test read it. A
new pool source is one entry here (and its reader), plus its grant in deploy/base/rbac.yaml.
Cluster API infrastructure objects are no pool kind: they size a node group's pool."""


def pool_kind_of(obj: Mapping[str, Any]) -> PoolKind | None:
    """The entry of :data:`POOL_KINDS` *obj* is an object of, ``None`` for none."""
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    kind = obj.get("kind")
    return next((k for k in POOL_KINDS if k.kind == kind and k.group == group), None)


def is_pool_object(obj: Mapping[str, Any]) -> bool:
    """An object of a pool kind, or a Cluster API infrastructure object (what
    :func:`pools_from_objects` reads)."""
    return pool_kind_of(obj) is not None or is_capi_infrastructure(obj)


def _object_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = _mapping(obj, "metadata")
    return str(obj.get("kind") or ""), str(meta.get("namespace") or ""), name_of(obj)


def pools_from_objects(
    objects: Iterable[Mapping[str, Any]],
    declared: Iterable[PoolResult],
    manufacturers_by_resource: Mapping[str, str],
) -> list[PoolResult]:
    """Every pool: from NodePools and Cluster API node groups (in the order of kind,
    namespace and name, whatever order they come in), then those a person declared, sorted by
    key; an object that asks for no accelerator is left out. Of two node groups with one
    name, the one in the later namespace gets a reason instead of a queue."""
    ordered = sorted(objects, key=_object_key)
    infrastructure = {
        (namespace, kind, name): o
        for o in ordered
        if is_capi_infrastructure(o)
        for kind, namespace, name in [_object_key(o)]
    }
    context = PoolObjects(manufacturers_by_resource, infrastructure)
    found: dict[str, PoolResult] = {}
    where: dict[str, str] = {}
    for obj in ordered:
        kind, namespace, _ = _object_key(obj)
        pool_kind = pool_kind_of(obj)
        result = pool_kind.read(obj, context) if pool_kind is not None else None
        if result is None:
            continue
        if isinstance(result, DeclaredPool) and len(result.object_name) > MAX_OBJECT_NAME:
            result = PoolRejection(
                result.source,
                result.name,
                f"{kind} {result.name}: the name is too long for its queue's name "
                f"({result.object_name}, at most {MAX_OBJECT_NAME} characters): shorten it",
            )
        here = f"{kind} {namespace}/{result.name}" if namespace else f"{kind} {result.name}"
        if result.key in found:
            result = PoolRejection(
                result.source,
                f"{namespace}/{result.name}",
                f"{here}: {where[result.key]} has the same name, and a pool's queue is "
                f"named after it alone ({result.source.value}.{result.name}): rename one",
            )
        found.setdefault(result.key, result)
        where.setdefault(result.key, here)
    for result in declared:
        found.setdefault(result.key, result)
    return [found[k] for k in sorted(found)]


def pool_of(node: object, pools: Sequence[DeclaredPool]) -> DeclaredPool | None:
    """The first pool (by key) whose selector the node's labels match."""
    return next((p for p in pools if p.matches(node)), None)


def claimed_nodes(nodes: Iterable[object], pools: Sequence[PoolResult]) -> set[str]:
    """Names of the nodes a sound pool selects: they feed its flavor, not one of their own."""
    sound = [p for p in pools if isinstance(p, DeclaredPool)]
    return {name_of(n) for n in nodes if any(p.matches(n) for p in sound)}


def _limit(value: object) -> int | None:
    """A NodePool limit as a count: Karpenter's ``spec.limits`` are int-or-string (a plain
    ``16`` comes back from the API as a number, ``"16"`` as a string)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return parse_count(str(value))
    return parse_count(value)
