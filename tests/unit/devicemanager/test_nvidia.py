"""NVML -> device groups and labels, driven by a fake NVML module (no GPU needed)."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from gpustack_operator.devicemanager.detectors.base import LibraryUnavailable
from gpustack_operator.devicemanager.detectors.nvidia import (
    NvidiaDetector,
    family_from_compute_capability,
    format_cuda_version,
)
from gpustack_operator.domain.node.devices import device_labels

from .fakes import (
    DRIVER_NOT_LOADED,
    GPU_IS_LOST,
    LIBRARY_NOT_FOUND,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeNvml,
    a10g,
    h100,
    tesla_t4,
)

P = "acceleratable.feature.gpustack.ai/"


@pytest.mark.parametrize(
    ("version", "text"),
    [(13000, "13.0"), (12040, "12.4"), (12080, "12.8"), (11020, "11.2"), (0, "")],
)
def test_cuda_driver_version_is_major_dot_minor(version: int, text: str) -> None:
    assert format_cuda_version(version) == text


@pytest.mark.parametrize(
    ("cc", "family"),
    [
        ((1, 3), "Tesla"),
        ((2, 1), "Fermi"),
        ((3, 7), "Kepler"),
        ((5, 2), "Maxwell"),
        ((6, 1), "Pascal"),
        ((7, 0), "Volta"),
        ((7, 2), "Volta"),
        ((7, 5), "Turing"),
        ((8, 0), "Ampere"),
        ((8, 6), "Ampere"),
        ((8, 7), "Ampere"),
        ((8, 9), "Ada-Lovelace"),
        ((9, 0), "Hopper"),
        ((10, 0), "Blackwell"),
        ((12, 0), "Blackwell"),
        ((4, 0), ""),
        ((99, 0), ""),
    ],
)
def test_family_follows_the_compute_capability(cc: tuple[int, int], family: str) -> None:
    assert family_from_compute_capability(*cc) == family


def test_tesla_t4_maps_to_spec_exact_labels() -> None:
    groups = NvidiaDetector(FakeNvml([tesla_t4()])).detect()
    assert [g.key for g in groups] == ["nvidia-tesla-t4"]
    group = groups[0]
    assert (group.name, group.memory_mib, group.cores) == ("Tesla T4", 15360, 2560)
    assert (group.compute_capability, group.family) == ("7.5", "Turing")
    assert (group.driver_version, group.runtime_version) == ("580.126.09", "13.0")
    assert [(a.id, a.index, a.unhealthy) for a in group.accelerators] == [("GPU-t4-0", 0, False)]
    assert device_labels(groups) == {
        "feature.gpustack.ai/acceleratable": "true",
        P + "nvidia": "true",
        P + "nvidia.driver-version": "580.126.09",
        P + "nvidia.runtime-version": "13.0",
        P + "nvidia-tesla-t4": "true",
        P + "nvidia-tesla-t4.product": "Tesla-T4",
        P + "nvidia-tesla-t4.memory": "15Gi",
        P + "nvidia-tesla-t4.cores": "2560",
        P + "nvidia-tesla-t4.count": "1",
        P + "nvidia-tesla-t4.family": "Turing",
        P + "nvidia-tesla-t4.comcap": "7.5",
    }


def test_the_manufacturer_prefix_is_dropped_from_nvidia_names() -> None:
    nvml = FakeNvml([a10g("GPU-a"), h100("GPU-h0"), h100("GPU-h1")], cuda=12040)
    groups = NvidiaDetector(nvml).detect()
    assert [g.key for g in groups] == ["nvidia-a10g", "nvidia-h100-80gb-hbm3"]
    labels = device_labels(groups)
    assert labels[P + "nvidia.runtime-version"] == "12.4"
    assert labels[P + "nvidia-a10g.product"] == "NVIDIA-A10G"
    assert labels[P + "nvidia-a10g.memory"] == "22Gi"
    assert labels[P + "nvidia-a10g.family"] == "Ampere"
    assert labels[P + "nvidia-a10g.count"] == "1"
    assert labels[P + "nvidia-h100-80gb-hbm3.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels[P + "nvidia-h100-80gb-hbm3.memory"] == "80Gi"
    assert labels[P + "nvidia-h100-80gb-hbm3.family"] == "Hopper"
    assert labels[P + "nvidia-h100-80gb-hbm3.comcap"] == "9.0"
    assert labels[P + "nvidia-h100-80gb-hbm3.count"] == "2"
    assert [a.index for a in groups[1].accelerators] == [1, 2]


def test_group_ids_carry_memory_when_asked() -> None:
    groups = NvidiaDetector(FakeNvml([tesla_t4()]), with_memory=True).detect()
    assert groups[0].key == "nvidia-tesla-t4-15g"


def test_a_card_with_uncorrected_ecc_errors_is_unhealthy_but_still_counted() -> None:
    nvml = FakeNvml([tesla_t4("GPU-ok"), tesla_t4("GPU-bad", ecc_uncorrected=3)])
    (group,) = NvidiaDetector(nvml).detect()
    assert [(a.id, a.unhealthy) for a in group.accelerators] == [
        ("GPU-ok", False),
        ("GPU-bad", True),
    ]
    assert device_labels([group])[P + "nvidia-tesla-t4.count"] == "2"


def test_unsupported_queries_leave_defaults_without_warning() -> None:
    gpu = tesla_t4(cores=None, ecc_uncorrected=None)
    with capture_logs() as logs:
        (group,) = NvidiaDetector(FakeNvml([gpu])).detect()
    assert group.cores == 0
    assert group.accelerators[0].unhealthy is False
    assert device_labels([group])[P + "nvidia-tesla-t4.cores"] == "0"
    assert [e for e in logs if e["log_level"] == "warning"] == []


def test_a_library_failing_mid_call_degrades_only_that_card_with_one_warning() -> None:
    broken = a10g("GPU-broken", failures={"nvmlDeviceGetHandleByIndex": UNKNOWN})
    flaky = h100("GPU-flaky", failures={"nvmlDeviceGetCudaComputeCapability": UNKNOWN})
    detector = NvidiaDetector(FakeNvml([tesla_t4(), broken, flaky]))
    with capture_logs() as logs:
        groups = detector.detect()
        detector.detect()
    assert [g.key for g in groups] == ["nvidia-tesla-t4", "nvidia-h100-80gb-hbm3"]
    h = groups[1]
    assert (h.compute_capability, h.family, h.memory_mib) == ("", "", 81559)
    warnings = [e for e in logs if e["log_level"] == "warning"]
    # one per distinct failure, and none repeated by the second detection
    assert len(warnings) == 3, warnings
    assert {w.get("function") for w in warnings} >= {
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetCudaComputeCapability",
    }


def test_a_lost_gpu_is_reported_unhealthy() -> None:
    gpu = tesla_t4("GPU-lost", failures={"nvmlDeviceGetTotalEccErrors": GPU_IS_LOST})
    (group,) = NvidiaDetector(FakeNvml([gpu])).detect()
    assert group.accelerators[0].unhealthy is True


def test_failing_system_queries_leave_versions_empty() -> None:
    nvml = FakeNvml([tesla_t4()], system_failures={"nvmlSystemGetCudaDriverVersion": UNKNOWN})
    groups = NvidiaDetector(nvml).detect()
    labels = device_labels(groups)
    assert P + "nvidia.runtime-version" not in labels
    assert labels[P + "nvidia.driver-version"] == "580.126.09"


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        (LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 was not found"),
        (DRIVER_NOT_LOADED, "kernel driver is not loaded"),
        (NOT_SUPPORTED, "nvidia-smi"),
    ],
)
def test_nvml_that_cannot_start_asks_for_the_fallback(code: int, hint: str) -> None:
    with pytest.raises(LibraryUnavailable, match=hint):
        NvidiaDetector(FakeNvml([tesla_t4()], init_error=code)).detect()


def test_nvml_that_cannot_count_asks_for_the_fallback_and_is_shut_down() -> None:
    nvml = FakeNvml([tesla_t4()], count_error=UNKNOWN)
    with pytest.raises(LibraryUnavailable, match="could not count"):
        NvidiaDetector(nvml).detect()
    assert nvml.initialised == 0
    assert nvml.calls.count("nvmlInit") == nvml.calls.count("nvmlShutdown") == 1


def test_every_detection_shuts_nvml_down() -> None:
    nvml = FakeNvml([tesla_t4(), a10g()])
    detector = NvidiaDetector(nvml)
    detector.detect()
    detector.sample()
    assert nvml.initialised == 0
    assert nvml.calls.count("nvmlInit") == 2


def test_samples_carry_live_readings() -> None:
    nvml = FakeNvml(
        [
            tesla_t4(utilization=85, memory_used_mib=1024, temperature=61, power_mw=33_500),
            a10g(failures={"nvmlDeviceGetPowerUsage": NOT_SUPPORTED}, ecc_uncorrected=1),
        ]
    )
    t4, a = NvidiaDetector(nvml).sample()
    assert (t4.model, t4.uuid, t4.index) == ("Tesla T4", "GPU-t4-0", 0)
    assert t4.utilization_percent == 85.0
    assert t4.memory_used_bytes == 1024 * 2**20
    assert t4.memory_total_bytes == 15360 * 2**20
    assert t4.temperature_celsius == 61.0
    assert t4.power_watts == 33.5
    assert t4.healthy is True
    assert a.power_watts is None
    assert a.healthy is False
