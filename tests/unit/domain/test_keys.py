"""The CPU node key gKey (docs/naming.md vectors)."""

from __future__ import annotations

import pytest

from gpustack_operator.domain.labels import GENERAL_KEY_MAX_LEN
from gpustack_operator.domain.node.keys import cpu_node_key
from gpustack_operator.domain.validation import is_valid_dns_label, is_valid_label_key

from .nodes import CPU_NAME, FAMILY, MODEL, VENDOR

AMD = {VENDOR: "AMD", FAMILY: "25", MODEL: "1"}
LINUX_AMD64 = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        ({}, {}, ""),
        (AMD, {}, "amd-25-1"),
        ({**AMD, **LINUX_AMD64}, {}, "amd-25-1-ln-x64"),
        (
            {**AMD, "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"},
            {},
            "amd-25-1-ln-a64",
        ),
        ({**AMD, "kubernetes.io/os": "js", "kubernetes.io/arch": "386"}, {}, "amd-25-1-js-386"),
        (
            {**AMD, **LINUX_AMD64},
            {CPU_NAME: "AMD EPYC 7763 64-Core Processor"},
            "amd-epyc-7763-64-core-processor-ln-x64",
        ),
        ({**AMD, **LINUX_AMD64}, {CPU_NAME: "@cpu.model.name"}, "amd-25-1-ln-x64"),
        (
            {VENDOR: "Intel"},
            {CPU_NAME: "Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz"},
            "intel-xeon-platinum-8358",
        ),
        (
            {VENDOR: "VendorUnknown", **LINUX_AMD64},
            {CPU_NAME: "Kunpeng 920"},
            "generic-kunpeng-920-ln-x64",
        ),
        ({VENDOR: "AMD", MODEL: "1"}, {}, ""),
        ({VENDOR: "AMD", FAMILY: "25"}, {}, ""),
        ({VENDOR: "AMD", **LINUX_AMD64}, {CPU_NAME: "(TM)"}, ""),
    ],
)
def test_spec_vectors(labels: dict[str, str], annotations: dict[str, str], expected: str) -> None:
    assert cpu_node_key(labels, annotations) == expected


def test_intel_family_model() -> None:
    assert cpu_node_key({VENDOR: "Intel", FAMILY: "6", MODEL: "143"}, {}) == "intel-6-143"


def test_missing_vendor_is_generic() -> None:
    assert cpu_node_key({FAMILY: "6", MODEL: "143"}, {}) == "generic-6-143"


def test_long_and_odd_names_stay_within_budget() -> None:
    labels = {
        VENDOR: "Some_Very.Long-VendorNameThatGoesOn",
        FAMILY: "x" * 63,
        MODEL: "Y" * 63,
        "kubernetes.io/os": "Plan9_Operating.System",
        "kubernetes.io/arch": "weird_ARCH.v2-extra-long",
    }
    for notes in ({}, {CPU_NAME: "Ünïcode " * 60}, {CPU_NAME: "CPU_" * 100}):
        key = cpu_node_key(labels, notes)
        assert key, notes
        assert len(key) <= GENERAL_KEY_MAX_LEN
        assert is_valid_label_key(f"general.feature.gpustack.ai/{key}.z-flavor")
        assert all(is_valid_dns_label(part) for part in key.split("-"))
        assert key.split("-")[0] == "someverylongvend"
