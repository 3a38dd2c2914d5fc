"""Managed clouds, label-only accelerators and DRA beside the vendor stack (docs/devices.md,
"Managed clouds and label-only accelerators" and "DRA").

The dumps are examples/managed-clouds.yaml and examples/dra-migration.yaml, built from the
labels and resources the clouds and vendors document (cited in docs/devices.md). Every
accelerator a node advertises becomes a pool with the right quota or a reason naming cause
and fix; no queue has a zero device quota or two models.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.commands.plan import read_cluster_file
from gpustack_operator.domain.labels import ACCELERATABLE_PREFIX
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.node.capacity import device_keys
from gpustack_operator.domain.node.devicesources.dra import node_slices
from gpustack_operator.domain.node.devicesources.gfd import gfd_pools
from gpustack_operator.domain.node.devicesources.merge import decode_resource, derive_devices
from gpustack_operator.domain.node.devicesources.neuron import neuron_pools
from gpustack_operator.domain.node.nodedevices import HOST_RESOURCES
from gpustack_operator.domain.nodeview import labels_of, name_of, status_field
from gpustack_operator.domain.plan.desired import DesiredState
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.quantities import parse_quantity

MFRS = default_manufacturers()
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
CLOUDS = EXAMPLES / "managed-clouds.yaml"
DRA = EXAMPLES / "dra-migration.yaml"


@cache
def _plan(path: Path) -> tuple[DesiredState, tuple[Mapping[str, Any], ...]]:
    nodes, namespaces, slices = read_cluster_file(path)
    state = plan_state(nodes, namespaces or ["default"], ChainPolicy(MFRS), resource_slices=slices)
    return state, tuple(slices)


def _device_quotas(state: DesiredState) -> dict[str, dict[str, int]]:
    """Per ClusterQueue, its device resources and their summed nominal quota."""
    out: dict[str, dict[str, int]] = {}
    for queue in state.cluster_queues:
        for group in queue["spec"].get("resourceGroups", []):
            for flavor in group["flavors"]:
                for res in flavor["resources"]:
                    if res["name"] in HOST_RESOURCES:
                        continue
                    mine = out.setdefault(queue["metadata"]["name"], {})
                    mine[res["name"]] = mine.get(res["name"], 0) + int(res["nominalQuota"])
    return out


def _reasons(state: DesiredState, node: str) -> list[tuple[str, str]]:
    (explanation,) = [e for e in state.explanations if e.node == node]
    return [(r.code, r.message) for r in explanation.reasons]


def _queue(state: DesiredState, suffix: str) -> dict[str, int]:
    quotas = _device_quotas(state)
    (name,) = [n for n in quotas if n.endswith(suffix)]
    return quotas[name]


@pytest.mark.parametrize(
    ("suffix", "quota"),
    [
        ("--nvidia-a100-sxm4-40gb-1d", {"nvidia.com/gpu": 2}),  # GKE A100
        ("--nvidia-a100-sxm4-40gb-mig-1g-5gb-1d", {"nvidia.com/gpu": 7}),  # GKE MIG partitions
        ("--nvidia-l4-1d-4s", {"nvidia.com/gpu": 4}),  # GKE time-sharing: 1 card x 4 clients
        ("--nvidia-l4-1d", {"nvidia.com/gpu": 1}),  # the unshared L4 beside it
        ("--google-tpu-v5e-2x4-1d", {"google.com/tpu": 8}),  # single-host slice
        ("--google-tpu-v5e-4x4-1d", {"google.com/tpu": 16}),  # multi-host slice: 4 nodes x 4
        ("--nvidia-h100-1d", {"nvidia.com/gpu": 8}),  # Karpenter p5
        ("--nvidia-a10g-1d", {"nvidia.com/gpu": 4}),  # Karpenter g5: never merged with H100
        ("--aws-trainium-1d", {"aws.amazon.com/neuron": 16}),  # by devices, not + cores
        ("--aws-inferentia2-neuroncore-1d", {"aws.amazon.com/neuroncore": 12}),  # cores only
        ("--habana-gaudi2-1d", {"habana.ai/gaudi": 8}),
    ],
)
def test_each_cloud_pool_has_the_quota_its_devices_give(suffix: str, quota: dict[str, int]) -> None:
    state, _ = _plan(CLOUDS)
    assert _queue(state, suffix) == quota


@pytest.mark.parametrize(
    ("node", "code", "words"),
    [
        ("gke-a100-pool-2", "no-allocatable-resource", "driver installer"),
        ("aks-gpunp-12345678-vmss000000", "model-unknown", "GPU Feature Discovery"),
        ("onprem-t4-1", "model-unknown", "device manager for nvidia"),
        ("onprem-mi300x-1", "model-unknown", "upgrade the labeller"),
        ("ip-10-0-16-3.us-east-2.compute.internal", "counted-as-devices", "not counted again"),
        ("ip-10-0-12-7.us-east-2.compute.internal", "unknown-resource", "vpc.amazonaws.com/efa"),
    ],
)
def test_devices_without_a_pool_get_a_reason_naming_cause_and_fix(
    node: str, code: str, words: str
) -> None:
    state, _ = _plan(CLOUDS)
    assert any(c == code and words in m for c, m in _reasons(state, node)), _reasons(state, node)


@pytest.mark.parametrize("path", [CLOUDS, DRA], ids=["clouds", "dra"])
def test_no_silence_no_zero_quota_and_one_model_per_queue(path: Path) -> None:
    """Every positive allocatable extended resource of every node feeds a pool's queue or is
    named by one of the node's reasons; every device queue has one model and positive quotas."""
    state, _ = _plan(path)
    fed = {(name_of(n), r) for n in state.nodes for r in _resources_of_node_pools(n)}
    for node in state.nodes:
        reasons = " ".join(m for _, m in _reasons(state, name_of(node)))
        for resource, amount in status_field(node, "allocatable").items():
            if "/" not in resource or (parse_quantity(amount) or 0) <= 0:
                continue
            assert (name_of(node), resource) in fed or resource in reasons, (
                name_of(node),
                resource,
            )
    for queue, resources in _device_quotas(state).items():
        assert all(q > 0 for q in resources.values()), queue
    flavors = {f["metadata"]["name"]: f["spec"]["nodeLabels"] for f in state.resource_flavors}
    for queue in state.cluster_queues:
        models = {
            key[len(ACCELERATABLE_PREFIX) : -len(".z-queue")]
            for group in queue["spec"].get("resourceGroups", [])
            for flavor in group["flavors"]
            for key in flavors[flavor["name"]]
            if key.startswith(ACCELERATABLE_PREFIX) and key.endswith(".z-queue")
        }
        assert len(models) <= 1, (queue["metadata"]["name"], models)


