"""Prometheus metrics of the runtime, with controller-runtime's and client-go's names.

Every metric lives in one project registry, :data:`REGISTRY`, never in prometheus_client's
global default, so that importing this module twice-over (tests, subcommands) never collides
with metrics of other libraries. The registry is process-wide, like controller-runtime's
``metrics.Registry``: several managers in one process share it and are told apart by label
values (``controller`` and ``name`` are the controller's name; ``name`` of the leader-election
gauge is the Lease's name). Controller names must therefore be unique within a process, as in
controller-runtime.

Three work-queue gauges (``workqueue_depth``, ``workqueue_unfinished_work_seconds`` and
``workqueue_longest_running_processor_seconds``) are computed when scraped from the live
queues that registered themselves with :func:`register_queue_progress`: they are exact at
scrape time, cost nothing per queue operation, and need no background task.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# controller-runtime exposes no ``*_created`` series; prometheus_client's switch is global.
disable_created_metrics()  # type: ignore[no-untyped-call]

REGISTRY = CollectorRegistry(auto_describe=True)
"""The project's registry: what ``/metrics`` serves."""

ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

# Buckets as controller-runtime uses them for reconcile time (seconds).
_RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7,
    0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15,
    20, 25, 30, 40, 50, 60,
)  # fmt: skip
# client-go's work-queue buckets: 10 ns .. 10 s (exponential, factor 10).
_QUEUE_BUCKETS = tuple(1e-8 * 10**i for i in range(10))
_REST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

# --- controller -------------------------------------------------------------------------

RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller, by result "
    "(success, error, requeue, requeue_after).",
    ["controller", "result"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller (terminal errors included).",
    ["controller"],
    registry=REGISTRY,
)
TERMINAL_RECONCILE_ERRORS = Counter(
    "controller_runtime_terminal_reconcile_errors_total",
    "Total number of terminal reconciliation errors per controller (not retried).",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller.",
    ["controller"],
    buckets=_RECONCILE_BUCKETS,
    registry=REGISTRY,
)
ACTIVE_WORKERS = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller.",
    ["controller"],
    registry=REGISTRY,
)
MAX_CONCURRENT_RECONCILES = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller.",
    ["controller"],
    registry=REGISTRY,
)

# --- work queue ---------------------------------------------------------------------------

WORKQUEUE_ADDS = Counter(
    "workqueue_adds_total", "Total number of adds handled by the work queue.", ["name"],
    registry=REGISTRY,
)  # fmt: skip
WORKQUEUE_RETRIES = Counter(
    "workqueue_retries_total", "Total number of retries handled by the work queue.", ["name"],
    registry=REGISTRY,
)  # fmt: skip
WORKQUEUE_QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in the work queue before being requested.",
    ["name"],
    buckets=_QUEUE_BUCKETS,
    registry=REGISTRY,
)
WORKQUEUE_WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from the work queue takes.",
    ["name"],
    buckets=_QUEUE_BUCKETS,
    registry=REGISTRY,
)


class QueueProgress(Protocol):
    """What a work queue exposes so the scrape-time gauges can be computed."""

    @property
    def name(self) -> str: ...

    def __len__(self) -> int:
        """Keys waiting to be handed out (the depth)."""
        ...

    def unfinished_work_seconds(self) -> float:
        """Sum of the time every in-flight item has been processing so far."""
        ...

    def longest_running_processor_seconds(self) -> float:
        """How long the oldest in-flight item has been processing."""
        ...


