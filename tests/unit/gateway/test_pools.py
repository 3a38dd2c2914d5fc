"""Pool entries from ClusterQueues (pure)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.commands.plan import read_nodes_file
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.gateway.pools import pool_entry, sum_quantities

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster.yaml"


@functools.cache
def _queues(version: KueueVersion) -> dict[str, dict[str, Any]]:
    nodes, _ = read_nodes_file(EXAMPLE)
    state = plan_state(
        nodes,
        ["default"],
        ChainPolicy(manufacturers=default_manufacturers(), kueue_version=version),
    )
    return {q["metadata"]["name"]: q for q in state.cluster_queues}


def test_a_sliced_device_queue() -> None:
    name = "gpustack--amd-25-1-ln-x64-12c-47g--nvidia-a10g-1d-8s"
    pool = pool_entry("east", _queues(KueueVersion.V1BETA2)[name])
    assert pool == {
        "cluster": "east",
        "name": name,
        "cohort": "gpustack--amd-25-1-ln-x64-12c-47g--nvidia-a10g-1d",
        "acceleratable": True,
        "manufacturer": "nvidia",
        "product": "NVIDIA-A10G",
        "family": "Ampere",
        "unit": {"cpu": "12", "memory": "47Gi", "accelerators": 1, "slices": 8},
        "flavors": ["gpustack--amd-25-1-ln-x64-48c-188g-196g--nvidia-a10g-4d-8s"],
        "nominalQuota": {
            "cpu": "48",
            # 4 cards x 8 time-slicing replicas, as the device plugin advertises them
            # (examples/cluster.yaml; docs/devices.md, "NVIDIA").
            "nvidia.com/gpu": "32",
            "ephemeral-storage": "196Gi",
            "memory": "188Gi",
        },
        "usage": None,
        "reservation": None,
        "workloads": None,
    }


def test_v1beta1_queues_name_their_cohort_too() -> None:
    for name, queue in _queues(KueueVersion.V1BETA1).items():
        assert "cohortName" not in queue["spec"]
        assert pool_entry("c", queue)["cohort"] == queue["spec"]["cohort"], name


def test_general_queue_has_no_device_unit() -> None:
    queues = _queues(KueueVersion.V1BETA2)
    name = "gpustack--intel-xeon-platinum-8358-ln-x64-1c-2g"
    pool = pool_entry("c", queues[name])
    assert pool["acceleratable"] is False
    assert pool["unit"] == {"cpu": "1", "memory": "2Gi"}
    assert pool["manufacturer"] == "intel"


def test_without_notes_the_unit_comes_from_the_name() -> None:
    queue = {
        "metadata": {"name": "gpustack--amd-25-1-12c-47g--nvidia-a10g-1d-8s"},
        "spec": {"cohort": "c1"},
    }
    pool = pool_entry("x", queue)
    assert pool["unit"] == {"cpu": "12", "memory": "47Gi", "accelerators": 1, "slices": 8}
    assert pool["manufacturer"] == "nvidia" and pool["acceleratable"] is True
    assert pool["cohort"] == "c1" and pool["nominalQuota"] == {} and pool["flavors"] == []


def test_a_queue_the_operator_did_not_name_is_still_listed() -> None:
    pool = pool_entry("x", {"metadata": {"name": "team-a"}, "spec": {"resourceGroups": "junk"}})
    assert pool["unit"] == {"cpu": None, "memory": None}
    assert pool["manufacturer"] == "" and pool["flavors"] == []


def test_usage_sums_flavors_and_reports_workloads() -> None:
    queue = {
        "metadata": {"name": "q"},
        "status": {
            "pendingWorkloads": 3,
            "admittedWorkloads": 1,
            "flavorsUsage": [
                {"name": "a", "resources": [{"name": "cpu", "total": "500m"}]},
                {"name": "b", "resources": [{"name": "cpu", "total": "1500m"}, {"name": "m"}]},
            ],
        },
    }
    pool = pool_entry("x", queue)
    assert pool["usage"] == {"cpu": "2"}
    assert pool["reservation"] is None
    assert pool["workloads"] == {"pending": 3, "reserving": None, "admitted": 1}


@pytest.mark.parametrize(
    ("pairs", "want"),
    [
        ([("memory", "16Gi"), ("memory", "16Gi")], {"memory": "32Gi"}),
        ([("memory", "1Gi"), ("memory", "1G")], {"memory": "2073741824"}),
        ([("cpu", "250m"), ("cpu", "1")], {"cpu": "1250m"}),
        ([("cpu", "2"), ("cpu", "bogus"), ("gpu", None)], {"cpu": "2"}),
        ([("cpu", "1000"), ("cpu", "1000")], {"cpu": "2k"}),
        ([], {}),
    ],
)
def test_sum_quantities(pairs: list[tuple[str, object]], want: dict[str, str]) -> None:
    assert sum_quantities(pairs) == want
