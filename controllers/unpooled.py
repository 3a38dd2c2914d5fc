"""Devices no pool counts, reported by the live worker (docs/devices.md, "Why a device gets
no pool").

Key: the Node's name. For a managed Node the reconciler reads the Node and its DRA
ResourceSlices from the caches, asks the domain which devices feed no pool and why
(``unpooled_devices``) and which of those may be judged yet (``judged_diagnostics``: the
node's sources get the policy's ``unpooled_settling`` from when this worker first saw the
node, unless our agent has published for the manufacturer), and reports each change of that
answer once: a Warning Event ``DeviceNotPooled`` on the Node per new reason (the runtime's
recorder aggregates repeats), a Normal Event ``DeviceNotPooledResolved`` when a reported
reason stops holding, and the gauge ``gpustack_unpooled_devices{reason}``, the devices left
out over all nodes. A node still settling is looked at again when its time is up. It writes
nothing else.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

import structlog
from prometheus_client import Gauge

from gpustack_operator.domain.node.devicesources import (
    Diagnostic,
    judged_diagnostics,
    unpooled_devices,
)
from gpustack_operator.domain.node.nodeprofiles import is_managed
from gpustack_operator.runtime.clock import MONOTONIC_CLOCK, Clock
from gpustack_operator.runtime.controller import EventRecorderLike, Request, Result
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_operator.runtime.predicates import Predicate
from gpustack_operator.runtime.resources import NODES, RESOURCE_SLICES
from gpustack_operator.worker.caches import BY_SLICE_NODE, slice_node, slices_by_node
from gpustack_operator.worker.nodemodels import NodeModels

NAME: Final = "unpooled"
EVENT_REASON: Final = "DeviceNotPooled"
RESOLVED_REASON: Final = "DeviceNotPooledResolved"
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
JSON = dict[str, Any]


class ReportChanged(Predicate):
    """Passes creates and deletes, and updates that change what the report reads of the
    Node's model: whether it is managed, its unpooled devices, the manufacturers our agent
    publishes for and the topology level it lacks. A Node's version that only carries the
    capacity labels NFD merged (every Node's second version in a cold start) changes none
    of them, so it costs no reconcile. The DRA ResourceSlices have their own watch."""

    def __init__(self, models: NodeModels) -> None:
        self._models = models

    def _read(self, node: Mapping[str, Any]) -> tuple[Any, ...]:
        model = self._models.model(node)
        return (model.managed, model.unpooled, model.published, model.missing_level)

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return self._read(old) != self._read(new)

    def __repr__(self) -> str:
        return "ReportChanged()"


class UnpooledReconciler:
    def __init__(
        self,
        nodes: Informer,
        recorder: EventRecorderLike | None,
        facts: NodeModels,
        slices: Informer | None = None,
        *,
        settling: float = 0.0,
        clock: Clock = MONOTONIC_CLOCK,
    ) -> None:
        self.nodes = nodes
        self.recorder = recorder
        self.models = facts
        self.manufacturers = facts.manufacturers
        self.topology = facts.topology
        self.slices = slices
        self.settling = settling
        self.clock = clock
        self.lacking: dict[str, str] = {}
        """Per node, the topology level label last reported missing (docs/topology.md)."""
        self.reported: dict[str, Report] = {}
        """Per node, what was last reported (nodes with nothing left out are absent)."""
        self.first_seen: dict[str, float] = {}
        """Per node, when this worker first saw it (the clock's time)."""

    async def __call__(self, request: Request) -> Result | None:
        key = request.key
        node = self.nodes.indexer.get(key)
        model = self.models.model(node) if node is not None else None
        self._report_missing_level(key, node, model.missing_level if model else "")
        previous = self.reported.get(key, ())
        found: Report = ()
        retry: Result | None = None
        if node is None or model is None:
            self.first_seen.pop(key, None)
        elif model.managed:
            slices = (
                self.slices.indexer.by_index(BY_SLICE_NODE, key) if self.slices is not None else ()
            )
            now = self.clock()
            found, wait = judged_diagnostics(
                unpooled_devices(node, self.manufacturers, slices) if slices else model.unpooled,
                {},
                self.manufacturers,
                seen_for=now - self.first_seen.setdefault(key, now),
                settling=self.settling,
                reported={d for d, _ in previous},
                published=model.published,
            )
            if wait is not None:
                retry = Result(requeue_after=wait)
        if found == previous:
            return retry
        if found:
            self.reported[key] = found
        else:
            self.reported.pop(key, None)
        self._set_gauge({d.reason for d, _ in previous})
        if node is not None:
            self._report(node, key, previous, found)
        return retry

    def _report(self, node: JSON, key: str, previous: Report, found: Report) -> None:
        """A Warning per new reason, a Normal Event per reason that no longer holds."""
        before, now = {d for d, _ in previous}, {d for d, _ in found}
        for diagnostic, devices in found:
            if diagnostic in before:
                continue
            message = f"{diagnostic.reason}: {diagnostic}"
            log.warning("devices feed no pool", node=key, devices=devices, reason=message)
            if self.recorder is not None:
                self.recorder.event(node, "Warning", EVENT_REASON, message, resource=NODES)
        for diagnostic, devices in previous:
            if diagnostic in now:
                continue
            what = diagnostic.resource or diagnostic.reason
            message = (
                f"resolved: {what} no longer left out (it feeds a pool, is gone, or the node "
                "is no longer managed); "
                f"was {diagnostic.reason}: {diagnostic}"
            )
            log.info("devices no longer left out", node=key, devices=devices, reason=message)
            if self.recorder is not None:
                self.recorder.event(node, "Normal", RESOLVED_REASON, message, resource=NODES)

    def _report_missing_level(self, key: str, node: dict[str, Any] | None, lacking: str) -> None:
        """A Warning Event ``TopologyLevelMissing`` once per node and label: the node
        carries a coarser level of a set but not this one, so it is grouped apart (its
        own Topology and flavor) from the nodes that carry it (docs/topology.md, "Seeing
        it")."""
        if node is None or self.topology is None or not is_managed(node):
            lacking = ""
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
    facts: NodeModels,
    dra: bool = False,
    settling: float = 0.0,
) -> None:
    """Register the report on *manager*; with *dra* it reads the ResourceSlices by node;
    *settling*: the policy's ``unpooled_settling``."""
    nodes = manager.informer(NODES)
    slices = slices_by_node(manager) if dra else None
    reconciler = UnpooledReconciler(nodes, manager.recorder, facts, slices, settling=settling)
    builder = manager.controller(NAME).for_(NODES, ReportChanged(facts))
    if slices is not None:
        builder = builder.watches(RESOURCE_SLICES, slice_node)
    builder.with_options(max_concurrent_reconciles=1).complete(reconciler)
