"""The per-node agent behind ``device-manager serve`` (docs/device-manager.md).

It watches only its own Node (a field selector on the name) and its own NodeFeature
``<node>-gpustack-device-manager`` in the system namespace. Its reconciler detects devices (in
a worker thread: vendor libraries block), builds the labels and server-side-applies the
NodeFeature, owned by the Node, whose ``spec.labels`` it replaces as a whole so keys that
disappeared are removed (docs/worker.md). Nothing is written when the cached NodeFeature already
says the same, so a restart causes no churn.

A monitor loop re-detects every ``monitor_period`` seconds and, when the set of (manufacturer,
card id, unhealthy) changed, enqueues the Node for a reconcile. Nodes without the
``gpustack.ai/managed`` label are skipped (any value passes). There is no leader election:
every node runs its own agent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import anyio
import structlog
from prometheus_client.registry import CollectorRegistry

from gpustack_operator.apis import NODE_FEATURES
from gpustack_operator.devicemanager.detection import (
    DetectionConfig,
    DetectionResult,
    DeviceDetection,
)
from gpustack_operator.devicemanager.detectors.base import Detector
from gpustack_operator.devicemanager.detectors.sim import SimDetector
from gpustack_operator.devicemanager.metrics import (
    DeviceMetricsCollector,
    register_device_metrics,
)
from gpustack_operator.domain.labels import MANAGED_LABEL
from gpustack_operator.domain.node.nodefeature import (
    DEVICE_MANAGER_SUFFIX,
    device_manager_node_feature,
    is_device_manager_label,
    node_feature_name,
)
from gpustack_operator.domain.node.simdevices import SIM_DEVICES_ANNOTATION
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.labelrepair import LabelsTaken, repair_request
from gpustack_operator.runtime.controller import (
    Request,
    Result,
    TerminalError,
)
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.predicates import ANNOTATIONS_CHANGED, LABELS_CHANGED, or_
from gpustack_operator.runtime.resources import NODES

log = structlog.get_logger(__name__)

FIELD_MANAGER: Final = "gpustack-device-manager"
PUBLISHER: Final = "device-manager"
CONTROLLER_NAME: Final = "device-manager"
MIN_MONITOR_PERIOD: Final = 1.0


def _labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    meta = (obj or {}).get("metadata") or {}
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return dict(labels) if isinstance(labels, Mapping) else {}


def _annotation(obj: Mapping[str, Any] | None, key: str) -> str | None:
    meta = (obj or {}).get("metadata") or {}
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping):
        return None
    value = annotations.get(key)
    return value if isinstance(value, str) else None


def _owner_uids(obj: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return sorted(
        (str(r.get("kind")), str(r.get("uid")), bool(r.get("controller")))
        for r in refs
        if isinstance(r, Mapping)
    )


def is_up_to_date(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether the live NodeFeature already carries everything *desired* sets."""
    current_spec = current.get("spec") or {}
    desired_spec = desired.get("spec") or {}
    if dict(current_spec.get("labels") or {}) != dict(desired_spec.get("labels") or {}):
        return False
    have = _labels(current)
    if any(have.get(k) != v for k, v in _labels(desired).items()):
        return False
    return _owner_uids(current) == _owner_uids(desired)


