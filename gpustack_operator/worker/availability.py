"""The worker's memory of each node's life, and what it says about it (docs/node-lifecycle.md).

The availability rule (``domain.availability``) is pure: it needs to know since when a
signal the Node does not date (a cordon, a taint, an upgrade label, missing devices) has been
there, and whether a node was withheld at the last look. :class:`AvailabilityTracker` keeps
that per node, reads the time from an injectable clock (tests drive it; nothing here sleeps),
and reports each change of a node's verdict once: an Event on the Node (``NodeWithheld``,
``NodeCounted``) and the gauge ``gpustack_nodes_withheld{reason}``.

A signal already present at the tracker's first look at a node is of unknown start: its
timer is taken as run out, as ``plan`` takes it, so a restarted worker and ``plan`` agree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

import structlog
from prometheus_client import Gauge

from gpustack_operator.domain.node.availability import (
    LifecycleTimers,
    NodeAvailability,
    Observed,
    format_time,
    look_at,
)
from gpustack_operator.domain.node.nodemodel import NodeModel
from gpustack_operator.domain.nodeview import name_of
from gpustack_operator.runtime.clock import WALL_CLOCK, Clock
from gpustack_operator.runtime.controller import EventRecorderLike
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_operator.runtime.resources import NODES

log = structlog.get_logger(__name__)

WITHHELD_REASON: Final = "NodeWithheld"
COUNTED_REASON: Final = "NodeCounted"

NODES_WITHHELD = Gauge(
    "gpustack_nodes_withheld",
    "Managed nodes whose capacity the queues do not count now, by reason "
    '(docs/node-lifecycle.md, "Signals"); 0 once none is withheld for that reason.',
    ["reason"],
    registry=REGISTRY,
)


class AvailabilityTracker:
    """Per-node memory for the availability rule, shared by every queue reconcile."""

    def __init__(
        self,
        timers: LifecycleTimers,
        *,
        clock: Clock = WALL_CLOCK,
        recorder: EventRecorderLike | None = None,
    ) -> None:
        self.timers = timers
        self.clock = clock
        """Wall-clock seconds (Ready's ``lastTransitionTime`` is wall-clock too)."""
        self.recorder = recorder
        self._memory: dict[str, tuple[str, Observed]] = {}
        self._verdicts: dict[str, NodeAvailability] = {}
        self._models: dict[str, NodeModel] = {}
        """Node name -> the model (one Node version) its last verdict was computed from."""
        self._withheld: dict[str, str] = {}
        """Node name -> reason, for the nodes withheld at their last look."""
        self._reasons: Counter[str] = Counter()

    def look(self, node: Mapping[str, Any], model: NodeModel) -> NodeAvailability:
        """*node*'s verdict now (*model* is its model), remembering what it shows.

        A verdict changes only with the Node or when its ``until`` passes: the same model
        (one Node version in the worker's store) gets the verdict it got before, until then
        (every queue reconcile looks at each of its nodes; deriving the verdict anew each
        time would grow with both)."""
        now = self.clock()
        name = model.name
        last = self._verdicts.get(name)
        if (
            last is not None
            and self._models.get(name) is model
            and (last.until is None or now < last.until)
        ):
            return last
        known = self._memory.get(name)
        previous = known[1] if known is not None and known[0] == model.uid else None
        verdict, kept = look_at(model.lifecycle, self.timers, now, previous)
        self._memory[name] = (model.uid, kept)
        self._verdicts[name] = verdict
        self._models[name] = model
        self._report(node, verdict)
        return verdict

    def forget(self, node: Mapping[str, Any]) -> None:
        """Drop a deleted Node (its gauge share goes with it)."""
        name = name_of(node)
        self._memory.pop(name, None)
        self._verdicts.pop(name, None)
        self._models.pop(name, None)
        reason = self._withheld.pop(name, None)
        if reason is not None:
            self._count(reason, -1)

    def verdict(self, name: str) -> NodeAvailability | None:
        """The verdict of node *name* at its last look (None: not looked at yet)."""
        return self._verdicts.get(name)

    def verdicts(self) -> list[tuple[str, NodeAvailability]]:
        """(uid, verdict) of every node at its last look, as the worker publishes them for
        ``queues`` (``domain/node/workerverdicts.py``)."""
        return [
            (self._memory[name][0] if name in self._memory else "", verdict)
            for name, verdict in sorted(self._verdicts.items())
        ]

    def seen(self, name: str) -> frozenset[str]:
        """The signal codes node *name* showed at its last look."""
        known = self._memory.get(name)
        return frozenset(known[1].first_seen) if known is not None else frozenset()

    def withheld(self) -> Mapping[str, str]:
        """Node name -> reason for every node withheld at its last look."""
        return dict(self._withheld)

    def _count(self, reason: str, delta: int) -> None:
        self._reasons[reason] += delta
        NODES_WITHHELD.labels(reason=reason).set(self._reasons[reason])

    def _report(self, node: object, verdict: NodeAvailability) -> None:
        name = verdict.node
        before = self._withheld.get(name)
        after = verdict.reason if verdict.withheld else None
        if before == after:
            return
        if before is not None:
            self._count(before, -1)
            del self._withheld[name]
        if after is not None:
            self._withheld[name] = after
            self._count(after, +1)
        if after is None:
            message = "counted in its queues' quotas again"
            log.info("node counted", node=name)
            self._event(node, "Normal", COUNTED_REASON, message)
            return
        since = f" since {format_time(verdict.since)}" if verdict.since is not None else ""
        until = (
            f"; counts again at {format_time(verdict.until)} if it stays usable"
            if verdict.until is not None
            else ""
        )
        message = f"{after}{since}: {verdict.message}{until}"
        log.info("node withheld", node=name, reason=after, message=verdict.message)
        self._event(node, "Warning", WITHHELD_REASON, message)

    def _event(self, node: object, type_: Any, reason: str, message: str) -> None:
        if self.recorder is not None and isinstance(node, Mapping):
            self.recorder.event(node, type_, reason, message, resource=NODES)
