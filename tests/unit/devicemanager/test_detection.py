"""The per-manufacturer detection flow of docs/device-manager.md over fake sysfs and
fake libraries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gpustack_operator.devicemanager.detection import (
    DetectionConfig,
    DeviceDetection,
    detect_all,
    running_under_wsl,
)
from gpustack_operator.devicemanager.detectors.amd import AmdDetector
from gpustack_operator.devicemanager.detectors.base import Detector, LibraryUnavailable
from gpustack_operator.devicemanager.detectors.nvidia import NvidiaDetector
from gpustack_operator.devicemanager.detectors.sim import SimDetector
from gpustack_operator.domain.node.devices import DeviceGroup
from gpustack_operator.environment import load_manufacturers

from .fakes import (
    LIBRARY_NOT_FOUND,
    PCI_IDS_SAMPLE,
    FakeAmdGpu,
    FakeAmdSmi,
    FakeNvml,
    make_pci_device,
    tesla_t4,
)

P = "acceleratable.feature.gpustack.ai/"


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "pci"
    make_pci_device(root, "0000:3b:00.0", "10de", "1eb8", "030200")
    make_pci_device(root, "0000:af:00.0", "10de", "1eb8", "030200")
    make_pci_device(root, "0000:c1:00.0", "1002", "74a1", "038000")
    make_pci_device(root, "0000:81:00.0", "19e5", "d801", "120000")
    make_pci_device(root, "0000:00:1f.6", "8086", "1572", "020000")
    return root


class CountingDetector:
    """A library detector that records whether it was asked."""

    source = "fake"

    def __init__(self, manufacturer: str, error: Exception | None = None) -> None:
        self.manufacturer = manufacturer
        self.error = error
        self.calls = 0

    def detect(self) -> list[DeviceGroup]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return []


def config(
    sysfs: Path, *names: str, env: dict[str, str] | None = None, **kw: object
) -> DetectionConfig:
    return DetectionConfig.from_environment(names, pci_root=sysfs, env=env or {}, **kw)  # type: ignore[arg-type]


def test_vendor_libraries_pci_fallback_and_pci_only_vendors(sysfs: Path) -> None:
    nvml = FakeNvml([tesla_t4("GPU-0"), tesla_t4("GPU-1")])
    libraries: dict[str, Detector] = {
        "nvidia": NvidiaDetector(nvml),
        "amd": AmdDetector(FakeAmdSmi([FakeAmdGpu("AMD Instinct MI300X", 196592, uuid="a")])),
    }
    result = DeviceDetection(config(sysfs), library_detectors=libraries).detect()
    by_name = {r.manufacturer: r for r in result.reports}
    assert (by_name["nvidia"].source, by_name["nvidia"].devices) == ("nvml", 2)
    assert (by_name["amd"].source, by_name["amd"].devices) == ("amdsmi", 1)
    assert (by_name["ascend"].source, by_name["ascend"].pci_devices) == ("pci", 1)
    assert by_name["cambricon"].source == "none"
    assert [g.key for g in result.groups] == [
        "amd-instinct-mi300x",
        "ascend-19e5d801",
        "nvidia-tesla-t4",
    ]
    assert result.labels[P + "nvidia-tesla-t4.count"] == "2"
    assert result.labels["feature.gpustack.ai/acceleratable"] == "true"
    assert result.device_count == 4


def test_a_missing_library_falls_back_to_pci_with_one_warning(sysfs: Path, tmp_path: Path) -> None:
    ids = tmp_path / "pci.ids"
    ids.write_text(PCI_IDS_SAMPLE)
    nvml = FakeNvml([], init_error=LIBRARY_NOT_FOUND)
    detection = DeviceDetection(
        config(sysfs, "nvidia", pci_ids=ids),
        library_detectors={"nvidia": NvidiaDetector(nvml)},
    )
    with capture_logs() as logs:
        first = detection.detect()
        second = detection.detect()
    assert first == second
    (report,) = first.reports
    assert report.source == "pci"
    assert "libnvidia-ml.so.1 was not found" in report.note
    (group,) = first.groups
    assert (group.key, group.name, len(group.accelerators)) == ("nvidia-tesla-t4", "Tesla T4", 2)
    assert group.accelerators[0].id == "0000:3b:00.0"
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1
    assert warnings[0]["manufacturer"] == "nvidia"


def test_an_unexpected_library_error_also_falls_back(sysfs: Path) -> None:
    broken = CountingDetector("nvidia", RuntimeError("segfault-ish"))
    detection = DeviceDetection(config(sysfs, "nvidia"), library_detectors={"nvidia": broken})
    with capture_logs() as logs:
        result = detection.detect()
    assert result.reports[0].source == "pci"
    assert result.device_count == 2
    assert logs[0]["error_type"] == "RuntimeError"


def test_no_pci_device_means_the_library_is_not_asked(sysfs: Path, tmp_path: Path) -> None:
    lib = CountingDetector("nvidia")
    empty = tmp_path / "empty"
    result = DeviceDetection(config(empty, "nvidia"), library_detectors={"nvidia": lib}).detect()
    assert lib.calls == 0
    assert result.groups == ()
    assert result.labels == {}
    assert "no PCI device of vendor 10de" in result.reports[0].note


def test_no_pci_check_asks_the_library_anyway(tmp_path: Path) -> None:
    nvml = FakeNvml([tesla_t4()])
    result = DeviceDetection(
        config(tmp_path / "empty", "nvidia", no_pci_check=True),
        library_detectors={"nvidia": NvidiaDetector(nvml)},
    ).detect()
    assert [g.key for g in result.groups] == ["nvidia-tesla-t4"]
    assert result.reports[0].pci_devices == 0


def test_no_pci_check_and_no_library_finds_nothing(tmp_path: Path) -> None:
    lib = CountingDetector("nvidia", LibraryUnavailable("gone"))
    result = DeviceDetection(
        config(tmp_path / "empty", "nvidia", no_pci_check=True),
        library_detectors={"nvidia": lib},
    ).detect()
    assert lib.calls == 1
    assert result.groups == ()


def test_class_prefixes_and_vendor_overrides_come_from_the_environment(sysfs: Path) -> None:
    env = {"GPUSTACK_PCI_CLASS_PREFIXES": "12", "GPUSTACK_ASCEND_PCI_VENDOR_ID": "1200_8086"}
    result = detect_all(["nvidia", "ascend"], pci_root=sysfs, env=env)
    by_name = {r.manufacturer: r for r in result.reports}
    assert by_name["nvidia"].source == "none"  # T4s are class 03, not in "12"
    # ascend now scans vendor 8086: the Intel NIC is class 02, so still nothing
    assert by_name["ascend"].source == "none"
    assert "vendor 8086" in by_name["ascend"].note


def test_group_ids_with_memory_follow_the_environment(tmp_path: Path) -> None:
    cfg = config(
        tmp_path, "nvidia", env={"GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY": "true"}, no_pci_check=True
    )
    assert cfg.with_memory is True
    nvml = FakeNvml([tesla_t4()])
    detection = DeviceDetection(
        cfg, library_detectors={"nvidia": NvidiaDetector(nvml, with_memory=cfg.with_memory)}
    )
    assert [g.key for g in detection.detect().groups] == ["nvidia-tesla-t4-15g"]


def test_unknown_manufacturers_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown manufacturer\(s\) intel.*choose from amd"):
        config(tmp_path, "nvidia", "intel")


def test_sim_devices_replace_the_hardware(tmp_path: Path) -> None:
    annotation = json.dumps(
        [
            {"manufacturer": "nvidia", "name": "Tesla T4", "memoryMiB": 15360, "count": 2},
            {"manufacturer": "amd", "name": "AMD Instinct MI300X", "memoryMiB": 196608},
        ]
    )
    value: list[str | None] = [annotation]
    sim = SimDetector(lambda: value[0], load_manufacturers({}))
    detection = DeviceDetection(config(tmp_path, "nvidia"), sim=sim)
    first = detection.detect()
    assert [g.key for g in first.groups] == ["nvidia-tesla-t4"]  # amd not selected
    assert first.reports[0].source == "sim"
    assert detection.metrics_sources() == []
    value[0] = None
    second = detection.detect()
    assert second.groups == ()
    assert first.identity() != second.identity()


def test_identity_counts_cards_without_ids_separately(tmp_path: Path) -> None:
    root = tmp_path / "pci"
    make_pci_device(root, "0000:01:00.0", "cabc", "0001", "120000")
    make_pci_device(root, "0000:02:00.0", "cabc", "0001", "120000")
    result = detect_all(["cambricon"], pci_root=root, env={})
    assert result.identity() == (
        ("cambricon", "0000:01:00.0", False),
        ("cambricon", "0000:02:00.0", False),
    )


def test_the_document_leaves_unknown_values_out(sysfs: Path) -> None:
    doc = detect_all(["ascend"], pci_root=sysfs, env={}).to_document()
    assert doc["manufacturers"][0]["source"] == "pci"
    (group,) = doc["groups"]
    assert group == {
        "key": "ascend-19e5d801",
        "manufacturer": "ascend",
        "name": "19e5:d801",
        "accelerators": [{"id": "0000:81:00.0", "index": 0, "unhealthy": False}],
    }


def test_wsl_is_recognised_from_the_kernel_release(tmp_path: Path) -> None:
    release = tmp_path / "osrelease"
    release.write_text("5.15.167.4-microsoft-standard-WSL2\n")
    assert running_under_wsl(release) is True
    release.write_text("6.8.0-60-generic\n")
    assert running_under_wsl(release) is False
    assert running_under_wsl(tmp_path / "absent") is False


def test_only_libraries_that_answered_export_metrics(sysfs: Path, tmp_path: Path) -> None:
    nvidia = NvidiaDetector(FakeNvml([tesla_t4("GPU-0")]))
    amd = AmdDetector(FakeAmdSmi([]))
    detection = DeviceDetection(
        config(tmp_path / "empty", "nvidia", "amd"),
        library_detectors={"nvidia": nvidia, "amd": amd},
    )
    assert detection.metrics_sources() == []  # nothing detected yet
    detection.detect()
    assert detection.metrics_sources() == []  # no card of either vendor on the bus
    detection = DeviceDetection(
        config(sysfs, "nvidia", "amd"), library_detectors={"nvidia": nvidia, "amd": amd}
    )
    detection.detect()
    assert detection.metrics_sources() == [nvidia, amd]


def test_a_library_seeing_fewer_cards_than_the_bus_is_noted_once(sysfs: Path) -> None:
    nvml = FakeNvml([tesla_t4("GPU-0")])  # the bus has two T4s
    detection = DeviceDetection(
        config(sysfs, "nvidia"), library_detectors={"nvidia": NvidiaDetector(nvml)}
    )
    with capture_logs() as logs:
        first = detection.detect()
        detection.detect()
    assert first.device_count == 1
    assert [e["event"] for e in logs].count(
        "vendor library and PCI bus disagree on the number of devices; using the library"
    ) == 1