class _QueueProgressCollector(Collector):
    """Computes the two in-flight gauges of every live, named queue at scrape time."""

    def __init__(self) -> None:
        self._queues: weakref.WeakSet[QueueProgress] = weakref.WeakSet()

    def add(self, queue: QueueProgress) -> None:
        self._queues.add(queue)

    def discard(self, queue: QueueProgress) -> None:
        self._queues.discard(queue)

    def describe(self) -> Iterator[Metric]:
        # Names only: lets the registry detect duplicate registrations without collecting.
        yield GaugeMetricFamily("workqueue_depth", "", labels=["name"])
        yield GaugeMetricFamily("workqueue_unfinished_work_seconds", "", labels=["name"])
        yield GaugeMetricFamily("workqueue_longest_running_processor_seconds", "", labels=["name"])

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "workqueue_depth", "Current depth of the work queue.", labels=["name"]
        )
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and has not been "
            "observed by work_duration. Large values indicate stuck workers.",
            labels=["name"],
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "How many seconds the longest running processor of the work queue has been running.",
            labels=["name"],
        )
        for queue in list(self._queues):
            depth.add_metric([queue.name], len(queue))
            unfinished.add_metric([queue.name], queue.unfinished_work_seconds())
            longest.add_metric([queue.name], queue.longest_running_processor_seconds())
        yield depth
        yield unfinished
        yield longest


_QUEUE_PROGRESS = _QueueProgressCollector()
REGISTRY.register(_QUEUE_PROGRESS)


def register_queue_progress(queue: QueueProgress) -> None:
    """Expose *queue*'s depth and in-flight gauges while it lives (held weakly)."""
    _QUEUE_PROGRESS.add(queue)


def unregister_queue_progress(queue: QueueProgress) -> None:
    """Stop exposing *queue*'s scrape-time gauges (after shutdown)."""
    _QUEUE_PROGRESS.discard(queue)


class InformerHealth(Protocol):
    """What the informer gauge reads from a live informer."""

    @property
    def scope(self) -> str: ...

    def failing_for(self) -> float: ...


class _InformerHealthCollector(Collector):
    """``gpustack_informer_failing_seconds``, computed at scrape time from live informers."""

    def __init__(self) -> None:
        self._informers: weakref.WeakSet[InformerHealth] = weakref.WeakSet()

    def add(self, informer: InformerHealth) -> None:
        self._informers.add(informer)

    def discard(self, informer: InformerHealth) -> None:
        self._informers.discard(informer)

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("gpustack_informer_failing_seconds", "", labels=["informer"])

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "gpustack_informer_failing_seconds",
            "Seconds an informer has been unable to list or watch its kind (0 while it works).",
            labels=["informer"],
        )
        worst: dict[str, float] = {}
        for informer in list(self._informers):
            worst[informer.scope] = max(worst.get(informer.scope, 0.0), informer.failing_for())
        for scope, seconds in sorted(worst.items()):
            family.add_metric([scope], seconds)
        yield family


_INFORMER_HEALTH = _InformerHealthCollector()
REGISTRY.register(_INFORMER_HEALTH)


def register_informer(informer: InformerHealth) -> None:
    """Expose *informer*'s failing time while it runs (held weakly)."""
    _INFORMER_HEALTH.add(informer)


def unregister_informer(informer: InformerHealth) -> None:
    _INFORMER_HEALTH.discard(informer)


# --- leader election ------------------------------------------------------------------------

LEADER_ELECTION_MASTER_STATUS = Gauge(
    "leader_election_master_status",
    "Whether this process is the leader of the named Lease (1) or not (0).",
    ["name"],
    registry=REGISTRY,
)

# --- REST client (observed by client.py) ----------------------------------------------------

REST_CLIENT_REQUESTS = Counter(
    "rest_client_requests_total",
    "Number of HTTP requests to the API server, partitioned by status code, method, and host.",
    ["code", "method", "host"],
    registry=REGISTRY,
)
REST_CLIENT_LATENCY = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds, broken down by verb and host.",
    ["verb", "host"],
    buckets=_REST_BUCKETS,
    registry=REGISTRY,
)

# --- events recorder ---------------------------------------------------------------------------

EVENTS_DROPPED = Counter(
    "gpustack_events_dropped_total",
    "Kubernetes Events dropped: the recorder's queue was full, the write failed, or the "
    "object got too many events (rate_limited).",
    ["reason"],
    registry=REGISTRY,
)
