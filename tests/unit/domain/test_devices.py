"""Device groups, group IDs and device-manager labels (docs/device-manager.md)."""

from __future__ import annotations

import json

import pytest

from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.node.devices import (
    Accelerator,
    DetectedDevice,
    DeviceGroup,
    device_group_id,
    device_labels,
    group_devices,
)
from gpustack_operator.domain.node.simdevices import parse_sim_devices, sim_card_counts
from gpustack_operator.domain.validation import is_valid_label_key, is_valid_label_value

P = "acceleratable.feature.gpustack.ai/"


@pytest.mark.parametrize(
    ("mfr", "name", "mib", "with_memory", "expected"),
    [
        ("nvidia", "Tesla T4", 15360, False, "tesla-t4"),
        ("nvidia", "NVIDIA A10G", 23028, False, "a10g"),
        ("nvidia", "Tesla T4", 15360, True, "tesla-t4-15g"),
        ("nvidia", "Tesla T4", 0, True, "tesla-t4-0g"),
        ("nvidia", "Tesla T4", 512, True, "tesla-t4-1g"),
        ("amd", "AMD Instinct MI300X", 196608, True, "instinct-mi300x-192g"),
        ("nvidia", "NVIDIA", 1, False, "unknown"),
        ("nvidia", "GeForce_RTX 4090.D", 1, False, "geforce-rtx-4090-d"),
    ],
)
def test_device_group_id(mfr: str, name: str, mib: int, with_memory: bool, expected: str) -> None:
    assert device_group_id(mfr, name, mib, with_memory=with_memory) == expected


def test_device_group_id_respects_label_key_budget() -> None:
    for with_memory in (False, True):
        gid = device_group_id("cambricon", "X" * 300, 2**60, with_memory=with_memory)
        assert is_valid_label_key(f"{P}cambricon-{gid}.sliced.partitions")


def test_group_devices_groups_by_name_and_memory_in_first_seen_order() -> None:
    cards = [
        DetectedDevice(name="Tesla T4", memory_mib=15360, uuid="a", index=0, driver_version="1"),
        DetectedDevice(name="NVIDIA A10G", memory_mib=23028, uuid="b", index=1),
        DetectedDevice(name="Tesla T4", memory_mib=15360, uuid="c", index=2, unhealthy=True),
    ]
    groups = group_devices("nvidia", cards)
    assert [g.id for g in groups] == ["tesla-t4", "a10g"]
    assert groups[0].accelerators == (
        Accelerator(id="a", index=0),
        Accelerator(id="c", index=2, unhealthy=True),
    )
    assert groups[0].driver_version == "1"
    assert group_devices("nvidia", []) == []


def test_device_labels_t4() -> None:
    group = DeviceGroup(
        id="tesla-t4",
        manufacturer="nvidia",
        name="Tesla T4",
        memory_mib=15360,
        cores=2560,
        driver_version="580.126.09",
        runtime_version="13.0",
        compute_capability="7.5",
        family="Turing",
        accelerators=(Accelerator(id="u0", index=0),),
    )
    assert device_labels([group]) == {
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


def test_device_labels_omit_empty_and_skip_groups_without_cards() -> None:
    empty = DeviceGroup(id="x", manufacturer="amd", name="X")
    assert device_labels([]) == {}
    assert device_labels([empty]) == {}
    bare = DeviceGroup(
        id="mi300x",
        manufacturer="amd",
        name="MI300X",
        memory_mib=196608,
        accelerators=(Accelerator(id="", index=0), Accelerator(id="", index=1)),
    )
    labels = device_labels([empty, bare])
    assert labels[P + "amd-mi300x.memory"] == "192Gi"
    assert labels[P + "amd-mi300x.count"] == "2"
    assert labels[P + "amd-mi300x.cores"] == "0"
    assert P + "amd.driver-version" not in labels
    assert P + "amd-mi300x.family" not in labels


def test_device_labels_same_key_counts_add_up() -> None:
    a = DeviceGroup(
        id="a100",
        manufacturer="nvidia",
        name="A100",
        memory_mib=40960,
        accelerators=(Accelerator(id="1", index=0),),
    )
    b = DeviceGroup(
        id="a100",
        manufacturer="nvidia",
        name="A100",
        memory_mib=81920,
        accelerators=(Accelerator(id="2", index=1), Accelerator(id="3", index=2)),
    )
    labels = device_labels([a, b])
    assert labels[P + "nvidia-a100.count"] == "3"
    assert labels[P + "nvidia-a100.memory"] == "40Gi"


def test_sim_devices_parse_and_label() -> None:
    value = json.dumps(
        [
            {"manufacturer": "nvidia", "name": "Tesla T4", "memoryMiB": 15360, "count": 2},
            {"manufacturer": "amd", "name": "MI300X", "memoryMiB": 196608, "cores": 304},
        ]
    )
    groups = parse_sim_devices(value, default_manufacturers())
    assert [(g.key, len(g.accelerators)) for g in groups] == [
        ("nvidia-tesla-t4", 2),
        ("amd-mi300x", 1),
    ]
    uuids = [a.id for g in groups for a in g.accelerators]
    assert len(set(uuids)) == 3
    assert parse_sim_devices(value, default_manufacturers()) == groups
    assert sim_card_counts(groups) == {"nvidia": 2, "amd": 1}
    labels = device_labels(groups)
    assert labels[P + "amd-mi300x.cores"] == "304"
    assert all(is_valid_label_key(k) and is_valid_label_value(v) for k, v in labels.items())


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("not json", "not valid JSON"),
        ('{"a": 1}', "JSON list"),
        ('[{"manufacturer": "acme", "name": "X", "memoryMiB": 1}]', "unknown manufacturer"),
        ('[{"manufacturer": "nvidia", "memoryMiB": 1}]', r"\[0\].*name"),
        ('[{"manufacturer": "nvidia", "name": "X"}]', "memoryMiB"),
        ('[{"manufacturer": "nvidia", "name": "X", "memoryMiB": 1, "count": 0}]', "count"),
        ('[{"manufacturer": "nvidia", "name": "X", "memoryMiB": 1, "memoryMib": 1}]', "memoryMib"),
    ],
)
def test_sim_devices_errors(value: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_sim_devices(value, default_manufacturers())