def _resources_of_node_pools(node: Mapping[str, Any]) -> set[str]:
    """The resource of every device pool the node's labels describe."""
    labels = labels_of(node)
    out = set()
    for akey in device_keys(labels, MFRS):
        raw = labels.get(f"{ACCELERATABLE_PREFIX}{akey}.resource")
        out.add(decode_resource(raw) if raw else MFRS[akey.split("-", 1)[0]].resource_name)
    return out


@pytest.mark.parametrize(
    "path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name if isinstance(p, Path) else ""
)
def test_a_flavor_never_selects_a_node_without_its_device_resource(path: Path) -> None:
    """docs/devices.md, "DRA": the resource a pool is allocated through is part of its model,
    so a flavor's nodeLabels match only nodes that have the resource its queue covers (in
    allocatable, or published by DRA ResourceSlices for a DRA resource)."""
    state, slices = _plan(path)
    covered: dict[str, set[str]] = {}
    for queue in state.cluster_queues:
        for group in queue["spec"].get("resourceGroups", []):
            for flavor in group["flavors"]:
                names = {r["name"] for r in flavor["resources"]} - set(HOST_RESOURCES)
                covered.setdefault(flavor["name"], set()).update(names)
    checked = 0
    for flavor in state.resource_flavors:
        selector = flavor["spec"]["nodeLabels"]
        for resource in covered.get(flavor["metadata"]["name"], set()):
            for node in state.nodes:
                labels = labels_of(node)
                if any(labels.get(k) != v for k, v in selector.items()):
                    continue
                checked += 1
                allocatable = parse_quantity(status_field(node, "allocatable").get(resource)) or 0
                dra = "/" in resource and any(
                    resource.startswith(s["spec"]["driver"] + "/")
                    for s in node_slices(name_of(node), slices)
                )
                assert allocatable > 0 or dra, (flavor["metadata"]["name"], name_of(node))
    assert checked, "no device flavor was checked"


def test_dra_nodes_never_share_a_flavor_with_device_plugin_nodes() -> None:
    """DRA beside GFD gets its DRA pool (GFD labels, no nvidia.com/gpu) and shares a flavor
    with the DRA-only node of the same shape, never with the device-plugin node."""
    state, _ = _plan(DRA)
    quotas = _device_quotas(state)
    assert sorted(quotas.values(), key=str) == [
        {"gpu.nvidia.com/gpu": 8},
        {"nvidia.com/gpu": 4},
    ]
    assert _reasons(state, "h100-dra-gfd-1") == []


def test_mixed_mig_full_card_pool_counts_the_cards_outside_mig() -> None:
    """docs/devices.md, "NVIDIA": 8 cards, 2 of them MIG-enabled (4 x 3g.40gb): the full-card
    pool has the 6 cards the device plugin advertises whole, not GFD's gpu.count."""
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig-3g.40gb.count": "4",
        "nvidia.com/mig-3g.40gb.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
        "nvidia.com/mig-3g.40gb.memory": "40192",
    }
    pools, problems = gfd_pools(labels, {"nvidia.com/gpu": "6", "nvidia.com/mig-3g.40gb": "4"})
    assert problems == []
    assert [(p.product, p.count, p.resource) for p in pools] == [
        ("NVIDIA-A100-SXM4-80GB", 6, "nvidia.com/gpu"),
        ("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", 4, "nvidia.com/mig-3g.40gb"),
    ]


def test_a_neuron_node_is_pooled_by_devices_or_by_cores_never_both() -> None:
    labels = {"node.kubernetes.io/instance-type": "trn1.32xlarge"}
    both = {"aws.amazon.com/neuron": "16", "aws.amazon.com/neuroncore": "32"}
    pools, problems = neuron_pools(labels, both)
    assert [(p.product, p.count, p.resource) for p in pools] == [
        ("Trainium", 16, "aws.amazon.com/neuron")
    ]
    assert [(d.reason, d.resource) for d in problems] == [
        ("counted-as-devices", "aws.amazon.com/neuroncore")
    ]
    pools, problems = neuron_pools({}, both)
    assert pools == [] and {d.reason for d in problems} == {"model-unknown"}


def test_our_agent_wins_over_dra_slices_too() -> None:
    """docs/devices.md, "Precedence": a manufacturer our agent describes is taken from the
    agent alone, DRA slices of the node included."""
    _, _, slices = read_cluster_file(EXAMPLES / "dra-h100.yaml")
    agent = {"acceleratable.feature.gpustack.ai/nvidia": "true"}
    derived = derive_devices(agent, {}, MFRS, node_name="h100-dra-1", slices=slices)
    assert derived.pools == () and derived.labels == {}
    assert [d.reason for d in derived.diagnostics] == ["described-by-agent"]
