"""The node model: what the chain reads of a Node, derived once (domain/node/nodemodel.py)."""

from __future__ import annotations

import copy
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
from gpustack_operator.domain.node.nodetopology import TopologyPolicy
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


def _gpu_node(name: str = "gpu-1") -> dict[str, Any]:
    """A Node as the worker first sees it: NFD's CPU labels, GPU feature discovery's labels,
    no capacity labels yet."""
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
                "feature.node.kubernetes.io/cpu-model.family": "6",
                "feature.node.kubernetes.io/cpu-model.id": "143",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.memory": "81559",
            },
            "annotations": {"feature.gpustack.ai/cpu-name": "Intel Xeon Platinum 8480+"},
        },
        "status": {
            "capacity": {
                "cpu": "96",
                "memory": "1056Gi",
                "ephemeral-storage": "1000Gi",
                "nvidia.com/gpu": "8",
            },
            "allocatable": {
                "cpu": "95",
                "memory": "1050Gi",
                "ephemeral-storage": "990Gi",
                "nvidia.com/gpu": "8",
            },
        },
    }


def _labelled(key: str, value: str | None) -> Any:
    def change(node: dict[str, Any]) -> None:
        if value is None:
            del node["metadata"]["labels"][key]
        else:
            node["metadata"]["labels"][key] = value

    return change


def _amount(section: str, resource: str, value: str) -> Any:
    def change(node: dict[str, Any]) -> None:
        node["status"][section][resource] = value

    return change


def _cpu_name(value: str | None) -> Any:
    def change(node: dict[str, Any]) -> None:
        if value is None:
            node["metadata"]["annotations"].clear()
        else:
            node["metadata"]["annotations"]["feature.gpustack.ai/cpu-name"] = value

    return change


