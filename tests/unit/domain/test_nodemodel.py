"""The node model: what the chain reads of a Node, derived once (domain/node/nodemodel.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.commands.plan import read_nodes_file
from gpustack_operator.domain.chain.queues import device_amount, pool_amount
from gpustack_operator.domain.node import nodemodel
from gpustack_operator.domain.node.availability import DeviceBasis, lifecycle_of
from gpustack_operator.domain.node.capacity import worker_capacity_labels
from gpustack_operator.domain.node.devicesources import unpooled_devices
from gpustack_operator.domain.node.nodedevices import node_devices
from gpustack_operator.domain.node.nodemodel import ModelSettings, node_model
from gpustack_operator.domain.node.nodeprofiles import is_managed, node_profiles
from gpustack_operator.domain.node.taints import dedication_taints
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers

MFRS = load_manufacturers({})
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
FILES = ["cluster.yaml", "dra-h100.yaml", "gfd-mig-mixed.yaml", "topology-gke-a3-ultra.yaml"]


def merged_nodes(name: str) -> list[dict[str, Any]]:
    raw, _ = read_nodes_file(EXAMPLES / name)
    return plan_state([dict(n) for n in raw], [], ChainPolicy(manufacturers=MFRS)).nodes


@pytest.mark.parametrize("name", FILES)
def test_the_model_says_what_the_domain_functions_say(name: str) -> None:
    settings = ModelSettings(MFRS)
    for node in merged_nodes(name):
        model = node_model(node, settings)
        assert model.profiles == tuple(node_profiles(node, MFRS))
        assert model.managed == is_managed(node)
        assert dict(model.capacity_labels) == worker_capacity_labels(node, MFRS)
        assert model.dedication_taints == dedication_taints(node)
        assert model.lifecycle == lifecycle_of(node)
        assert model.unpooled == unpooled_devices(node, MFRS)
        for profile in model.profiles:
            if not profile.akey:
                continue
            for resource in ("nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.10gb"):
                assert pool_amount(model.devices, profile.akey, resource) == pool_amount(
                    node, profile.akey, resource
                )
                for basis in DeviceBasis:
                    assert device_amount(
                        model.devices, profile.akey, resource, basis
                    ) == device_amount(node, profile.akey, resource, basis)
            assert (
                model.devices == node_devices(node, [profile.akey])
                or len({p.akey for p in model.profiles if p.akey}) > 1
            )


@pytest.mark.parametrize("name", FILES)
def test_plan_builds_one_model_per_node(name: str) -> None:
    raw, _ = read_nodes_file(EXAMPLES / name)
    before = nodemodel.BUILT[0]
    state = plan_state([dict(n) for n in raw], ["default"], ChainPolicy(manufacturers=MFRS))
    assert state.cluster_queues
    assert nodemodel.BUILT[0] - before == len(raw)


def test_device_amounts_and_lifecycle_are_derived_on_first_use_and_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Node's first version is usually replaced (NFD merges its capacity labels) before a
    queue reconcile reads its device amounts or lifecycle: it never pays for them."""
    node = next(
        n for n in merged_nodes("cluster.yaml") if any(p.akey for p in node_profiles(n, MFRS))
    )
    calls: list[str] = []

    def counted(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(nodemodel, "node_devices", counted("devices", node_devices))
    monkeypatch.setattr(nodemodel, "lifecycle_of", counted("lifecycle", lifecycle_of))
    model = node_model(node, ModelSettings(MFRS))
    assert calls == []
    akeys = sorted({p.akey for p in model.profiles if p.akey})
    assert model.devices == node_devices(node, akeys) and model.devices is model.devices
    assert model.lifecycle == lifecycle_of(node) and model.lifecycle is model.lifecycle
    assert calls == ["devices", "lifecycle"]
