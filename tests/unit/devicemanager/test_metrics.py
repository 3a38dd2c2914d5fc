"""Per-device metrics exposed through a prometheus_client collector."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpustack_operator.devicemanager.detectors.amd import AmdDetector
from gpustack_operator.devicemanager.detectors.base import (
    DeviceSample,
    LibraryUnavailable,
    MetricsSource,
)
from gpustack_operator.devicemanager.detectors.nvidia import NvidiaDetector
from gpustack_operator.devicemanager.metrics import register_device_metrics

from .fakes import NOT_SUPPORTED, FakeAmdGpu, FakeAmdSmi, FakeNvml, tesla_t4


class Failing:
    def __init__(self, manufacturer: str, error: Exception) -> None:
        self.manufacturer = manufacturer
        self.error = error
        self.calls = 0

    def sample(self) -> list[DeviceSample]:
        self.calls += 1
        raise self.error


def scrape(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def samples(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    """(metric, manufacturer, uuid) -> value of every sample in a scrape."""
    return {
        (s.name, s.labels.get("manufacturer", ""), s.labels.get("uuid", "")): s.value
        for family in text_string_to_metric_families(scrape(registry))
        for s in family.samples
    }


def test_nvidia_and_amd_cards_share_names_and_labels() -> None:
    nvml = FakeNvml(
        [
            tesla_t4("GPU-a", utilization=50, memory_used_mib=2048, power_mw=40_000),
            tesla_t4(
                "GPU-b", ecc_uncorrected=1, failures={"nvmlDeviceGetTemperature": NOT_SUPPORTED}
            ),
        ]
    )
    smi = FakeAmdSmi([FakeAmdGpu("AMD Instinct MI300X", 196592, uuid="amd-0")])
    registry = CollectorRegistry()
    register_device_metrics(registry, "node-1", [NvidiaDetector(nvml), AmdDetector(smi)])
    text = scrape(registry)
    labels = 'index="0",manufacturer="nvidia",model="Tesla T4",node="node-1",uuid="GPU-a"'
    assert f"gpustack_device_utilization_percent{{{labels}}} 50.0" in text
    got = samples(registry)
    assert got["gpustack_device_memory_used_bytes", "nvidia", "GPU-a"] == 2048 * 2**20
    assert got["gpustack_device_memory_total_bytes", "nvidia", "GPU-a"] == 15360 * 2**20
    assert got["gpustack_device_power_watts", "nvidia", "GPU-a"] == 40.0
    assert got["gpustack_device_temperature_celsius", "nvidia", "GPU-a"] == 40.0
    assert got["gpustack_device_healthy", "nvidia", "GPU-a"] == 1.0
    assert got["gpustack_device_healthy", "nvidia", "GPU-b"] == 0.0
    # unknown is left out, not exported as zero
    assert ("gpustack_device_temperature_celsius", "nvidia", "GPU-b") not in got
    assert got["gpustack_device_utilization_percent", "amd", "amd-0"] == 37.0
    assert got["gpustack_device_power_watts", "amd", "amd-0"] == 350.0
    assert got["gpustack_device_metrics_up", "nvidia", ""] == 1.0
    assert got["gpustack_device_metrics_up", "amd", ""] == 1.0


def test_a_failing_library_is_reported_down_and_the_scrape_still_works() -> None:
    registry = CollectorRegistry()
    sources: list[MetricsSource] = [
        Failing("nvidia", LibraryUnavailable("no driver")),
        Failing("amd", RuntimeError("boom")),
    ]
    register_device_metrics(registry, "n", sources)
    text = scrape(registry)
    assert 'gpustack_device_metrics_up{manufacturer="nvidia",node="n"} 0.0' in text
    assert 'gpustack_device_metrics_up{manufacturer="amd",node="n"} 0.0' in text


def test_registering_does_not_call_the_libraries() -> None:
    source = Failing("nvidia", LibraryUnavailable("no driver"))
    register_device_metrics(CollectorRegistry(), "n", [source])
    assert source.calls == 0


def test_the_source_list_is_read_at_each_scrape() -> None:
    current: list[MetricsSource] = []
    registry = CollectorRegistry()
    register_device_metrics(registry, "n", lambda: current)
    assert "manufacturer=" not in scrape(registry)
    current.append(NvidiaDetector(FakeNvml([tesla_t4()])))
    assert 'manufacturer="nvidia"' in scrape(registry)


def test_a_cached_collector_serves_the_last_refresh_without_calling_libraries() -> None:
    source = Failing("nvidia", LibraryUnavailable("no driver"))
    registry = CollectorRegistry()
    collector = register_device_metrics(registry, "n", [source], live=False)
    assert "gpustack_device_metrics_up{" not in scrape(registry)
    collector.refresh()
    assert source.calls == 1
    assert samples(registry)["gpustack_device_metrics_up", "nvidia", ""] == 0.0
    scrape(registry)
    assert source.calls == 1
