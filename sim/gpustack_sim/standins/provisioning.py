"""A stand-in for a node autoscaler (Karpenter, the cluster autoscaler) in the simulated cluster.

docs/simulator.md, "The provisioning stand-in": the pools are those the declarations describe
(``domain.declaredpools``: Karpenter NodePools and Cluster API node groups in the store, the
pools a person declared to the cluster's policy and those of the ConfigMap
``gpustack-declared-pools`` in the system namespace, read again whenever it changes, as the
worker reads them; docs/autoscaling.md). A pod that is Pending and unschedulable, whose
``nodeSelector`` holds a pool's selector, is demand for that pool: once demand has waited
*provision_delay* seconds, the stand-in adds nodes of the pool's shape (its selector and
taints as labels and taints, its devices, CPU and memory as capacity and allocatable, Ready)
until the demand fits or the pool's maximum is reached. A node it added that no pod uses for
*consolidation_delay* seconds is deleted. Nodes it did not add are never touched. Delays are
options, short in tests; the loop wakes itself when one runs out, never sleeps for a test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_operator.domain.chain.declaredpools import (
    DECLARED_POOLS_CONFIGMAP,
    DeclaredPool,
    PoolResult,
    PoolSource,
    declarations_in_configmap,
    is_pool_object,
    pools_from_objects,
)
from gpustack_operator.domain.declarationtext import DeclarationError
from gpustack_operator.domain.node.devicesources.karpenter import (
    COUNT_LABEL,
    MANUFACTURER_LABEL,
    NAME_LABEL,
)
from gpustack_operator.domain.nodeview import annotations_of, name_of
from gpustack_operator.domain.quantities import format_binary_quantity
from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.store import now_rfc3339
from gpustack_sim.standins.scheduler import pod_requests
from gpustack_sim.standins.standin import StoreLoop

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

log = structlog.get_logger(__name__)

PROVISIONED_ANNOTATION: Final = "sim.gpustack.ai/provisioned-for"
"""On every node the stand-in adds: the key of its pool (only those are ever removed)."""
DEFAULT_CPU_PER_DEVICE: Final = 8
DEFAULT_MEMORY_GI_PER_DEVICE: Final = 32
"""A node's size where its pool does not say it (a Karpenter NodePool names no machine)."""
_POOL_KINDS: Final = ("NodePool", "MachineDeployment", "MachinePool")


def _pending(pod: Mapping[str, Any]) -> bool:
    """Unbound and reported unschedulable by the scheduler stand-in."""
    if (pod.get("spec") or {}).get("nodeName") or pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _wants(pod: Mapping[str, Any], pool: DeclaredPool) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return all(selector.get(k) == v for k, v in pool.node_selector.items())


