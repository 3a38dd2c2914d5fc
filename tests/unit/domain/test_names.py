"""Label-value sanitiser, NormalizeName and binary-SI formatting (docs/labels.md)."""

from __future__ import annotations

import pytest

from gpustack_operator.domain.names import format_binary_si, normalize_name, sanitize_label_value
from gpustack_operator.domain.validation import (
    is_valid_dns_label,
    is_valid_dns_subdomain,
    is_valid_label_key,
    is_valid_label_value,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Tesla T4", "Tesla-T4"),
        ("NVIDIA A10G", "NVIDIA-A10G"),
        ("580.126.09", "580.126.09"),
        ("  -_lead", "lead"),
        ("a  b", "a-b"),
        ("a..b__c", "a.b_c"),
        ("trailing.", "trailing"),
        ("Grüße GPU™", "Gre-GPU"),
        ("", ""),
        ("x" * 70, "x" * 63),
        ("x" * 62 + "-y", "x" * 62),
    ],
)
def test_sanitize_label_value(raw: str, expected: str) -> None:
    assert sanitize_label_value(raw) == expected
    assert is_valid_label_value(expected)


@pytest.mark.parametrize(
    ("name", "prefix", "max_len", "cpu", "expected"),
    [
        ("Tesla T4", "nvidia", 56, False, "tesla-t4"),
        ("NVIDIA A10G", "nvidia", 56, False, "a10g"),
        ("AMD EPYC 7763 64-Core Processor", "amd", 52, True, "epyc-7763-64-core-processor"),
        ("Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz", "intel", 57, True, "xeon-platinum-8358"),
        ("Kunpeng 920", "generic", 48, True, "kunpeng-920"),
        ("(TM)", "amd", 52, True, ""),
        ("AMDX", "amd", 52, False, "x"),
        ("abcdef", "", 4, False, "abcd"),
        ("abc-def", "", 4, False, "abc"),
        ("--a__b..c", "", 20, False, "a_b.c"),
        ("Grüße", "", 20, False, "gre"),
    ],
)
def test_normalize_name(name: str, prefix: str, max_len: int, cpu: bool, expected: str) -> None:
    assert normalize_name(name, prefix, max_len, cpu_name=cpu) == expected


def test_normalize_name_cpu_rules_only_for_cpu_names() -> None:
    assert normalize_name("X(TM) @ 3GHz", "", 40) == "xtm-3ghz"
    assert normalize_name("X(TM) @ 3GHz", "", 40, cpu_name=True) == "x"


@pytest.mark.parametrize(
    ("mib", "expected"),
    [
        (15360, "15Gi"),
        (81920, "80Gi"),
        (196608, "192Gi"),
        (23028, "22Gi"),
        (512, "512Mi"),
        (1536, "2Gi"),
        (1024 * 1024, "1Ti"),
    ],
)
def test_format_binary_si(mib: int, expected: str) -> None:
    assert format_binary_si(mib * 2**20) == expected


def test_format_binary_si_small_and_negative() -> None:
    assert format_binary_si(0) == "0"
    assert format_binary_si(1000) == "1000"
    assert format_binary_si(1024) == "1Ki"
    assert format_binary_si(-2 * 2**30) == "-2Gi"


def test_validity_predicates() -> None:
    assert is_valid_label_key("acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count")
    assert not is_valid_label_key("a/" + "x" * 64)
    assert not is_valid_label_key("Bad_Prefix/x")
    assert not is_valid_label_key("")
    assert is_valid_label_value("") and not is_valid_label_value("-a")
    assert is_valid_dns_subdomain("gpustack--amd-25-1-16c-32g-96g")
    assert not is_valid_dns_subdomain("a_b") and not is_valid_dns_subdomain("x" * 254)
    assert is_valid_dns_label("default") and not is_valid_dns_label("a.b")
