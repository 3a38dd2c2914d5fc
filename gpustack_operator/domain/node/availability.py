"""Whether a node's capacity counts in its queues' quotas right now (docs/node-lifecycle.md).

One rule per node, read from what the Node says: ``spec.unschedulable``, the Ready condition
and its ``lastTransitionTime``, taints, ``deletionTimestamp``, the GPU Operator's and
mig-manager's labels, and device ``allocatable`` against ``capacity``. Signals carry uneven
timers (the policy's :class:`LifecycleTimers`): a definite removal stops counting at once, a
soft one after a grace period, planned maintenance after a longer one (with the node's
installed devices counted meanwhile), and a node that was withheld counts again only after
looking usable for a join window.

Pure: time enters as *now* (seconds since the epoch) and what the worker remembers of a
node as :class:`Observed`; ``plan`` passes no memory, so a signal whose start the Node does
not record is taken as having run out its timer (and says so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

from gpustack_operator.domain.nodeview import is_deleting, label_of, metadata, name_of, status_field
from gpustack_operator.domain.quantities import parse_quantity

DRIVER_UPGRADE_LABEL: Final = "nvidia.com/gpu-driver-upgrade-state"
MIG_STATE_LABEL: Final = "nvidia.com/mig.config.state"
UPGRADE_IN_PROGRESS: Final = frozenset(
    {
        "cordon-required",
        "wait-for-jobs-required",
        "pod-deletion-required",
        "drain-required",
        "pod-restart-required",
        "validation-required",
        "uncordon-required",
        "node-maintenance-required",
        "post-maintenance-required",
    }
)
"""GPU Operator driver-upgrade states between the cordon and the uncordon (k8s-operator-libs
``pkg/upgrade/consts.go``); ``upgrade-required`` has not started, ``upgrade-done`` is over."""
UPGRADE_FAILED: Final = "upgrade-failed"
MIG_IN_PROGRESS: Final = frozenset({"pending", "rebooting"})
"""mig-manager states while the device plugin is paused (NVIDIA/mig-parted)."""

LIFECYCLE_TAINTS: Final[dict[str, str | None]] = {
    "node.kubernetes.io/out-of-service": "out-of-service",
    "node.cloudprovider.kubernetes.io/shutdown": "shutdown",
    "ToBeDeletedByClusterAutoscaler": "autoscaler-removal",
    "DeletionCandidateOfClusterAutoscaler": None,
    "karpenter.sh/disrupted": "karpenter-disruption",
    "cloud.google.com/impending-node-termination": "spot-notice",
}
"""The one table of node-lifecycle taints (docs/node-lifecycle.md, "Signals"): key -> the
code of the definite signal it is (the node is leaving for good), or ``None`` for a taint
that is no signal (the autoscaler's ``PreferNoSchedule`` candidate mark). A flavor never
tolerates any of them, nor any key under :data:`LIFECYCLE_TAINT_PREFIXES`
(docs/worker.md, "Tolerations"). A new lifecycle taint is one entry here."""
LIFECYCLE_TAINT_PREFIXES: Final = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
"""Kubernetes' own condition taints (not-ready, unreachable, unschedulable, pressure,
uninitialized...): lifecycle taints too, none of them a definite signal by itself."""


def definite_taint(key: str) -> str | None:
    """The definite signal's code a taint with *key* is, ``None`` when it is none."""
    return LIFECYCLE_TAINTS.get(key)


def is_lifecycle_taint(key: str) -> bool:
    """A taint that says something about the node's health or life, not its purpose."""
    return key.startswith(LIFECYCLE_TAINT_PREFIXES) or key in LIFECYCLE_TAINTS


READY_CONDITION: Final = "Ready"


class Severity(StrEnum):
    """How soon a signal stops a node counting."""

    DEFINITE = "definite"
    """At once: the capacity is leaving (deleting, removal taints, ``upgrade-failed``)."""
    SOFT = "soft"
    """After ``soft_grace``: a cordon, NotReady/Unknown."""
    PLANNED = "planned"
    """After ``maintenance_grace``: a driver upgrade or MIG change in progress."""