class DeviceManagerAgent:
    """Wires the node watch, the reconciler and the monitor into a runtime ``Manager``."""

    def __init__(
        self,
        manager: Manager,
        config: DetectionConfig,
        *,
        node_name: str,
        system_namespace: str,
        monitor_period: float = 5.0,
        simulated: bool = False,
        library_detectors: Mapping[str, Detector] | None = None,
        metrics_registry: CollectorRegistry | None = None,
        limiter: anyio.CapacityLimiter | None = None,
        controller_name: str = CONTROLLER_NAME,
    ) -> None:
        """*controller_name* must be unique per manager (the simulator runs several agents)."""
        if monitor_period <= MIN_MONITOR_PERIOD:
            raise ValueError(
                f"the monitor period must be more than {MIN_MONITOR_PERIOD:g}s, "
                f"got {monitor_period:g}s"
            )
        if not node_name:
            raise ValueError("the node name is required: set KUBERNETES_NODE_NAME or --node-name")
        self.manager = manager
        self.node_name = node_name
        self.system_namespace = system_namespace
        self.monitor_period = monitor_period
        self.feature_name = node_feature_name(node_name, DEVICE_MANAGER_SUFFIX)
        self._limiter = limiter  # created on first use: it needs a running event loop
        self.nodes = manager.informer(NODES, field_selector=f"metadata.name={node_name}")
        self.features = manager.informer(
            NODE_FEATURES,
            namespace=system_namespace,
            field_selector=f"metadata.name={self.feature_name}",
        )
        sim = None
        if simulated:
            sim = SimDetector(
                self._sim_annotation,
                load_manufacturers(config.env),
                with_memory=config.with_memory,
            )
        self.detection = DeviceDetection(config, library_detectors=library_detectors, sim=sim)
        self.last_identity: tuple[tuple[str, str, bool], ...] | None = None
        self.taken = LabelsTaken(is_device_manager_label)
        """Marks the Node when an update takes one of this agent's labels from it."""
        # The builder watches the informers above (the manager shares one per scope).
        self.controller = (
            manager.controller(controller_name)
            .for_(
                NODES,
                self.taken,
                or_(LABELS_CHANGED, ANNOTATIONS_CHANGED),
                field_selector=f"metadata.name={node_name}",
            )
            .watches(
                NODE_FEATURES,
                self._own_node,
                namespace=system_namespace,
                field_selector=f"metadata.name={self.feature_name}",
            )
            .complete(self.reconcile)
        )
        manager.add_runnable(self.monitor, name=f"{controller_name} monitor")
        self.device_metrics: DeviceMetricsCollector | None = None
        if metrics_registry is not None:
            self.device_metrics = register_device_metrics(
                metrics_registry, node_name, self.detection.metrics_sources, live=False
            )
        self._log = log.bind(node=node_name)

    def _own_node(self, _: Mapping[str, Any]) -> Iterable[str]:
        return (self.node_name,)

    def node(self) -> dict[str, Any] | None:
        """This agent's Node as the cache holds it."""
        return self.nodes.indexer.get(self.node_name)

    def _sim_annotation(self) -> str | None:
        return _annotation(self.node(), SIM_DEVICES_ANNOTATION)

    def _thread_limiter(self) -> anyio.CapacityLimiter:
        """One vendor-library call at a time per agent (detection and metrics share it)."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)
        return self._limiter

    async def detect(self) -> DetectionResult:
        """One detection pass off the event loop (vendor libraries block)."""
        return await anyio.to_thread.run_sync(self.detection.detect, limiter=self._thread_limiter())

    async def reconcile(self, request: Request) -> Result | None:
        """Detect and publish this node's device labels as its NodeFeature (managed nodes)."""
        if request.key != self.node_name:
            return None
        node = self.node()
        if node is None:
            self._log.debug("node not in the cache (deleted?); nothing to publish")
            return None
        if MANAGED_LABEL not in _labels(node):
            self._log.debug("node is not managed by gpustack; skipped", label=MANAGED_LABEL)
            return None
        try:
            result = await self.detect()
        except ValueError as exc:  # an invalid sim.gpustack.ai/devices annotation
            raise TerminalError(str(exc)) from exc
        self.last_identity = result.identity()
        uid = str((node.get("metadata") or {}).get("uid") or "")
        desired = device_manager_node_feature(
            self.node_name, uid, result.labels, self.system_namespace
        )
        if desired is None:
            raise TerminalError(
                f"node name {self.node_name!r} is longer than 63 characters or otherwise not a "
                "valid label value, so NFD cannot attribute a NodeFeature to it"
            )
        current = self.features.indexer.get(f"{self.system_namespace}/{self.feature_name}")
        taken = self.taken.take(self.node_name)
        if current is not None and is_up_to_date(current, desired):
            if taken:
                await self._repair(node, desired, current)
            return None
        await self.manager.client.apply(
            NODE_FEATURES, desired, field_manager=FIELD_MANAGER, force=True
        )
        self._log.info(
            "published device labels",
            node_feature=f"{self.system_namespace}/{self.feature_name}",
            devices=result.device_count,
            groups=[g.key for g in result.groups],
        )
        return None

    async def _repair(
        self, node: Mapping[str, Any], desired: dict[str, Any], current: Mapping[str, Any]
    ) -> None:
        """The NodeFeature is right but the Node lost some of its labels: rewrite it so NFD
        applies them again (docs/worker.md, "Label repair")."""
        marked = repair_request(node, desired, current, publisher=PUBLISHER)
        if marked is None:
            return
        try:
            await self.manager.client.apply(
                NODE_FEATURES, marked, field_manager=FIELD_MANAGER, force=True
            )
        except Exception:
            self.taken.mark(self.node_name)  # the retry compares again
            raise

    async def refresh_metrics(self) -> None:
        """Read live device metrics off the event loop for the next ``/metrics`` scrapes."""
        if self.device_metrics is not None:
            await anyio.to_thread.run_sync(
                self.device_metrics.refresh, limiter=self._thread_limiter()
            )

    async def monitor(self) -> None:
        """Re-detect every period; enqueue the node when cards appear, vanish or sicken.

        Device metrics are refreshed on the same beat, so scrapes never call a vendor library
        on the event loop.
        """
        await self.refresh_metrics()
        while True:
            await anyio.sleep(self.monitor_period)
            await self.refresh_metrics()
            if MANAGED_LABEL not in _labels(self.node()):
                continue
            try:
                result = await self.detect()
            except Exception as exc:  # keep monitoring; the reconciler reports failures
                self._log.warning("device monitor: detection failed", error=repr(exc))
                continue
            identity = result.identity()
            if self.last_identity is not None and identity != self.last_identity:
                self._log.info(
                    "devices changed; re-publishing",
                    before=len(self.last_identity),
                    after=len(identity),
                )
                self.last_identity = identity
                self.controller.queue.add(self.node_name)
