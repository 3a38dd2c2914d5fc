"""Per-device metrics on ``/metrics``, read live from the vendor libraries at each scrape.

In the spirit of NVIDIA's DCGM exporter, but one agent serves every vendor it has a binding
for (NVML, amdsmi), with the same metric names and labels: ``node``, ``manufacturer``,
``model``, ``uuid``, ``index``. A value the card does not report is left out, not exported
as zero. ``gpustack_device_metrics_up{manufacturer}`` says whether the library could be read
at all, so a broken driver shows up as ``0`` instead of as silently missing series.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import structlog
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from gpustack_operator.devicemanager.detectors.base import (
    DeviceSample,
    LibraryUnavailable,
    MetricsSource,
)

log = structlog.get_logger(__name__)

DEVICE_LABELS = ("node", "manufacturer", "model", "uuid", "index")

# name -> (help, DeviceSample attribute or a function of the sample)
_GAUGES: tuple[tuple[str, str, Callable[[DeviceSample], float | None]], ...] = (
    (
        "gpustack_device_utilization_percent",
        "Share of the last sample period the device was busy (0-100).",
        lambda s: s.utilization_percent,
    ),
    (
        "gpustack_device_memory_used_bytes",
        "Device memory in use.",
        lambda s: None if s.memory_used_bytes is None else float(s.memory_used_bytes),
    ),
    (
        "gpustack_device_memory_total_bytes",
        "Device memory installed.",
        lambda s: None if s.memory_total_bytes is None else float(s.memory_total_bytes),
    ),
    (
        "gpustack_device_temperature_celsius",
        "Device temperature (GPU die or edge sensor).",
        lambda s: s.temperature_celsius,
    ),
    (
        "gpustack_device_power_watts",
        "Device power draw.",
        lambda s: s.power_watts,
    ),
    (
        "gpustack_device_healthy",
        "1 when the device reports no uncorrected memory errors and answers, else 0.",
        lambda s: None if s.healthy is None else float(s.healthy),
    ),
)
UP_METRIC = "gpustack_device_metrics_up"


@dataclass(frozen=True)
class _Reading:
    manufacturer: str
    up: bool
    samples: tuple[DeviceSample, ...] = ()


class DeviceMetricsCollector(Collector):
    """A prometheus_client collector of per-device readings.

    *live* (the default) reads every source at each scrape — right for a process that serves
    ``/metrics`` off its event loop. The agent's server runs on the event loop, where vendor
    calls must not block, so it passes ``live=False`` and calls :meth:`refresh` from a worker
    thread every monitor period; scrapes then serve the last readings.
    *sources* may be a callable so the set can change without re-registering.
    """

    def __init__(
        self,
        node: str,
        sources: Callable[[], Sequence[MetricsSource]] | Sequence[MetricsSource],
        *,
        live: bool = True,
    ) -> None:
        self._node = node
        self._sources = sources if callable(sources) else (lambda: tuple(sources))
        self._live = live
        self._lock = threading.Lock()
        self._readings: tuple[_Reading, ...] = ()

    def describe(self) -> Iterable[Metric]:
        # Declared without samples so registering does not call into the vendor libraries.
        return self._families()

    def _families(self) -> list[GaugeMetricFamily]:
        families = [GaugeMetricFamily(name, doc, labels=DEVICE_LABELS) for name, doc, _ in _GAUGES]
        families.append(
            GaugeMetricFamily(
                UP_METRIC,
                "1 when the manufacturer's vendor library answered the last scrape, else 0.",
                labels=("node", "manufacturer"),
            )
        )
        return families

    def refresh(self) -> None:
        """Read every source now (blocking) and keep the readings for the next scrapes."""
        readings: list[_Reading] = []
        for source in self._sources():
            try:
                samples = source.sample()
            except LibraryUnavailable as exc:
                log.debug("no device metrics", manufacturer=source.manufacturer, reason=str(exc))
                readings.append(_Reading(source.manufacturer, up=False))
                continue
            except Exception as exc:  # a scrape must never fail because one library did
                log.warning(
                    "reading device metrics failed",
                    manufacturer=source.manufacturer,
                    error=repr(exc),
                )
                readings.append(_Reading(source.manufacturer, up=False))
                continue
            readings.append(_Reading(source.manufacturer, up=True, samples=tuple(samples)))
        with self._lock:
            self._readings = tuple(readings)

    def collect(self) -> Iterable[Metric]:
        if self._live:
            self.refresh()
        with self._lock:
            readings = self._readings
        families = self._families()
        up = families[-1]
        for reading in readings:
            up.add_metric([self._node, reading.manufacturer], 1.0 if reading.up else 0.0)
            for sample in reading.samples:
                labels = [
                    self._node,
                    sample.manufacturer,
                    sample.model,
                    sample.uuid,
                    str(sample.index),
                ]
                for family, (_, _, read) in zip(families, _GAUGES, strict=False):
                    value = read(sample)
                    if value is not None:
                        family.add_metric(labels, value)
        return families


def register_device_metrics(
    registry: CollectorRegistry,
    node: str,
    sources: Callable[[], Sequence[MetricsSource]] | Sequence[MetricsSource],
    *,
    live: bool = True,
) -> DeviceMetricsCollector:
    """Create the collector and register it on *registry* (not the global default one)."""
    collector = DeviceMetricsCollector(node, sources, live=live)
    registry.register(collector)
    return collector