@dataclass(frozen=True)
class LifecycleTimers:
    """The timers of the availability rule, in seconds (docs/node-lifecycle.md, "Timers");
    a field of the chain policy, the same for the worker, ``plan``, ``sim`` and ``queues``."""

    soft_grace: float = 120.0
    """How long a cordoned or NotReady node still counts (heartbeat blips, short cordons)."""
    maintenance_grace: float = 900.0
    """How long a node in a driver upgrade or MIG change still counts, with its installed
    devices (the upgrade has no overall time limit by default)."""
    join_window: float = 60.0
    """How long a node that was withheld must look usable before it counts again."""
    device_grace: float = 300.0
    """How long devices missing from ``allocatable`` while ``capacity`` still reports them
    count (kubelet's ``endpointStopGracePeriod``: a device plugin restarting)."""

    def __post_init__(self) -> None:
        for name in ("soft_grace", "maintenance_grace", "join_window", "device_grace"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value}")


class DeviceBasis(StrEnum):
    """Which device amount of a counted node feeds its queue's quota."""

    ALLOCATABLE = "allocatable"
    """What the device plugin offers as healthy (the normal case)."""
    CAPACITY = "capacity"
    """What kubelet still reports installed: devices briefly gone from ``allocatable``."""
    INSTALLED = "installed"
    """The most of allocatable, capacity and the ``.count`` label: planned maintenance keeps
    the node's last good device facts."""


@dataclass(frozen=True, slots=True)
class Signal:
    """One thing the Node says about its life."""

    code: str
    severity: Severity
    detail: str
    since: float | None = None
    """When the Node records the signal began (Ready's ``lastTransitionTime``), else None."""


@dataclass(frozen=True, slots=True)
class Observed:
    """What the worker remembers of a node between looks (``plan`` has none)."""

    first_seen: Mapping[str, float] = field(default_factory=dict)
    """Signal code -> when the worker first saw it; a signal present at the node's first
    look is absent here (its start is unknown: its timer is taken as run out)."""
    withheld: bool = False
    """The node was withheld at the last look."""
    usable_since: float | None = None
    """When a withheld node stopped showing any withholding signal."""
    withheld_for: Severity | None = None
    """The severity of what withheld the node (a rejoining node keeps it: a pool back from
    planned maintenance stays held, not emptied, until its nodes count again)."""
    withheld_by: str = ""
    """The code of the signal that withheld the node, kept through its join window (a node
    back from a cordon is still away for maintenance: docs/node-lifecycle.md, "Team quotas
    through maintenance")."""
    before_maintenance: frozenset[str] = frozenset()
    """Soft signals (a cordon, NotReady) the node already showed when planned maintenance
    began, while they last: one left when the maintenance ends is not its end, but what it
    was before (docs/node-lifecycle.md, "Whole-pool Hold")."""


@dataclass(frozen=True, slots=True)
class NodeAvailability:
    """The verdict for one node at one moment."""

    node: str
    counted: bool
    reason: str = ""
    """The deciding signal's code (``joining`` in the join window), ``""`` when nothing is
    wrong."""
    severity: Severity | None = None
    message: str = ""
    since: float | None = None
    until: float | None = None
    """When the verdict changes by time alone (a grace or join window ends); None: never."""
    assumed: bool = False
    """The signal's start is unknown, so its timer was taken as run out."""
    devices: DeviceBasis = DeviceBasis.ALLOCATABLE
    signals: tuple[Signal, ...] = ()
    rejoining_from: str = ""
    """In the join window: the code of the signal that withheld the node."""

    @property
    def withheld(self) -> bool:
        return not self.counted

    @property
    def away_for_maintenance(self) -> bool:
        """Withheld for maintenance someone planned: a driver upgrade or MIG change (with
        their tails and join windows) or a cordon (with its join window). Team quotas hold
        through it (docs/node-lifecycle.md, "Team quotas through maintenance")."""
        if self.counted:
            return False
        return self.severity is Severity.PLANNED or CORDONED in (self.reason, self.rejoining_from)

    def as_dict(self) -> dict[str, Any]:
        """The shape ``plan --explain`` and ``queues`` print."""
        out: dict[str, Any] = {"counted": self.counted}
        if self.reason:
            out.update(reason=self.reason, message=self.message)
        if self.severity is not None:
            out["severity"] = self.severity.value
        if self.since is not None:
            out["since"] = format_time(self.since)
        if self.until is not None:
            out["until"] = format_time(self.until)
        if self.assumed:
            out["timerAssumedRunOut"] = True
        if self.devices is not DeviceBasis.ALLOCATABLE:
            out["devices"] = self.devices.value
        return out


