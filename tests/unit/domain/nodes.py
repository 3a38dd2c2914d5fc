"""Node builders shared by the domain tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpustack_operator.domain.chain.flavors import flavor_nodes
from gpustack_operator.domain.chain.nodepool import PoolSettings, node_flavor
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.taints import TolerationPolicy

VENDOR = "feature.node.kubernetes.io/cpu-model.vendor_id"
FAMILY = "feature.node.kubernetes.io/cpu-model.family"
MODEL = "feature.node.kubernetes.io/cpu-model.id"
CPU_NAME = "feature.gpustack.ai/cpu-name"
A = "acceleratable.feature.gpustack.ai/"
G = "general.feature.gpustack.ai/"


def make_node(
    name: str = "n1",
    *,
    cpu: str | None = None,
    memory: str | None = None,
    storage: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    amd: bool = True,
    uid: str | None = None,
) -> dict[str, Any]:
    """A Node dict; *amd* adds NFD's AMD family 25 model 1 CPU labels."""
    all_labels = {VENDOR: "AMD", FAMILY: "25", MODEL: "1"} if amd else {}
    all_labels.update(labels or {})
    capacity = {
        k: v
        for k, v in (("cpu", cpu), ("memory", memory), ("ephemeral-storage", storage))
        if v is not None
    }
    meta: dict[str, Any] = {"name": name, "labels": all_labels}
    if annotations:
        meta["annotations"] = annotations
    if uid:
        meta["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "status": {"capacity": capacity, "allocatable": allocatable or dict(capacity)},
    }


def t4(count: int, **extra: str) -> dict[str, str]:
    """Device-manager labels of *count* Tesla T4 cards."""
    labels = {
        A + "nvidia": "true",
        A + "nvidia-tesla-t4": "true",
        A + "nvidia-tesla-t4.count": str(count),
        A + "nvidia-tesla-t4.memory": "15Gi",
        A + "nvidia-tesla-t4.product": "Tesla-T4",
    }
    labels.update(extra)
    return labels


def a10g(count: int, **extra: str) -> dict[str, str]:
    labels = {
        A + "nvidia": "true",
        A + "nvidia-a10g": "true",
        A + "nvidia-a10g.count": str(count),
    }
    labels.update(extra)
    return labels


def planned_flavors(
    nodes: Sequence[object],
    manufacturers: Mapping[str, Manufacturer],
    *,
    tolerations: TolerationPolicy = None,
    topology_on: bool = False,
) -> dict[str, dict[str, Any]]:
    """Every ResourceFlavor the managed *nodes* call for, by name, as ``desired_state``
    builds them: the per-flavor function over the flavor index."""
    settings = PoolSettings(manufacturers, tolerations=tolerations, topology_on=topology_on)
    index = flavor_nodes(nodes, manufacturers)
    return {n: f for n in sorted(index) if (f := node_flavor(n, index[n], settings)) is not None}
