"""Typed Kueue objects enforce Kueue's limits and render v1beta2 / v1beta1."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpustack_operator.domain.chain.kueue import (
    ClusterQueue,
    FlavorQuotas,
    KueueVersion,
    LocalQueue,
    Meta,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
)
from gpustack_operator.domain.quantities import (
    format_binary_quantity,
    format_decimal_quantity,
    is_canonical_quantity,
)

RES = ("cpu", "memory")


def flavor(name: str) -> FlavorQuotas:
    return FlavorQuotas(
        name=name,
        resources=(
            ResourceQuota(name="cpu", nominal_quota="16"),
            ResourceQuota(name="memory", nominal_quota="32Gi"),
        ),
    )


def group(n: int, prefix: str = "f") -> ResourceGroup:
    return ResourceGroup(
        covered_resources=RES, flavors=tuple(flavor(f"{prefix}{i}") for i in range(n))
    )


def test_canonical_quantities() -> None:
    assert format_binary_quantity(32 * 2**30) == "32Gi"
    assert format_binary_quantity(1024 * 2**30) == "1Ti"
    assert format_binary_quantity(0) == "0"
    assert format_decimal_quantity(16) == "16"
    assert format_decimal_quantity(2000) == "2k"
    for good in ("32Gi", "16", "1Ti", "2k", "0", "1536"):
        assert is_canonical_quantity(good), good
    for bad in ("1024Gi", "32.0Gi", "016", "1000k", "32gi", "500m", ""):
        assert not is_canonical_quantity(bad), bad
    with pytest.raises(ValidationError, match="canonical"):
        ResourceQuota(name="memory", nominal_quota="1024Gi")


def test_resource_flavor_limits() -> None:
    meta = Meta(name="gpustack--amd-25-1-16c-32g-96g")
    ResourceFlavor(metadata=meta, node_labels={f"k{i}": "v" for i in range(8)})
    with pytest.raises(ValidationError):
        ResourceFlavor(metadata=meta, node_labels={f"k{i}": "v" for i in range(9)})
    with pytest.raises(ValidationError, match="nodeLabel"):
        ResourceFlavor(metadata=meta, node_labels={"k": "x" * 64})


def test_meta_rejects_invalid_names_and_labels() -> None:
    for bad in ("Upper", "a_b", "x" * 254, ""):
        with pytest.raises(ValidationError):
            Meta(name=bad)
    with pytest.raises(ValidationError):
        Meta(name="ok", labels={"bad key": "v"})
    with pytest.raises(ValidationError):
        Meta(name="ok", annotations={"/": "v"})
    with pytest.raises(ValidationError):
        Meta(name="ok", namespace="a.b")


def test_group_limits() -> None:
    group(64)
    with pytest.raises(ValidationError):
        group(65)
    with pytest.raises(ValidationError, match="in order"):
        ResourceGroup(covered_resources=("memory", "cpu"), flavors=(flavor("f"),))
    meta = Meta(name="q")
    with pytest.raises(ValidationError, match="two resource groups"):
        ClusterQueue(metadata=meta, cohort="c", resource_groups=(group(1, "a"), group(1, "b")))
    groups = tuple(
        ResourceGroup(
            covered_resources=(f"r{i}",),
            flavors=(
                FlavorQuotas(name="f", resources=(ResourceQuota(name=f"r{i}", nominal_quota="1"),)),
            ),
        )
        for i in range(17)
    )
    ClusterQueue(metadata=meta, cohort="c", resource_groups=groups[:16])
    with pytest.raises(ValidationError):
        ClusterQueue(metadata=meta, cohort="c", resource_groups=groups)


def test_cluster_queue_versions() -> None:
    cq = ClusterQueue(metadata=Meta(name="q"), cohort="c", resource_groups=(group(1),))
    v2 = cq.manifest()
    assert v2["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert v2["spec"]["cohortName"] == "c" and "cohort" not in v2["spec"]
    v1 = cq.manifest(KueueVersion.V1BETA1)
    assert v1["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert v1["spec"]["cohort"] == "c" and "cohortName" not in v1["spec"]
    assert v2["spec"]["flavorFungibility"] == {
        "whenCanBorrow": "TryNextFlavor",
        "whenCanPreempt": "MayStopSearch",
    }
    assert v2["spec"]["preemption"] == {
        "reclaimWithinCohort": "Never",
        "borrowWithinCohort": {"policy": "Never"},
        "withinClusterQueue": "LowerPriority",
    }
    assert v2["spec"]["namespaceSelector"] == {}
    assert "queueingStrategy" not in v2["spec"] and "stopPolicy" not in v2["spec"]


def test_local_queue_needs_namespace() -> None:
    with pytest.raises(ValidationError, match="namespace"):
        LocalQueue(metadata=Meta(name="lq"), cluster_queue="q")
    lq = LocalQueue(metadata=Meta(name="lq", namespace="default"), cluster_queue="q")
    assert lq.manifest()["spec"] == {"clusterQueue": "q"}
