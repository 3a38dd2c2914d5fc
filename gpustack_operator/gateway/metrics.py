"""The gateway's Prometheus metrics, on the runtime's process registry (served at /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from gpustack_operator.runtime.metrics import REGISTRY

__all__ = ["CLUSTERS", "EVENTS", "WATCHERS", "WATCH_DROPPED"]

CLUSTERS = Gauge(
    "gpustack_gateway_clusters",
    "Upstream clusters by status (Connecting, Syncing, Ready, Unreachable).",
    ["status"],
    registry=REGISTRY,
)
WATCHERS = Gauge(
    "gpustack_gateway_watchers",
    "Open watch streams.",
    registry=REGISTRY,
)
EVENTS = Counter(
    "gpustack_gateway_events_total",
    "Events published to watchers, by topic (clusters, pools or a Kueue kind plural).",
    ["topic"],
    registry=REGISTRY,
)
WATCH_DROPPED = Counter(
    "gpustack_gateway_watch_dropped_total",
    "Watch streams the gateway closed because the client fell too far behind.",
    registry=REGISTRY,
)