COUNTED_AS_TODAY: Final = "no-conditions"


def explain_availability(verdict: NodeAvailability) -> tuple[str, str] | None:
    """(code, message) for ``plan``'s explanations and ``queues``: why a node is withheld,
    since when, and when it would count again; None when there is nothing to say."""
    if not verdict.reason or verdict.reason == COUNTED_AS_TODAY:
        return None
    parts = [verdict.message]
    if verdict.since is not None:
        parts.append(f"since {format_time(verdict.since)}")
    elif verdict.assumed:
        parts.append("the Node does not record when this began")
    if verdict.until is not None:
        then = "counts again" if verdict.withheld else "stops counting"
        parts.append(f"{then} at {format_time(verdict.until)}")
    elif verdict.withheld:
        parts.append("counts again once the signal is gone and a join window has passed")
    code = f"withheld-{verdict.reason}" if verdict.withheld else f"counted-{verdict.reason}"
    return code, "; ".join(parts)


def format_time(epoch: float) -> str:
    """RFC 3339 in UTC, as Kubernetes writes times."""
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object) -> float | None:
    """A Kubernetes timestamp (``2026-11-27T10:00:00Z``) as epoch seconds; None if unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _conditions(node: object) -> list[Mapping[str, Any]] | None:
    status = node.get("status") if isinstance(node, Mapping) else None
    found = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(found, list):
        return None
    return [c for c in found if isinstance(c, Mapping)]


def _taints(node: object) -> list[Mapping[str, Any]]:
    spec = node.get("spec") if isinstance(node, Mapping) else None
    taints = spec.get("taints") if isinstance(spec, Mapping) else None
    return [t for t in taints if isinstance(t, Mapping)] if isinstance(taints, list) else []


def is_unschedulable(node: object) -> bool:
    spec = node.get("spec") if isinstance(node, Mapping) else None
    return isinstance(spec, Mapping) and spec.get("unschedulable") is True


def ready_condition(node: object) -> Mapping[str, Any] | None:
    """The Node's Ready condition; None when it has none."""
    for condition in _conditions(node) or ():
        if condition.get("type") == READY_CONDITION:
            return condition
    return None


def node_signals(node: object) -> tuple[Signal, ...]:
    """Every lifecycle signal *node* shows, definite ones first (docs/node-lifecycle.md)."""
    signals: list[Signal] = []
    if is_deleting(node):
        signals.append(Signal("deleting", Severity.DEFINITE, "deletionTimestamp is set"))
    for taint in _taints(node):
        code = definite_taint(str(taint.get("key") or ""))
        if code is not None and taint.get("effect") in ("NoSchedule", "NoExecute"):
            signals.append(Signal(code, Severity.DEFINITE, f"taint {taint.get('key')}"))
    upgrade = label_of(node, DRIVER_UPGRADE_LABEL)
    if upgrade == UPGRADE_FAILED:
        signals.append(
            Signal("upgrade-failed", Severity.DEFINITE, f"{DRIVER_UPGRADE_LABEL}={upgrade}")
        )
    elif upgrade in UPGRADE_IN_PROGRESS:
        signals.append(
            Signal("driver-upgrade", Severity.PLANNED, f"{DRIVER_UPGRADE_LABEL}={upgrade}")
        )
    mig = label_of(node, MIG_STATE_LABEL)
    if mig in MIG_IN_PROGRESS:
        signals.append(Signal("mig-change", Severity.PLANNED, f"{MIG_STATE_LABEL}={mig}"))
    if is_unschedulable(node):
        signals.append(Signal(CORDONED, Severity.SOFT, "spec.unschedulable is true"))
    # A Node without a Ready condition (a hand-written manifest) is not judged on it.
    ready = ready_condition(node)
    if ready is not None:
        status = ready.get("status")
        since = parse_time(ready.get("lastTransitionTime"))
        if status == "False":
            signals.append(Signal("not-ready", Severity.SOFT, "Ready is False", since))
        elif status != "True":
            signals.append(Signal("unreachable", Severity.SOFT, f"Ready is {status}", since))
    order = {Severity.DEFINITE: 0, Severity.PLANNED: 1, Severity.SOFT: 2}
    return tuple(sorted(signals, key=lambda s: order[s.severity]))


