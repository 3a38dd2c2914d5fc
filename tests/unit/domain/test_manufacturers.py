"""Manufacturer registry and its GPUSTACK_* overrides (docs/configuration.md)."""

from __future__ import annotations

import pytest

from gpustack_operator.domain.manufacturers import KNOWN_MANUFACTURERS
from gpustack_operator.environment import (
    load_group_id_with_memory,
    load_manufacturers,
    load_pci_class_prefixes,
)


def test_defaults_match_spec_table() -> None:
    m = load_manufacturers({})
    assert tuple(m) == KNOWN_MANUFACTURERS == tuple(sorted(KNOWN_MANUFACTURERS))
    assert len(m) == 12
    # Known from vendor labels and allocatable only: no detector, no agent (docs/devices.md).
    assert [n for n, x in m.items() if not x.agent] == ["aws", "google", "habana"]
    rows = {n: (x.pci_vendor_id, x.resource_name, x.runtime_class) for n, x in m.items()}
    assert rows == {
        "amd": ("1002", "amd.com/gpu", "amd"),
        "aws": ("1d0f", "aws.amazon.com/neuron", None),
        "google": ("1ae0", "google.com/tpu", None),
        "habana": ("1da3", "habana.ai/gaudi", None),
        "ascend": ("19e5", "huawei.com/npu", "ascend"),
        "cambricon": ("cabc", "cambricon.com/mlu", "cambricon"),
        "hygon": ("1d94", "hygon.com/dcu", "hygon"),
        "iluvatar": ("1e3e", "iluvatar.com/gpu", "iluvatar"),
        "metax": ("9999", "metax-tech.com/gpu", "metax"),
        "mthreads": ("1ed5", "mthreads.com/gpu", "mthreads"),
        "nvidia": ("10de", "nvidia.com/gpu", "nvidia"),
        "thead": ("1ded", "alibabacloud.com/ppu", None),
    }
    assert m["nvidia"].credits_resource == "credits.gpustack.ai/nvidia"
    assert all(x.pci_class is None for x in m.values())


def test_overrides_apply() -> None:
    m = load_manufacturers(
        {
            "GPUSTACK_NVIDIA_PCI_VENDOR_ID": "0302_10DE",
            "GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME": "amd.com/xgpu",
            "gpustack_thead_acceleratable_runtime_name": "ppu",
            "GPUSTACK_METAX_PCI_VENDOR_ID": "",
        }
    )
    assert (m["nvidia"].pci_vendor_id, m["nvidia"].pci_class) == ("10de", "0302")
    assert m["amd"].resource_name == "amd.com/xgpu"
    assert m["thead"].runtime_class == "ppu"
    assert m["metax"].pci_vendor_id == "9999"


def test_os_environ_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_HYGON_PCI_VENDOR_ID", "abcd")
    monkeypatch.setenv("GPUSTACK_PCI_CLASS_PREFIXES", "03")
    assert load_manufacturers()["hygon"].pci_vendor_id == "abcd"
    assert load_pci_class_prefixes() == ("03",)


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("GPUSTACK_NVIDIA_PCI_VENDOR_ID", "10d"),
        ("GPUSTACK_NVIDIA_PCI_VENDOR_ID", "zz_10de"),
        ("GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME", "gpu"),
        ("GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME", "amd.com/a b"),
        ("GPUSTACK_AMD_ACCELERATABLE_RUNTIME_NAME", "Not_Valid"),
    ],
)
def test_bad_override_names_the_variable(var: str, value: str) -> None:
    with pytest.raises(ValueError, match=var):
        load_manufacturers({var: value})


def test_pci_class_prefixes() -> None:
    assert load_pci_class_prefixes({}) == ("02", "03", "0b", "12")
    assert load_pci_class_prefixes({"GPUSTACK_PCI_CLASS_PREFIXES": " 02,0B, ,02,06"}) == (
        "02",
        "0b",
        "06",
    )
    for bad in ("xx", "02,1234567", ",,"):
        with pytest.raises(ValueError, match="GPUSTACK_PCI_CLASS_PREFIXES"):
            load_pci_class_prefixes({"GPUSTACK_PCI_CLASS_PREFIXES": bad})


def test_group_id_with_memory_setting() -> None:
    assert load_group_id_with_memory({}) is False
    assert load_group_id_with_memory({"GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY": "true"}) is True
    assert load_group_id_with_memory({"GPUSTACK_DEVICES_DETECT_GROUP_ID_WITH_MEMORY": "1"})
    with pytest.raises(ValueError, match="GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY"):
        load_group_id_with_memory({"GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY": "maybe"})


def test_group_id_with_memory_reads_the_current_name_first_and_says_what_it_expects() -> None:
    both = {
        "GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY": "no",
        "GPUSTACK_DEVICES_DETECT_GROUP_ID_WITH_MEMORY": "yes",
    }
    assert load_group_id_with_memory(both) is False
    assert load_group_id_with_memory({"gpustack_devices_group_id_with_memory": " On "}) is True
    assert load_group_id_with_memory({"GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY": ""}) is False
    with pytest.raises(ValueError, match=r"expected a boolean .* \(got 'maybe'\)"):
        load_group_id_with_memory({"GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY": "maybe"})