# One change of each input the capacity derivation and the profiles read
# (nodemodel.capacity_inputs, nodemodel.profile_inputs).
CHANGED_INPUTS = {
    "managed label": _labelled("gpustack.ai/managed", "false"),
    "architecture label": _labelled("kubernetes.io/arch", "arm64"),
    "CPU vendor label": _labelled("feature.node.kubernetes.io/cpu-model.vendor_id", "AMD"),
    "GPU product label": _labelled("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),
    "GPU memory label": _labelled("nvidia.com/gpu.memory", "40960"),
    "published CPU label": _labelled(
        "general.feature.gpustack.ai/intel-xeon-platinum-8480-ln-x64.cpu", "64"
    ),
    "CPU name annotation": _cpu_name("AMD EPYC 9654"),
    "CPU capacity": _amount("capacity", "cpu", "128"),
    "memory capacity": _amount("capacity", "memory", "2048Gi"),
    "storage capacity": _amount("capacity", "ephemeral-storage", "2000Gi"),
    "allocatable cards": _amount("allocatable", "nvidia.com/gpu", "0"),
    "an extended resource nothing pools": _amount("allocatable", "example.com/fpga", "2"),
}


def _derived(model: nodemodel.NodeModel) -> tuple[Any, ...]:
    return (dict(model.capacity_labels), model.unpooled, model.profiles, model.view)


@pytest.mark.parametrize("change", sorted(CHANGED_INPUTS))
def test_a_changed_input_of_the_shared_derivations_changes_the_model(change: str) -> None:
    """The capacity labels, unpooled devices and profiles are derived once per distinct
    input and shared (the worker's store): a change of any input they read is a new input,
    and gives what deriving that Node on its own gives."""
    settings = ModelSettings(MFRS)
    derivations = nodemodel.Derivations()
    base = node_model(_gpu_node(), settings, derivations)
    changed = _gpu_node()
    CHANGED_INPUTS[change](changed)
    model = node_model(changed, settings, derivations)
    assert _derived(model) != _derived(base)
    assert _derived(model) == _derived(node_model(changed, settings))
    # the same once its capacity labels are merged (the second version in a cold converge)
    changed["metadata"]["labels"].update(model.capacity_labels)
    merged = node_model(changed, settings, derivations)
    assert _derived(merged) == _derived(node_model(changed, settings))
    assert merged.profiles and all(p.node == "gpu-1" for p in merged.profiles)


def test_nodes_of_one_shape_share_their_derivations() -> None:
    """Two Nodes that differ only by name and hostname derive once; each model still names
    its own node; the Node's name is not an input."""
    settings = ModelSettings(MFRS)
    derivations = nodemodel.Derivations()
    first, second = _gpu_node("gpu-1"), _gpu_node("gpu-2")
    for node in (first, second):
        node["metadata"]["labels"].update(node_model(node, settings).capacity_labels)
    a = node_model(first, settings, derivations)
    derived = derivations.derived
    b = node_model(second, settings, derivations)
    # capacity, profiles, the view's labels and its amounts, once each
    assert derivations.derived == derived == 4
    assert a.capacity_labels == b.capacity_labels and a.unpooled == b.unpooled
    assert [p.node for p in a.profiles] == ["gpu-1"] * len(a.profiles) and a.profiles
    assert [p.node for p in b.profiles] == ["gpu-2"] * len(b.profiles)
    assert _derived(b) == _derived(node_model(second, settings))


@pytest.mark.parametrize("name", FILES)
def test_shared_derivations_give_what_each_node_gives(name: str) -> None:
    settings = ModelSettings(MFRS)
    derivations = nodemodel.Derivations()
    raw, _ = read_nodes_file(EXAMPLES / name)
    for node in [*raw, *merged_nodes(name)]:
        assert _derived(node_model(node, settings, derivations)) == _derived(
            node_model(node, settings)
        )


TAS = TopologyPolicy(levels=("example.com/rack",))

# One change of each input of the view's label selection and amounts, which the store also
# derives once per distinct input (nodemodel.Derivations.view_labels and view_amounts), with
# the TAS settings that make the label count.
CHANGED_VIEW_INPUTS: dict[str, tuple[Any, TopologyPolicy | None]] = {
    "a selected label": (_labelled("kubernetes.io/os", "windows"), None),
    "a vendor label": (_labelled("nvidia.com/gpu.product", "NVIDIA-L4"), None),
    "a selected label added": (_labelled("node.kubernetes.io/instance-type", "p5.48xlarge"), None),
    "a label removed": (_labelled("nvidia.com/gpu.count", None), None),
    "the hostname, a TAS level": (_labelled("kubernetes.io/hostname", "renamed"), TAS),
    "a level of the TAS settings": (_labelled("example.com/rack", "r2"), TAS),
    "the CPU capacity": (_amount("capacity", "cpu", "128"), None),
    "allocatable cards": (_amount("allocatable", "nvidia.com/gpu", "4"), None),
    "a vendor resource": (_amount("allocatable", "nvidia.com/mig-1g.10gb", "7"), None),
}


@pytest.mark.parametrize("change", sorted(CHANGED_VIEW_INPUTS))
def test_a_changed_input_of_the_view_changes_the_view(change: str) -> None:
    """The view's label selection and amounts are kept per distinct input: a change of
    any of them changes the view, to what the Node's view is when derived on its own; and
    the same inputs under other TAS settings are another input."""
    edit, topology = CHANGED_VIEW_INPUTS[change]
    settings = ModelSettings(MFRS, topology=topology)
    derivations = nodemodel.Derivations()
    base = _gpu_node()
    base["metadata"]["labels"]["example.com/rack"] = "r1"
    before = node_model(base, settings, derivations)
    changed = copy.deepcopy(base)
    edit(changed)
    model = node_model(changed, settings, derivations)
    assert model.view != before.view
    assert model.view == node_model(changed, settings).view
    assert model.view == nodemodel.node_view(changed, MFRS, topology)
    if topology is not None:  # the other TAS setting does not reuse this one's selection
        off = ModelSettings(MFRS)
        assert node_model(changed, off, derivations).view == node_model(changed, off).view