class ProvisioningStandIn(StoreLoop):
    """Adds nodes to pools with unschedulable pods, removes the idle ones it added."""

    name = "sim-provisioning"

    def __init__(
        self,
        sim: SimServer,
        declared: Sequence[PoolResult] = (),
        manufacturers_by_resource: Mapping[str, str] | None = None,
        *,
        provision_delay: float = 2.0,
        consolidation_delay: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        namespace: str = "gpustack-system",
    ) -> None:
        super().__init__(sim)
        self.declared = tuple(declared)
        self.namespace = namespace
        """The system namespace, where the ConfigMap ``gpustack-declared-pools`` is read."""
        self.manufacturers_by_resource = dict(
            manufacturers_by_resource or {"nvidia.com/gpu": "nvidia", "amd.com/gpu": "amd"}
        )
        self.provision_delay = provision_delay
        self.consolidation_delay = consolidation_delay
        self.clock = clock
        self._waiting_since: dict[str, float] = {}
        """Pool key -> when its unmet demand was first seen."""
        self._idle_since: dict[str, float] = {}
        """Added node -> when it was first seen without pods."""
        self._serial = 0
        self._pending_work = True
        self.added: list[str] = []
        self.removed: list[str] = []
        """Nodes added and removed, in order (what a demo or test reports)."""

    def idle(self) -> bool:
        """Nothing to do now and no delay running out."""
        return not self._pending_work and not self._waiting_since and not self._idle_since

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        declarations = (kind, meta.get("name"), meta.get("namespace")) == (
            "ConfigMap",
            DECLARED_POOLS_CONFIGMAP,
            self.namespace,
        )
        if kind in ("Pod", "Node") or kind in _POOL_KINDS or declarations:
            self._pending_work = True
            self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._pending_work = False
            try:
                next_at = self._step()
            except ApiError as exc:  # changed meanwhile: try again
                log.warning("provisioning stand-in: write refused", error=str(exc))
                self._pending_work = True
                next_at = self.clock() + 0.1
            except Exception:  # a bug must not stop the stand-in
                log.exception("provisioning stand-in failed")
                next_at = None
            if next_at is not None:
                loop.call_later(max(0.0, next_at - self.clock()), self._wake.set)

    def pools(self) -> list[DeclaredPool]:
        store = self.sim.store
        objects: list[Mapping[str, Any]] = []
        for info in store.registry:
            if info.kind in _POOL_KINDS:
                objects.extend(
                    o for o in store.list(info.api_version, info.kind) if is_pool_object(o)
                )
        configmap = store.get("v1", "ConfigMap", DECLARED_POOLS_CONFIGMAP, self.namespace)
        in_configmap: tuple[DeclaredPool, ...] = ()
        if configmap is not None:
            try:
                in_configmap = declarations_in_configmap(configmap, self.manufacturers_by_resource)
            except DeclarationError as exc:  # the worker reports it; the others still grow
                log.debug("provisioning stand-in: declared pools not read", problem=str(exc))
        results = pools_from_objects(
            objects, (*self.declared, *in_configmap), self.manufacturers_by_resource
        )
        return [r for r in results if isinstance(r, DeclaredPool)]

    def _step(self) -> float | None:
        """One pass; the time of the next deadline, if any."""
        now = self.clock()
        store = self.sim.store
        pools = self.pools()
        if not pools and not set(self.added) - set(self.removed):
            return None  # no pool and no node of one: a Node or Pod event costs no scan
        pods = store.list("v1", "Pod")
        nodes = store.list("v1", "Node")
        deadlines: list[float] = []
        for pool in pools:
            members = [n for n in nodes if pool.matches(n)]
            demand = [p for p in pods if _pending(p) and _wants(p, pool)]
            room = (pool.max_nodes if pool.max_nodes is not None else len(members)) - len(members)
            if not demand or room <= 0:
                self._waiting_since.pop(pool.key, None)
                continue
            since = self._waiting_since.setdefault(pool.key, now)
            if now - since < self.provision_delay:
                deadlines.append(since + self.provision_delay)
                continue
            for _ in range(min(room, self._nodes_for(pool, demand))):
                self._add_node(pool)
            self._waiting_since.pop(pool.key, None)
        used = {(p.get("spec") or {}).get("nodeName") for p in pods if not _finished(p)}
        keys = {p.key for p in pools}
        for node in nodes:
            name = name_of(node)
            owner = annotations_of(node).get(PROVISIONED_ANNOTATION)
            if not owner or name in used:
                self._idle_since.pop(name, None)
                continue
            since = self._idle_since.setdefault(name, now)
            if owner in keys and now - since < self.consolidation_delay:
                deadlines.append(since + self.consolidation_delay)
                continue
            store.delete("v1", "Node", name)
            self._idle_since.pop(name, None)
            self.removed.append(name)
            log.info("sim: pool node removed (idle)", node=name, pool=owner)
        for name in list(self._idle_since):
            if name not in {name_of(n) for n in nodes}:
                del self._idle_since[name]
        return min(deadlines) if deadlines else None

    def _nodes_for(self, pool: DeclaredPool, demand: Sequence[Mapping[str, Any]]) -> int:
        """Nodes the pending pods need: their devices over the devices of a node (one per
        pod when the pool does not say how many a node has)."""
        per_node = pool.devices_per_node
        if not per_node:
            return len(demand)
        devices = sum(
            pod_requests(p.get("spec") or {}).get(pool.resource, Fraction(0)) for p in demand
        )
        return max(1, -(-int(devices) // per_node))

    def _add_node(self, pool: DeclaredPool) -> None:
        self._serial += 1
        name = f"{pool.object_name}-{self._serial}"
        devices = pool.devices_per_node or 1
        cpu = pool.cpu_per_node or Fraction(DEFAULT_CPU_PER_DEVICE * devices)
        memory = pool.memory_per_node or Fraction(DEFAULT_MEMORY_GI_PER_DEVICE * devices * 2**30)
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **pool.node_selector,
        }
        if pool.source is PoolSource.KARPENTER and pool.product:
            labels |= {
                NAME_LABEL: pool.product.split(" ", 1)[-1].lower(),
                MANUFACTURER_LABEL: pool.manufacturer,
                COUNT_LABEL: str(devices),
            }
        resources = {
            "cpu": str(int(cpu)) if cpu.denominator == 1 else f"{int(cpu * 1000)}m",
            "memory": format_binary_quantity(int(memory)),
            "pods": "110",
            pool.resource: str(devices),
        }
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {PROVISIONED_ANNOTATION: pool.key},
            },
            "spec": {
                "taints": [
                    {"key": k, **({"value": v} if v else {}), "effect": e}
                    for k, v, e in pool.taints
                ]
            },
        }
        created = self.sim.store.create(node)
        created["status"] = {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": now_rfc3339()}
            ],
        }
        self.sim.store.update_status(created)
        self.added.append(name)
        log.info("sim: pool node added", node=name, pool=pool.key)


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