def in_planned_maintenance(node: object) -> bool:
    """Whether *node* (a Node, or its :class:`Lifecycle`) shows a driver upgrade or MIG
    change in progress: its device facts are not to be trusted now (docs/node-lifecycle.md,
    "Devices: identity from what is installed, quota from what is healthy")."""
    signals = node.signals if isinstance(node, Lifecycle) else node_signals(node)
    return any(s.severity is Severity.PLANNED for s in signals)


def ready_since(node: object) -> float | None:
    """When the Node's Ready condition last became True (None: unknown or not Ready)."""
    ready = ready_condition(node)
    if ready is None or ready.get("status") != "True":
        return None
    return parse_time(ready.get("lastTransitionTime"))


def device_shortfall(node: object) -> bool:
    """Whether an extended resource (a name with a ``/``: devices) has fewer ``allocatable``
    than ``capacity`` (a device plugin restarting, a MIG change, unhealthy cards)."""
    allocatable = status_field(node, "allocatable")
    capacity = status_field(node, "capacity")
    for resource, value in capacity.items():
        if "/" not in resource:
            continue
        cap = parse_quantity(value)
        if cap is None or cap <= 0:
            continue
        alloc = parse_quantity(allocatable.get(resource))
        if alloc is None or alloc < cap:
            return True
    return False


def availability_inputs(node: object) -> tuple[Any, ...]:
    """Everything the rule reads of a Node besides devices, as a comparable value (the
    worker passes a Node update to the queues only when this or the devices change)."""
    ready = ready_condition(node)
    conditions = _conditions(node)
    taints = tuple(
        sorted(str(t.get("key")) for t in _taints(node) if definite_taint(str(t.get("key"))))
    )
    return (
        is_unschedulable(node),
        conditions is not None and bool(conditions),
        None if ready is None else (ready.get("status"), ready.get("lastTransitionTime")),
        taints,
        label_of(node, DRIVER_UPGRADE_LABEL),
        label_of(node, MIG_STATE_LABEL),
    )


DEVICES_SHORT: Final = "devices-short"
CORDONED: Final = "cordoned"


def _started(signal: Signal, observed: Observed | None) -> float | None:
    if signal.since is not None:
        return signal.since
    if observed is None:
        return None
    started = observed.first_seen.get(signal.code)
    return None if started is None or started == UNKNOWN_START else started


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """Everything the rule reads of one Node version, read once (the node model holds it)."""

    node: str
    signals: tuple[Signal, ...]
    devices_short: bool
    """:func:`device_shortfall`."""
    counted_as_today: bool
    """The Node reports no conditions (a hand-written manifest): counted as it is."""
    ready_since: float | None
    """:func:`ready_since`."""


def lifecycle_of(node: object) -> Lifecycle:
    """:class:`Lifecycle` of *node*."""
    return Lifecycle(
        name_of(node),
        node_signals(node),
        device_shortfall(node),
        _conditions(node) is None and bool(metadata(node)),
        ready_since(node),
    )


def node_availability(
    node: object | Lifecycle,
    timers: LifecycleTimers,
    now: float | None,
    observed: Observed | None = None,
) -> NodeAvailability:
    """The verdict for *node* (a Node, or its :class:`Lifecycle`) at *now*
    (docs/node-lifecycle.md, "Signals").

    *now* None takes every timer as run out. *observed* is the worker's memory of the node
    (``plan``: None, so a signal the Node does not date is taken as run out, and there is no
    join window).
    """
    life = node if isinstance(node, Lifecycle) else lifecycle_of(node)
    return _judge(life, timers, now, observed)


def look_at(
    life: Lifecycle, timers: LifecycleTimers, now: float, previous: Observed | None
) -> tuple[NodeAvailability, Observed]:
    """The worker's look at a node (its :class:`Lifecycle`) at *now*: :func:`remember`,
    :func:`node_availability` and :func:`after_verdict` in one. *previous* None: the first
    look. Returns the verdict and the memory to keep."""
    observed = _remember(life.signals, life.devices_short, previous, now)
    verdict = _judge(life, timers, now, observed)
    return verdict, after_verdict(observed, verdict)


