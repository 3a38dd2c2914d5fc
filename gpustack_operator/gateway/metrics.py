"""The gateway's Prometheus metrics, on the runtime's process registry (served at /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from gpustack_operator.runtime.metrics import REGISTRY

__all__ = [
    "CLUSTERS",
    "CONNECTIONS",
    "CONNECTIONS_REFUSED",
    "CONNECTIONS_TIMED_OUT",
    "EVENTS",
    "RELOADS",
    "WATCHERS",
    "WATCH_DROPPED",
]

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
CONNECTIONS = Gauge(
    "gpustack_gateway_connections",
    "Open client connections.",
    registry=REGISTRY,
)
CONNECTIONS_REFUSED = Counter(
    "gpustack_gateway_connections_refused_total",
    "Connections answered 503 and closed because --max-connections were open.",
    registry=REGISTRY,
)
CONNECTIONS_TIMED_OUT = Counter(
    "gpustack_gateway_connections_timed_out_total",
    "Connections closed by a timeout (header: --read-header-timeout, idle: --idle-timeout).",
    ["timeout"],
    registry=REGISTRY,
)
RELOADS = Counter(
    "gpustack_gateway_reloads_total",
    "Reloads of a changed file (tls or tokens), by result (ok, failed).",
    ["file", "result"],
    registry=REGISTRY,
)
