"""Profile names and LocalQueue names (docs/naming.md vectors)."""

from __future__ import annotations

import re

import pytest

from gpustack_operator.domain.profiles import (
    NodeProfile,
    format_node_profile,
    local_queue_name,
    parse_node_profile,
)


@pytest.mark.parametrize(
    ("gkey", "akey", "spec", "expected"),
    [
        ("amd-25-1", "", "16c-32g-96g", "gpustack--amd-25-1-16c-32g-96g"),
        ("amd-25-1", "", "1c-2g", "gpustack--amd-25-1-1c-2g"),
        (
            "amd-25-1",
            "nvidia-tesla-t4",
            "4c-16g-96g-1d",
            "gpustack--amd-25-1-4c-16g-96g--nvidia-tesla-t4-1d",
        ),
        (
            "amd-25-1",
            "nvidia-a10g",
            "48c-188g-196g-4d-8s",
            "gpustack--amd-25-1-48c-188g-196g--nvidia-a10g-4d-8s",
        ),
        (
            "amd-25-1",
            "nvidia-a10g",
            "12c-47g-1d-8s",
            "gpustack--amd-25-1-12c-47g--nvidia-a10g-1d-8s",
        ),
        ("generic", "amd-mi300x", "16c-64g-1d", "gpustack--generic-16c-64g--amd-mi300x-1d"),
        ("amd-25-1", "nvidia-t4", "16c-32g", "gpustack--amd-25-1-16c-32g"),
    ],
)
def test_format(gkey: str, akey: str, spec: str, expected: str) -> None:
    assert format_node_profile(gkey, akey, spec) == expected


def test_hybrid_node_vectors() -> None:
    """docs/naming.md: T4x1 + MI300Xx2 on one 32-CPU/128Gi/200Gi node."""
    assert (
        format_node_profile("amd-25-1", "nvidia-tesla-t4", "32c-128g-200g-1d")
        == "gpustack--amd-25-1-32c-128g-200g--nvidia-tesla-t4-1d"
    )
    assert (
        format_node_profile("amd-25-1", "nvidia-tesla-t4", "32c-128g-1d")
        == "gpustack--amd-25-1-32c-128g--nvidia-tesla-t4-1d"
    )
    assert (
        format_node_profile("amd-25-1", "amd-mi300x", "32c-128g-200g-2d")
        == "gpustack--amd-25-1-32c-128g-200g--amd-mi300x-2d"
    )
    assert (
        format_node_profile("amd-25-1", "amd-mi300x", "16c-64g-1d")
        == "gpustack--amd-25-1-16c-64g--amd-mi300x-1d"
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "gpustack--amd-25-1-16c-32g-88g",
            NodeProfile(gkey="amd-25-1", cpu=16, ram=32, storage=88),
        ),
        ("gpustack--generic-1c-2g", NodeProfile(gkey="generic", cpu=1, ram=2)),
        (
            "gpustack--amd-25-1-4c-16g-88g--nvidia-tesla-t4-1d",
            NodeProfile(
                gkey="amd-25-1", akey="nvidia-tesla-t4", cpu=4, ram=16, storage=88, accelerators=1
            ),
        ),
        (
            "gpustack--amd-25-1-12c-48g--nvidia-a10g-1d-8s",
            NodeProfile(
                gkey="amd-25-1", akey="nvidia-a10g", cpu=12, ram=48, accelerators=1, sliced=8
            ),
        ),
    ],
)
def test_parse(name: str, expected: NodeProfile) -> None:
    assert parse_node_profile(name) == expected


def test_parsed_manufacturer() -> None:
    general = parse_node_profile("gpustack--amd-25-1-16c-32g-88g")
    device = parse_node_profile("gpustack--amd-25-1-12c-48g--nvidia-a10g-1d-8s")
    assert general is not None and device is not None
    assert (general.acceleratable, general.manufacturer) == (False, "amd")
    assert (device.acceleratable, device.manufacturer) == (True, "nvidia")


@pytest.mark.parametrize(
    "name",
    [
        "",
        "gpustack-general-16c-32g-96g",
        "general-16c-32g-96g",
        "foo--bar-16c-32g-96g",
        "gpustack--generic-4c-16g--nvidia-t4-1d--x-1d",
        "gpustack--16c-32g",
        "gpustack--generic-4c-16g--1d",
        "gpustack--generic-32g",
        "gpustack--generic-16-32g-96g",
        "gpustack--generic-16c-32-96g",
        "gpustack--generic-c-32g-96g",
        "gpustack--generic-16c-g-96g",
        "gpustack--generic-xc-32g-96g",
        "gpustack--generic-16c-xg-96g",
        "gpustack--generic-16c-32g-xg",
        "gpustack--generic-16c-32g--nvidia-t4",
        "gpustack--generic-16c-32g--nvidia-t4-d",
        "gpustack--generic-16c-32g--nvidia-t4-xd",
        "gpustack--generic-4c-16g-8s",
        "gpustack--generic-4c-16g--nvidia-t4-1d-s",
        "gpustack--generic-4c-16g--nvidia-t4-1d-xs",
        "gpustack--generic-\u0661c-2g",  # a non-ASCII digit
    ],
)
def test_parse_rejects(name: str) -> None:
    assert parse_node_profile(name) is None


def _reference_fnv1a64(data: bytes) -> int:
    h = 14695981039346656037
    for b in data:
        h ^= b
        h = (h * 1099511628211) % (1 << 64)
    return h


@pytest.mark.parametrize(
    "cq",
    ["", "a", "gpustack--amd-25-1-1c-2g", "gpustack--amd-25-1-4c-16g--nvidia-tesla-t4-1d", "ü"],
)
def test_local_queue_name(cq: str) -> None:
    name = local_queue_name(cq)
    assert re.fullmatch(r"gpustack-fnv64-[0-9a-f]{16}", name)
    assert len(name) == 31
    assert int(name.rsplit("-", 1)[1], 16) == _reference_fnv1a64(cq.encode())


def test_local_queue_name_known_values() -> None:
    # Published FNV-1a 64 test vectors: "" and "a".
    assert local_queue_name("") == "gpustack-fnv64-cbf29ce484222325"
    assert local_queue_name("a") == "gpustack-fnv64-af63dc4c8601ec8c"
