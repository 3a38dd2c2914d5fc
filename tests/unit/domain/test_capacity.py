"""Capacity labels: the docs/naming.md unit-test vectors (general and accelerated views)."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.node.capacity import capacity_labels, worker_capacity_labels

from .nodes import A, G, a10g, make_node, t4

MFRS = default_manufacturers()
GK = G + "amd-25-1"


def general(labels: dict[str, str], gkey: str = "amd-25-1") -> tuple[str, ...] | None:
    p = G + gkey
    if p not in labels:
        return None
    return tuple(labels[p + s] for s in (".cpu", ".ram", ".storage", ".z-flavor", ".z-queue"))


def device(labels: dict[str, str], akey: str) -> tuple[str, ...] | None:
    q = A + akey
    if q + ".z-flavor" not in labels:
        return None
    return tuple(
        labels[q + s] for s in (".cpu", ".ram", ".storage", ".z-flavor", ".z-queue", ".z-cohort")
    )


def raw(node: dict[str, Any]) -> dict[str, str]:
    return capacity_labels(node, MFRS)


def test_general_only() -> None:
    labels = raw(make_node(cpu="16", memory="31Gi", storage="97Gi"))
    assert general(labels) == ("16", "32Gi", "96Gi", "16c-32g-96g", "1c-2g")
    assert labels[GK + ".z-cohort"] == "1c-2g"
    assert labels[G + "amd"] == "true" and labels[GK] == "true"
    assert labels["gpustack.ai/managed"] == "true"


@pytest.mark.parametrize(
    ("cpu", "devices", "gen", "dev"),
    [
        (
            "4",
            t4(1),
            ("4", "16Gi", "96Gi", "4c-16g-96g", "1c-4g"),
            ("4", "16Gi", "96Gi", "4c-16g-96g-1d", "4c-16g-1d", "4c-16g-1d"),
        ),
        (
            "8",
            t4(1),
            ("8", "32Gi", "96Gi", "8c-32g-96g", "1c-4g"),
            ("8", "32Gi", "96Gi", "8c-32g-96g-1d", "8c-32g-1d", "8c-32g-1d"),
        ),
        (
            "8",
            t4(2),
            ("8", "32Gi", "96Gi", "8c-32g-96g", "1c-4g"),
            ("8", "32Gi", "96Gi", "8c-32g-96g-2d", "4c-16g-1d", "4c-16g-1d"),
        ),
    ],
)
def test_t4_vectors(
    cpu: str, devices: dict[str, str], gen: tuple[str, ...], dev: tuple[str, ...]
) -> None:
    memory = "15Gi" if cpu == "4" else "31Gi"
    labels = raw(make_node(cpu=cpu, memory=memory, storage="97Gi", labels=devices))
    assert general(labels) == gen
    assert device(labels, "nvidia-tesla-t4") == dev


def test_a10g_vectors_and_slicing() -> None:
    base = {"cpu": "48", "memory": "188Gi", "storage": "196Gi"}
    labels = raw(make_node(**base, labels=a10g(4)))
    assert general(labels) == ("48", "188Gi", "196Gi", "48c-188g-196g", "1c-3g")
    assert device(labels, "nvidia-a10g") == (
        "48",
        "188Gi",
        "196Gi",
        "48c-188g-196g-4d",
        "12c-47g-1d",
        "12c-47g-1d",
    )
    sliced = raw(make_node(**base, labels=a10g(4, **{A + "nvidia-a10g.sliced.partitions": "8"})))
    assert general(sliced) == general(labels)
    assert device(sliced, "nvidia-a10g") == (
        "48",
        "188Gi",
        "196Gi",
        "48c-188g-196g-4d-8s",
        "12c-47g-1d-8s",
        "12c-47g-1d",
    )
    for bad in ("0", "-1", "x", "1.5", ""):
        extra = {A + "nvidia-a10g.sliced.partitions": bad}
        assert device(raw(make_node(**base, labels=a10g(4, **extra))), "nvidia-a10g") == device(
            labels, "nvidia-a10g"
        )


def test_no_cpu_info_gives_only_managed() -> None:
    labels = raw(make_node(cpu="16", memory="31Gi", storage="97Gi", amd=False))
    assert labels == {"gpustack.ai/managed": "true"}


def test_intel_key() -> None:
    node = make_node(
        cpu="16",
        memory="31Gi",
        storage="97Gi",
        amd=False,
        labels={
            "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
            "feature.node.kubernetes.io/cpu-model.family": "6",
            "feature.node.kubernetes.io/cpu-model.id": "143",
        },
    )
    assert general(raw(node), "intel-6-143") == ("16", "32Gi", "96Gi", "16c-32g-96g", "1c-2g")


def test_existing_labels_win() -> None:
    node = make_node(
        cpu="16",
        memory="31Gi",
        storage="97Gi",
        labels={GK + ".cpu": "8", GK + ".ram": "16Gi", GK + ".storage": "50Gi"},
    )
    assert general(raw(node)) == ("8", "16Gi", "50Gi", "8c-16g-50g", "1c-2g")


def test_empty_capacity() -> None:
    assert general(raw(make_node())) == ("1", "1Gi", "15Gi", "1c-1g-15g", "1c-1g")


def test_zero_storage() -> None:
    labels = raw(make_node(cpu="16", memory="31Gi", storage="0"))
    assert general(labels) == ("16", "32Gi", "240Gi", "16c-32g-240g", "1c-2g")
    labels = raw(make_node(cpu="8", memory="31Gi", storage="0", labels=t4(2)))
    assert general(labels) == ("8", "32Gi", "120Gi", "8c-32g-120g", "1c-4g")
    assert device(labels, "nvidia-tesla-t4")[:5] == (  # type: ignore[index]
        "8",
        "32Gi",
        "30Gi",
        "8c-32g-30g-2d",
        "4c-16g-1d",
    )


def test_device_key_without_count_is_skipped() -> None:
    devices = t4(1)
    del devices[A + "nvidia-tesla-t4.count"]
    labels = raw(make_node(cpu="8", memory="31Gi", storage="97Gi", labels=devices))
    assert general(labels) is not None
    assert not any(k.startswith(A) for k in labels)


def test_unknown_manufacturer_and_non_true_marker_are_skipped() -> None:
    labels = {
        A + "acme-x1": "true",
        A + "acme-x1.count": "2",
        A + "nvidia-t4": "false",
        A + "nvidia-t4.count": "2",
    }
    result = raw(make_node(cpu="8", memory="31Gi", storage="97Gi", labels=labels))
    assert not any(k.startswith(A) for k in result)


def test_managed_false_is_echoed() -> None:
    node = make_node(
        cpu="16", memory="31Gi", storage="97Gi", labels={"gpustack.ai/managed": "false"}
    )
    labels = raw(node)
    assert labels["gpustack.ai/managed"] == "false"
    assert general(labels) == ("16", "32Gi", "96Gi", "16c-32g-96g", "1c-2g")


def over(node: dict[str, Any], per_cpu: int = 2) -> dict[str, str]:
    return capacity_labels(node, MFRS, ram_gi_per_cpu=per_cpu)


def test_override_vectors() -> None:
    assert general(over(make_node(cpu="16", memory="0", storage="97Gi"))) == (
        "16",
        "32Gi",
        "96Gi",
        "16c-32g-96g",
        "1c-2g",
    )
    assert general(over(make_node(cpu="16", memory="64Gi", storage="97Gi")))[:2] == (  # type: ignore[index]
        "16",
        "32Gi",
    )
    labelled = make_node(cpu="16", memory="64Gi", storage="97Gi", labels={GK + ".ram": "48Gi"})
    assert general(over(labelled)) == ("16", "48Gi", "96Gi", "16c-48g-96g", "1c-3g")
    for per_cpu in (0, -4):
        assert general(over(make_node(cpu="16", memory="31Gi", storage="97Gi"), per_cpu))[1] == (  # type: ignore[index]
            "32Gi"
        )
    assert general(over(make_node(cpu="1", memory="0", storage="0"))) == (
        "1",
        "2Gi",
        "15Gi",
        "1c-2g-15g",
        "1c-2g",
    )


def test_override_with_devices() -> None:
    labels = over(make_node(cpu="8", memory="0", storage="97Gi", labels=t4(2)))
    assert general(labels) == ("8", "16Gi", "96Gi", "8c-16g-96g", "1c-2g")
    assert device(labels, "nvidia-tesla-t4")[:5] == (  # type: ignore[index]
        "8",
        "2Gi",
        "96Gi",
        "8c-2g-96g-2d",
        "4c-1g-1d",
    )
    labels = over(make_node(cpu="8", memory="64Gi", storage="97Gi", labels=t4(2)))
    assert general(labels)[1:] == ("16Gi", "96Gi", "8c-16g-96g", "1c-2g")  # type: ignore[index]
    assert device(labels, "nvidia-tesla-t4")[:5] == (  # type: ignore[index]
        "8",
        "64Gi",
        "96Gi",
        "8c-64g-96g-2d",
        "4c-32g-1d",
    )


def test_worker_uses_override_two() -> None:
    node = make_node(cpu="16", memory="128Gi", storage="97Gi")
    assert general(worker_capacity_labels(node, MFRS))[1] == "32Gi"  # type: ignore[index]


def test_hybrid_node() -> None:
    mi300x = {A + "amd": "true", A + "amd-mi300x": "true", A + "amd-mi300x.count": "2"}
    labels = raw(make_node(cpu="32", memory="128Gi", storage="200Gi", labels={**t4(1), **mi300x}))
    assert labels[A + "nvidia-tesla-t4.z-flavor"] == "32c-128g-200g-1d"
    assert labels[A + "nvidia-tesla-t4.z-queue"] == "32c-128g-1d"
    assert labels[A + "amd-mi300x.z-flavor"] == "32c-128g-200g-2d"
    assert labels[A + "amd-mi300x.z-cohort"] == "16c-64g-1d"


def test_published_labels_are_a_fixed_point() -> None:
    """Feeding the worker its own output changes nothing (odd fallbacks included)."""
    for node in (
        make_node(cpu="1", memory="0", storage="0"),
        make_node(cpu="3", memory="7Gi", storage="0", labels=t4(1)),
        make_node(cpu="500m", memory="1e3", storage="1.5Gi", labels=t4(3)),
    ):
        first = worker_capacity_labels(node, MFRS)
        node["metadata"]["labels"].update(first)
        assert worker_capacity_labels(node, MFRS) == first


def test_malformed_quantities_count_as_absent() -> None:
    node = make_node(cpu="lots", memory="12Q", storage="-5Gi", labels={GK + ".cpu": "x"})
    assert general(raw(node)) == ("1", "1Gi", "15Gi", "1c-1g-15g", "1c-1g")
    node = make_node(cpu="1e30", memory="1e30", storage="1e30")
    labels = raw(node)
    assert len(labels[GK + ".z-flavor"]) <= 63
