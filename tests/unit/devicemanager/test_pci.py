"""PCI sysfs scanning and the pci.ids database, on a fake sysfs tree under tmp_path."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gpustack_operator.devicemanager.detectors.pci import (
    PciDetector,
    PciDevice,
    product_name,
    scan_pci_devices,
    select_devices,
)
from gpustack_operator.devicemanager.pciids import (
    PciIds,
    find_pci_ids,
    load_pci_ids,
    parse_pci_ids,
)
from gpustack_operator.domain.node.devices import device_labels

from .fakes import PCI_IDS_SAMPLE, make_pci_device

PREFIXES = ("02", "03", "0b", "12")
P = "acceleratable.feature.gpustack.ai/"


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """A bus with NVIDIA, AMD, Huawei, Intel and virtio functions in and out of the classes."""
    root = tmp_path / "sys" / "bus" / "pci" / "devices"
    make_pci_device(root, "0000:3b:00.0", "10de", "1eb8", "030200")  # T4, 3D controller
    make_pci_device(root, "0000:3b:00.1", "10de", "0fb9", "040300")  # NVIDIA HD audio: class 04
    make_pci_device(root, "0000:af:00.0", "10de", "1eb8", "030200")  # second T4
    make_pci_device(root, "0000:d8:00.0", "10de", "2237", "030000")  # A10G, VGA controller
    make_pci_device(root, "0000:c1:00.0", "1002", "74a1", "038000")  # MI300X, display other
    make_pci_device(root, "0000:81:00.0", "19e5", "d801", "120000")  # Ascend, accelerator class
    make_pci_device(root, "0000:82:00.0", "19e5", "a222", "020000")  # Huawei NIC, class 02
    make_pci_device(root, "0000:00:1f.6", "8086", "1572", "020000")  # Intel NIC
    make_pci_device(root, "0000:00:00.0", "8086", "0d57", "060000")  # host bridge
    broken = root / "0000:ff:00.0"  # a function whose files cannot be parsed
    broken.mkdir()
    (broken / "vendor").write_text("garbage\n")
    return root


def test_scan_reads_every_function_sorted_by_address(sysfs: Path) -> None:
    devices = scan_pci_devices(sysfs)
    assert [d.address for d in devices][:2] == ["0000:00:00.0", "0000:00:1f.6"]
    assert PciDevice("0000:3b:00.0", "10de", "1eb8", "030200") in devices
    assert all(d.address != "0000:ff:00.0" for d in devices)


def test_a_missing_sysfs_is_an_empty_bus(tmp_path: Path) -> None:
    assert scan_pci_devices(tmp_path / "absent") == []


def test_selection_matches_vendor_and_class_prefix(sysfs: Path) -> None:
    bus = scan_pci_devices(sysfs)
    nvidia = select_devices(bus, "10de", PREFIXES)
    assert [d.address for d in nvidia] == ["0000:3b:00.0", "0000:af:00.0", "0000:d8:00.0"]
    assert [d.address for d in select_devices(bus, "0x1002", PREFIXES)] == ["0000:c1:00.0"]
    # the Huawei NIC is class 02, which the default prefixes include (docs/configuration.md)
    assert len(select_devices(bus, "19e5", PREFIXES)) == 2
    assert [d.address for d in select_devices(bus, "19e5", ("12",))] == ["0000:81:00.0"]
    assert [d.address for d in select_devices(bus, "10de", ("0302",))] == [
        "0000:3b:00.0",
        "0000:af:00.0",
    ]
    assert select_devices(bus, "cabc", PREFIXES) == []


def test_without_pci_ids_the_name_is_the_pci_id_pair(sysfs: Path) -> None:
    detector = PciDetector("nvidia", "10de", PREFIXES, root=sysfs)
    groups = detector.detect()
    assert [(g.name, len(g.accelerators)) for g in groups] == [("10de:1eb8", 2), ("10de:2237", 1)]
    t4 = groups[0]
    # PCI knows presence and count only: nothing else is invented
    assert (t4.memory_mib, t4.cores, t4.driver_version, t4.family) == (0, 0, "", "")
    assert [(a.id, a.index) for a in t4.accelerators] == [("0000:3b:00.0", 0), ("0000:af:00.0", 1)]
    labels = device_labels(groups)
    assert labels[P + "nvidia-10de1eb8.count"] == "2"
    assert P + "nvidia.driver-version" not in labels
    assert P + "nvidia-10de1eb8.family" not in labels


def test_with_pci_ids_the_marketing_name_is_used(sysfs: Path, tmp_path: Path) -> None:
    ids_file = tmp_path / "pci.ids"
    ids_file.write_text(PCI_IDS_SAMPLE)
    database = load_pci_ids(ids_file, {"10de", "1002", "19e5"})
    nvidia = PciDetector("nvidia", "10de", PREFIXES, root=sysfs, pci_ids=database).detect()
    assert [(g.key, g.name) for g in nvidia] == [
        ("nvidia-tesla-t4", "Tesla T4"),
        ("nvidia-a10g", "A10G"),
    ]
    amd = PciDetector("amd", "1002", PREFIXES, root=sysfs, pci_ids=database).detect()
    assert [g.key for g in amd] == ["amd-instinct-mi300x"]
    ascend = PciDetector("ascend", "19e5", ("12",), root=sysfs, pci_ids=database).detect()
    assert [(g.key, g.name) for g in ascend] == [("ascend-910", "Ascend 910")]


def test_pci_ids_parsing_keeps_only_the_wanted_vendors() -> None:
    database = parse_pci_ids(PCI_IDS_SAMPLE.splitlines(), {"10DE"})
    assert database.vendor_name("0x10de") == "NVIDIA Corporation"
    assert database.device_name("10de", "1EB8") == "TU104GL [Tesla T4]"
    assert database.vendor_name("8086") is None
    assert database.device_name("1002", "74a1") is None


def test_pci_ids_parsing_ignores_subsystems_and_the_class_section() -> None:
    database = parse_pci_ids(PCI_IDS_SAMPLE.splitlines())
    assert database.device_name("1002", "74a1") == "Aqua Vanjaram [Instinct MI300X]"
    assert database.device_name("8086", "1572") == "Ethernet Controller X710 for 10GbE SFP+"
    assert ("03", "02") not in database.devices
    assert database.vendor_name("C 03") is None


def test_a_name_without_brackets_is_used_whole() -> None:
    device = PciDevice("x", "19e5", "d801", "120000")
    database = PciIds(devices={("19e5", "d801"): "Ascend 910"})
    assert product_name(device, database) == "Ascend 910"


def test_gzipped_pci_ids_are_read(tmp_path: Path) -> None:
    path = tmp_path / "pci.ids.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(PCI_IDS_SAMPLE)
    assert load_pci_ids(path, {"10de"}).device_name("10de", "2237") == "GA102GL [A10G]"


def test_an_unreadable_database_means_unknown_names(tmp_path: Path) -> None:
    path = tmp_path / "pci.ids.gz"
    path.write_text("not gzip")
    with capture_logs() as logs:
        database = load_pci_ids(path, {"10de"})
    assert database.devices == {}
    assert logs[0]["log_level"] == "warning"


def test_the_database_is_found_from_flag_env_or_standard_places(tmp_path: Path) -> None:
    first = tmp_path / "a" / "pci.ids"
    second = tmp_path / "b" / "pci.ids"
    second.parent.mkdir()
    second.write_text("")
    assert find_pci_ids(None, {}, [first, second]) == second
    assert find_pci_ids(None, {}, [first]) is None
    assert find_pci_ids(None, {"GPUSTACK_PCI_IDS": str(second)}, []) == second
    assert find_pci_ids(second, {"GPUSTACK_PCI_IDS": str(first)}, []) == second
    with capture_logs() as logs:
        assert find_pci_ids(first, {}, [second]) is None
    assert "pci.ids file not found" in logs[0]["event"]
