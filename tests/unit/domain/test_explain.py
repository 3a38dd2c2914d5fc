"""``plan`` explains every node: one test per reason (docs/plan.md, "Reasons")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.commands.plan import read_cluster_file
from gpustack_operator.domain.chain.explain import NodeExplanation
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy

from .nodes import CPU_NAME, A, make_node, t4

MFRS = default_manufacturers()
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
HOST = {"cpu": "16", "memory": "64Gi", "storage": "200Gi"}


def explain(node: dict[str, Any]) -> NodeExplanation:
    (explanation,) = plan_state([node], ["default"], ChainPolicy(manufacturers=MFRS)).explanations
    return explanation


def codes(node: dict[str, Any]) -> list[str]:
    return [r.code for r in explain(node).reasons]


def test_a_complete_node_feeds_its_pools_and_has_no_reason() -> None:
    node = make_node(**HOST, labels=t4(2), allocatable={"nvidia.com/gpu": "2"})
    result = explain(node)
    assert result.managed
    assert result.flavors == (
        "gpustack--amd-25-1-16c-32g-200g",
        "gpustack--amd-25-1-16c-64g-200g--nvidia-tesla-t4-2d",
    )
    assert result.reasons == ()


def test_no_cpu_identity() -> None:
    node = make_node(**HOST, amd=False, labels=t4(2), allocatable={"nvidia.com/gpu": "2"})
    result = explain(node)
    assert [r.code for r in result.reasons] == ["no-cpu-identity"]
    assert "run NFD" in result.reasons[0].message
    # The cards still get a pool, named 'generic'; the CPU pool is what is missing.
    assert result.flavors == ("gpustack--generic-16c-64g-200g--nvidia-tesla-t4-2d",)


def test_a_cpu_name_annotation_alone_is_an_identity() -> None:
    node = make_node(**HOST, amd=False, annotations={CPU_NAME: "AMD EPYC 7763"})
    assert codes(node) == []


def test_opted_out() -> None:
    node = make_node(**HOST, labels={"gpustack.ai/managed": "false"})
    result = explain(node)
    assert (result.managed, result.flavors, [r.code for r in result.reasons]) == (
        False,
        (),
        ["opted-out"],
    )


def test_not_managed() -> None:
    node = make_node(**HOST, labels={"gpustack.ai/managed": "maybe"})
    result = explain(node)
    assert [r.code for r in result.reasons] == ["not-managed"]
    assert "gpustack.ai/managed=maybe" in result.reasons[0].message


def test_being_deleted() -> None:
    node = make_node(**HOST)
    node["metadata"]["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    result = explain(node)
    assert (result.flavors, [r.code for r in result.reasons]) == ((), ["being-deleted"])


def test_name_too_long() -> None:
    name = "n" * 64
    result = explain(make_node(name, **HOST))
    assert (result.flavors, [r.code for r in result.reasons]) == ((), ["name-too-long"])
    assert "64 characters" in result.reasons[0].message


def test_unknown_vendor() -> None:
    node = make_node(**HOST, labels={A + "acme-widget": "true", A + "acme-widget.count": "2"})
    result = explain(node)
    assert [r.code for r in result.reasons] == ["unknown-vendor"]
    assert "'acme'" in result.reasons[0].message and "nvidia" in result.reasons[0].message
    assert result.flavors == ("gpustack--amd-25-1-16c-32g-200g",)


def test_invalid_device_key() -> None:
    node = make_node(**HOST, labels={A + "nvidia-" + "x" * 60: "true"})
    assert codes(node) == ["invalid-device-key"]


def test_device_without_count() -> None:
    labels = t4(2)
    del labels[A + "nvidia-tesla-t4.count"]
    node = make_node(**HOST, labels=labels, allocatable={"nvidia.com/gpu": "2"})
    result = explain(node)
    assert [r.code for r in result.reasons] == ["device-without-count"]
    assert result.flavors == ("gpustack--amd-25-1-16c-32g-200g",)


def test_device_without_allocatable() -> None:
    node = make_node(**HOST, labels=t4(2))
    result = explain(node)
    assert [r.code for r in result.reasons] == ["device-without-allocatable"]
    assert "nvidia.com/gpu" in result.reasons[0].message
    # The pool exists, with 0 credits: the reason says why it holds less than the hardware.
    assert len(result.flavors) == 2


def test_device_allocatable_present_as_zero_is_said_so() -> None:
    """A device plugin gone past its grace leaves the resource at 0, not missing: the reason
    says what the node reports (once it said the key was missing)."""
    node = make_node(**HOST, labels=t4(2), allocatable={"nvidia.com/gpu": "0"})
    result = explain(node)
    assert [r.code for r in result.reasons] == ["device-allocatable-zero"]
    message = result.reasons[0].message
    assert "status.allocatable[nvidia.com/gpu] is 0" in message
    assert "has no" not in message and "stays in its queue" in message


@pytest.mark.parametrize(
    ("capacity", "words"),
    [
        ({"cpu": "lots"}, "status.capacity.cpu is not a quantity ('lots')"),
        ({"cpu": "-4"}, "status.capacity.cpu is not positive (-4)"),
        ({"memory": "0"}, "status.capacity.memory is not positive (0)"),
        ({"memory": None}, "status.capacity.memory is missing"),
        ({"cpu": "2000000000"}, "status.capacity.cpu is absurd (2000000000, over 999,999,999"),
        ({"ephemeral-storage": "1Ei"}, "status.capacity.ephemeral-storage is absurd"),
    ],
)
def test_bad_capacity(capacity: dict[str, str | None], words: str) -> None:
    node = make_node(cpu="16", memory="64Gi", storage="200Gi")
    for key, value in capacity.items():
        if value is None:
            del node["status"]["capacity"][key]
        else:
            node["status"]["capacity"][key] = value
    result = explain(node)
    assert [r.code for r in result.reasons] == ["bad-capacity"]
    assert words in result.reasons[0].message


def test_a_node_without_cpu_identity_or_cards_feeds_nothing_and_says_why() -> None:
    result = explain(make_node(**HOST, amd=False))
    assert (result.managed, result.flavors) == (True, ())
    assert [r.code for r in result.reasons] == ["no-cpu-identity"]


GFD_A100 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "40960",
}


def test_device_source_reasons_join_the_explanation() -> None:
    # GFD describes eight cards, the device plugin advertises none (docs/devices.md, "Why a
    # device gets no pool"): the vendor source's reason is the node's.
    result = explain(make_node(**HOST, labels=GFD_A100))
    assert [r.code for r in result.reasons] == ["no-allocatable-resource"]
    assert result.reasons[0].message.startswith("nvidia-gfd: NVIDIA-A100-SXM4-40GB")
    assert result.flavors == ("gpustack--amd-25-1-16c-32g-200g",)


@pytest.mark.parametrize("dump", ["gfd-mig-mixed.yaml", "gfd-time-slicing.yaml", "dra-h100.yaml"])
def test_pools_in_their_own_resource_hold_nothing_back(dump: str) -> None:
    # MIG, shared and DRA pools are counted in their own resource (nvidia.com/mig-<profile>,
    # ...), not the vendor's default one: no device-without-allocatable for them.
    nodes, _, slices = read_cluster_file(EXAMPLES / dump)
    state = plan_state(nodes, ["default"], ChainPolicy(manufacturers=MFRS), resource_slices=slices)
    assert state.explanations
    assert all(e.flavors and e.reasons == () for e in state.explanations)


def test_host_counted_once_shows_the_split() -> None:
    """docs/worker.md, "CPU and memory: counted in every pool, or once": plan --explain
    says what each of a node's pools counts of its CPU and memory."""
    from dataclasses import replace

    from gpustack_operator.domain.chain.queues import HostCounting

    node = make_node(**HOST, labels=t4(2), allocatable={"nvidia.com/gpu": "2"})
    policy = replace(ChainPolicy(manufacturers=MFRS), host_counting=HostCounting.ONCE)
    (explanation,) = plan_state([node], ["default"], policy).explanations
    (reason,) = explanation.reasons
    assert reason.code == "host-counted-once"
    assert "divided evenly among its 2 pools" in reason.message
    assert reason.message.count("cpu=8 ") == 2, reason.message
    assert codes(node) == [], "every-pool (the default) says nothing"