def _judge(
    life: Lifecycle,
    timers: LifecycleTimers,
    now: float | None,
    observed: Observed | None,
) -> NodeAvailability:
    name, signals, short = life.node, life.signals, life.devices_short
    if not signals and not short and (observed is None or not observed.withheld):
        # The common case: nothing to say (a Node without conditions says so).
        if life.counted_as_today:
            return NodeAvailability(
                name, True, COUNTED_AS_TODAY, message="reports no conditions: counted as it is"
            )
        return NodeAvailability(name, True)
    definite = [s for s in signals if s.severity is Severity.DEFINITE]
    if definite:
        first = definite[0]
        started = _started(first, observed)
        return NodeAvailability(
            name,
            False,
            first.code,
            Severity.DEFINITE,
            f"{first.detail}: the capacity is leaving, not counted",
            since=started,
            signals=signals,
        )
    planned = [s for s in signals if s.severity is Severity.PLANNED]
    # A cordon or NotReady during planned maintenance is part of it: the longer grace holds.
    deciding = planned or [s for s in signals if s.severity is Severity.SOFT]
    if deciding:
        return _in_grace(name, deciding, timers, now, observed, signals)
    return _usable(life, timers, now, observed)


def _in_grace(
    name: str,
    deciding: list[Signal],
    timers: LifecycleTimers,
    now: float | None,
    observed: Observed | None,
    signals: tuple[Signal, ...],
) -> NodeAvailability:
    # The signal that started earliest decides (the node has been unusable since then).
    dated = [(s, _started(s, observed)) for s in deciding]
    unknown = [s for s, t in dated if t is None]
    signal, started = (unknown[0], None) if unknown else min(dated, key=lambda d: d[1] or 0.0)
    planned = signal.severity is Severity.PLANNED
    grace = timers.maintenance_grace if planned else timers.soft_grace
    basis = DeviceBasis.INSTALLED if planned else DeviceBasis.ALLOCATABLE
    # A node withheld at the last look gets no fresh grace from a new signal: one that
    # flaps back during its join window stays withheld (docs/node-lifecycle.md, "Flapping").
    rejoining = observed is not None and observed.withheld
    # A cordon or NotReady left when planned maintenance ends label first is the end of
    # that maintenance: the node stays withheld for it, so a whole pool stays held with
    # its quota (docs/node-lifecycle.md, "Whole-pool Hold").
    tail = (
        rejoining
        and observed is not None
        and observed.withheld_for is Severity.PLANNED
        and signal.severity is Severity.SOFT
        and not {s.code for s in deciding} & observed.before_maintenance
    )
    severity = Severity.PLANNED if tail else signal.severity
    if started is None or now is None or now >= started + grace or rejoining:
        return NodeAvailability(
            name,
            False,
            signal.code,
            severity,
            f"{signal.detail} for longer than {grace:g} s: not counted"
            + ("" if started is not None else " (start unknown: the grace is taken as run out)")
            + (" (the end of planned maintenance)" if tail else ""),
            since=started,
            assumed=started is None,
            devices=basis,
            signals=signals,
        )
    return NodeAvailability(
        name,
        True,
        signal.code,
        signal.severity,
        f"{signal.detail}: counted until its grace of {grace:g} s runs out",
        since=started,
        until=started + grace,
        devices=basis,
        signals=signals,
    )


def _usable(
    life: Lifecycle,
    timers: LifecycleTimers,
    now: float | None,
    observed: Observed | None,
) -> NodeAvailability:
    name, signals, short = life.node, life.signals, life.devices_short
    if observed is not None and observed.withheld and now is not None:
        since = max(observed.usable_since or now, life.ready_since or UNKNOWN_START)
        if now < since + timers.join_window:
            return NodeAvailability(
                name,
                False,
                "joining",
                observed.withheld_for,
                f"usable again; counted once it has looked usable for {timers.join_window:g} s",
                since=since,
                until=since + timers.join_window,
                signals=signals,
                rejoining_from=observed.withheld_by,
            )
    if short:
        known = observed.first_seen.get(DEVICES_SHORT) if observed is not None else None
        started = None if known is None or known == UNKNOWN_START else known
        if started is not None and now is not None and now < started + timers.device_grace:
            return NodeAvailability(
                name,
                True,
                "devices-short",
                None,
                "devices missing from allocatable: counted at capacity until "
                f"{timers.device_grace:g} s have passed (a device plugin restarting)",
                since=started,
                until=started + timers.device_grace,
                devices=DeviceBasis.CAPACITY,
                signals=signals,
            )
        return NodeAvailability(
            name,
            True,
            DEVICES_SHORT,
            None,
            "devices missing from allocatable: counted at allocatable (unhealthy or gone)"
            + ("" if started is not None else " (start unknown: the grace is taken as run out)"),
            since=started,
            assumed=started is None,
            signals=signals,
        )
    reason = COUNTED_AS_TODAY if life.counted_as_today else ""
    return NodeAvailability(
        name,
        True,
        reason,
        message="reports no conditions: counted as it is" if reason else "",
        signals=signals,
    )


