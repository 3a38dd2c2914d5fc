"""Devices no pool counts, reported by the live worker (docs/devices.md, "Why a device gets
no pool").

Key: the Node's name. For a managed Node the reconciler reads the Node and its DRA
ResourceSlices from the caches, asks the domain which devices feed no pool and why
(``unpooled_devices``), and reports each change of that answer once: a Warning Event
``DeviceNotPooled`` on the Node per new reason (the runtime's recorder aggregates repeats)
and the gauge ``gpustack_unpooled_devices{reason}``, the devices left out over all nodes. It
writes nothing else.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

import structlog
from prometheus_client import Gauge

from gpustack_operator.controllers.capacity import BY_SLICE_NODE, slice_node, slices_by_node
from gpustack_operator.controllers.common import NodeChanged
from gpustack_operator.controllers.nodefacts import NodeFacts
from gpustack_operator.domain.devicesources import Diagnostic, unpooled_devices
from gpustack_operator.domain.flavors import is_managed
from gpustack_operator.domain.topology import missing_level
from gpustack_operator.runtime.controller import EventRecorderLike, Request
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_operator.runtime.resources import NODES, RESOURCE_SLICES

NAME: Final = "unpooled"
EVENT_REASON: Final = "DeviceNotPooled"
LEVEL_EVENT_REASON: Final = "TopologyLevelMissing"

log = structlog.get_logger(__name__)

UNPOOLED_DEVICES = Gauge(
    "gpustack_unpooled_devices",
    'Devices on managed nodes that feed no pool, by reason (docs/devices.md, "Why a device '
    'gets no pool"); 0 once none is left out for that reason.',
    ["reason"],
    registry=REGISTRY,
)

Report = tuple[tuple[Diagnostic, int], ...]


class UnpooledReconciler:
    def __init__(
        self,
        nodes: Informer,
        recorder: EventRecorderLike | None,
        facts: NodeFacts,
        slices: Informer | None = None,
    ) -> None:
        self.nodes = nodes
        self.recorder = recorder
        self.manufacturers = facts.manufacturers
        self.topology = facts.topology
        self.slices = slices
        self.lacking: dict[str, str] = {}
        """Per node, the topology level label last reported missing (docs/topology.md)."""
        self.reported: dict[str, Report] = {}
        """Per node, what was last reported (nodes with nothing left out are absent)."""

    async def __call__(self, request: Request) -> None:
        node = self.nodes.indexer.get(request.key)
        self._report_missing_level(request.key, node)
        found: Report = ()
        if node is not None and is_managed(node):
            slices = (
                self.slices.indexer.by_index(BY_SLICE_NODE, request.key)
                if self.slices is not None
                else ()
            )
            found = unpooled_devices(node, self.manufacturers, slices)
        previous = self.reported.get(request.key, ())
        if found == previous:
            return
        if found:
            self.reported[request.key] = found
        else:
            self.reported.pop(request.key, None)
        self._set_gauge({d.reason for d, _ in previous})
        if node is None:
            return
        seen = {d for d, _ in previous}
        for diagnostic, devices in found:
            if diagnostic in seen:
                continue
            message = f"{diagnostic.reason}: {diagnostic}"
            log.warning("devices feed no pool", node=request.key, devices=devices, reason=message)
            if self.recorder is not None:
                self.recorder.event(node, "Warning", EVENT_REASON, message, resource=NODES)

    def _report_missing_level(self, key: str, node: dict[str, Any] | None) -> None:
        """A Warning Event ``TopologyLevelMissing`` once per node and label: the node
        carries a coarser level of a set but not this one, so it is grouped apart (its
        own Topology and flavor) from the nodes that carry it (docs/topology.md, "Seeing
        it")."""
        lacking = ""
        if node is not None and self.topology is not None and is_managed(node):
            lacking = missing_level(node, self.topology)
        if lacking == self.lacking.get(key, ""):
            return
        if not lacking:
            self.lacking.pop(key, None)
            return
        self.lacking[key] = lacking
        message = (
            f"node lacks the topology level label {lacking}: it is grouped apart from the "
            "nodes that carry it, in a Topology without that level; label it to join them"
        )
        log.warning("topology level missing", node=key, label=lacking)
        if self.recorder is not None and node is not None:
            self.recorder.event(node, "Warning", LEVEL_EVENT_REASON, message, resource=NODES)

    def _set_gauge(self, also: set[str]) -> None:
        """The gauge from every node's report; reasons in *also* drop to 0 when gone."""
        totals: Counter[str] = Counter()
        for report in self.reported.values():
            for diagnostic, devices in report:
                totals[diagnostic.reason] += devices
        for reason in also - set(totals):
            UNPOOLED_DEVICES.labels(reason).set(0)
        for reason, devices in totals.items():
            UNPOOLED_DEVICES.labels(reason).set(devices)


def setup_unpooled(
    manager: Manager,
    *,
    facts: NodeFacts,
    dra: bool = False,
) -> None:
    """Register the report on *manager*; with *dra* it reads the ResourceSlices by node."""
    nodes = manager.informer(NODES)
    slices = slices_by_node(manager) if dra else None
    reconciler = UnpooledReconciler(nodes, manager.recorder, facts, slices)
    builder = manager.controller(NAME).for_(NODES, NodeChanged(facts))
    if slices is not None:
        builder = builder.watches(RESOURCE_SLICES, slice_node)
    builder.with_options(max_concurrent_reconciles=1).complete(reconciler)