UNKNOWN_START: Final = float("-inf")
"""A signal's first-seen time when it was already there at the worker's first look."""


def withholding(signals: Sequence[Signal]) -> bool:
    """Whether any of *signals* can withhold a node (every lifecycle signal can)."""
    return bool(signals)


def remember(
    node: object,
    previous: Observed | None,
    now: float,
) -> Observed:
    """The worker's memory of *node* at a look at *now*, before the verdict: each signal's
    first-seen time (those present at the first look, *previous* None, are of unknown
    start), and, for a node withheld at the last look that now shows no signal, since when
    it has looked usable. Feed the result to :func:`node_availability`, then
    :func:`after_verdict`."""
    return _remember(node_signals(node), device_shortfall(node), previous, now)


def _remember(
    signals: tuple[Signal, ...], short: bool, previous: Observed | None, now: float
) -> Observed:
    codes = [s.code for s in signals]
    if short:
        codes.append(DEVICES_SHORT)
    start = UNKNOWN_START if previous is None else now
    known = previous.first_seen if previous is not None else {}
    first_seen = {c: known.get(c, start) for c in codes}
    withheld = previous.withheld if previous is not None else False
    usable_since = None
    if withheld and not withholding(signals):
        usable_since = (previous.usable_since if previous is not None else None) or now
    before_maintenance = _before_maintenance(signals, previous)
    if not first_seen and not withheld and before_maintenance is _NONE_BEFORE:
        return _NOTHING_OBSERVED  # a healthy node: one memory for all of them
    return Observed(
        first_seen=first_seen,
        withheld=withheld,
        usable_since=usable_since,
        withheld_for=previous.withheld_for if previous is not None and withheld else None,
        withheld_by=previous.withheld_by if previous is not None and withheld else "",
        before_maintenance=before_maintenance,
    )


def _before_maintenance(signals: tuple[Signal, ...], previous: Observed | None) -> frozenset[str]:
    """The soft signals shown at the last look, before planned maintenance appeared at this
    one; later, those of them still shown. At the first look nothing is known to predate."""
    if previous is None:
        return _NONE_BEFORE
    codes = {s.code for s in signals}
    planned = {s.code for s in signals if s.severity is Severity.PLANNED}
    if planned and not planned & set(previous.first_seen):
        soft = {s.code for s in signals if s.severity is Severity.SOFT}
        return frozenset(soft & set(previous.first_seen)) or _NONE_BEFORE
    return previous.before_maintenance & codes or _NONE_BEFORE


_NONE_BEFORE: Final[frozenset[str]] = frozenset()
"""One empty set for every node's memory (a new empty frozenset is 216 bytes)."""

_NOTHING_OBSERVED: Final = Observed(first_seen=MappingProxyType({}))
"""The memory of a node that shows no signal and is not withheld, kept once for every such
node (its fields are read, never changed)."""


def after_verdict(observed: Observed, verdict: NodeAvailability) -> Observed:
    """*observed* with the verdict's outcome: whether the node is withheld now."""
    if not verdict.withheld:
        if not observed.withheld:
            return observed
        return Observed(observed.first_seen, before_maintenance=observed.before_maintenance)
    severity = verdict.severity or observed.withheld_for
    if observed.withheld and severity == observed.withheld_for:
        return observed
    code = verdict.rejoining_from if verdict.reason == "joining" else verdict.reason
    return replace(observed, withheld=True, withheld_for=severity, withheld_by=code)
