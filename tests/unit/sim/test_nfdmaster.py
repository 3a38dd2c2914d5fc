"""The NFD-master stand-in: NodeFeature labels merged onto Nodes, stale ones removed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.nfdmaster import (
    DEFAULT_LABEL_NAMESPACES,
    FEATURE_LABELS_ANNOTATION,
    NODE_NAME_LABEL,
    NfdMaster,
    desired_labels,
    merge_node_labels,
)

NAMESPACES = tuple(p.rstrip("/") for p in DEFAULT_LABEL_NAMESPACES)
SYSTEM = "gpustack-system"


def node_feature(
    name: str, node: str, labels: dict[str, str], namespace: str = SYSTEM
) -> dict[str, Any]:
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {"name": name, "namespace": namespace, "labels": {NODE_NAME_LABEL: node}},
        "spec": {"labels": labels},
    }


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}


# --- pure functions -------------------------------------------------------------------------


def test_desired_labels_qualifies_and_filters_keys() -> None:
    features = [
        node_feature("b", "n1", {"pci-10de.present": "true", "gpustack.ai/x": "1"}),
        node_feature(
            "a",
            "n1",
            {
                "kubernetes.io/arch": "evil",
                "feature.gpustack.ai/y": "2",
                "gpustack.ai/x": "0",
                "example.com/z": "3",
                "general.feature.gpustack.ai/bad": "not valid!",
            },
        ),
    ]
    assert desired_labels(features, NAMESPACES) == {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.gpustack.ai/y": "2",
        "gpustack.ai/x": "1",  # the later name wins on a clash
    }


def test_merge_sets_annotation_and_removes_only_managed_labels() -> None:
    current = node(
        "n1", {"keep": "me", "gpustack.ai/old": "1", "feature.node.kubernetes.io/cpu-model.id": "1"}
    )
    current["metadata"]["annotations"] = {FEATURE_LABELS_ANNOTATION: "cpu-model.id,gpustack.ai/old"}
    updated = merge_node_labels(current, {"gpustack.ai/new": "2"})
    assert updated is not None
    assert updated["metadata"]["labels"] == {"keep": "me", "gpustack.ai/new": "2"}
    assert updated["metadata"]["annotations"][FEATURE_LABELS_ANNOTATION] == "gpustack.ai/new"
    assert merge_node_labels(updated, {"gpustack.ai/new": "2"}) is None
    cleared = merge_node_labels(updated, {})
    assert cleared is not None
    assert cleared["metadata"]["labels"] == {"keep": "me"}
    assert FEATURE_LABELS_ANNOTATION not in cleared["metadata"]["annotations"]


def test_annotation_strips_the_nfd_prefix_only() -> None:
    updated = merge_node_labels(
        node("n1"), {"feature.node.kubernetes.io/a": "1", "feature.gpustack.ai/b": "2"}
    )
    assert updated is not None
    assert updated["metadata"]["annotations"][FEATURE_LABELS_ANNOTATION] == (
        "a,feature.gpustack.ai/b"
    )


# --- against a running simulator ------------------------------------------------------------


@pytest.fixture
async def nfd_sim(crd_docs: dict[str, list[dict[str, Any]]]) -> AsyncIterator[SimServer]:
    """A started server with the NFD CRDs and an extra namespace "other"."""
    crds = crd_docs["nfd-api-crds.yaml"]
    server = SimServer(namespaces=("default", "kube-system", SYSTEM, "other"))
    await server.start()
    server.load_crds(crds)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def nfd(nfd_sim: SimServer) -> AsyncIterator[NfdMaster]:
    async with NfdMaster(nfd_sim, namespace=SYSTEM) as master:
        yield master


async def eventually(check: Callable[[], bool]) -> None:
    """Poll *check* until it holds; fail after a generous deadline."""
    with anyio.fail_after(60):
        while True:
            if check():
                return
            await anyio.sleep(0.01)


def labels_of(sim: SimServer, name: str) -> dict[str, str]:
    obj = sim.store.get("v1", "Node", name)
    assert obj is not None
    return dict(obj["metadata"].get("labels") or {})


@pytest.mark.anyio
async def test_labels_merge_update_and_removal(nfd_sim: SimServer, nfd: NfdMaster) -> None:
    nfd_sim.store.create(node("n1", {"kubernetes.io/hostname": "n1"}))
    nfd_sim.store.create(
        node_feature("n1-dm", "n1", {"gpustack.ai/a": "1", "feature.gpustack.ai/b": "x"})
    )
    await eventually(lambda: labels_of(nfd_sim, "n1").get("gpustack.ai/a") == "1")
    assert labels_of(nfd_sim, "n1")["feature.gpustack.ai/b"] == "x"

    feature = nfd_sim.store.get("nfd.k8s-sigs.io/v1alpha1", "NodeFeature", "n1-dm", SYSTEM)
    assert feature is not None
    feature["spec"]["labels"] = {"gpustack.ai/a": "2"}
    nfd_sim.store.update(feature)
    await eventually(lambda: labels_of(nfd_sim, "n1").get("gpustack.ai/a") == "2")
    await eventually(lambda: "feature.gpustack.ai/b" not in labels_of(nfd_sim, "n1"))

    nfd_sim.store.delete("nfd.k8s-sigs.io/v1alpha1", "NodeFeature", "n1-dm", SYSTEM)
    await eventually(lambda: "gpustack.ai/a" not in labels_of(nfd_sim, "n1"))
    assert labels_of(nfd_sim, "n1") == {"kubernetes.io/hostname": "n1"}


@pytest.mark.anyio
async def test_two_node_features_for_one_node(nfd_sim: SimServer, nfd: NfdMaster) -> None:
    nfd_sim.store.create(node("n1"))
    nfd_sim.store.create(node_feature("n1-nfd", "n1", {"cpu-model.vendor_id": "AMD"}))
    nfd_sim.store.create(node_feature("n1-dm", "n1", {"gpustack.ai/gpu": "true"}))
    await eventually(lambda: len(labels_of(nfd_sim, "n1")) == 2)
    assert labels_of(nfd_sim, "n1") == {
        "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
        "gpustack.ai/gpu": "true",
    }
    nfd_sim.store.delete("nfd.k8s-sigs.io/v1alpha1", "NodeFeature", "n1-dm", SYSTEM)
    await eventually(lambda: "gpustack.ai/gpu" not in labels_of(nfd_sim, "n1"))
    assert labels_of(nfd_sim, "n1") == {"feature.node.kubernetes.io/cpu-model.vendor_id": "AMD"}


@pytest.mark.anyio
async def test_node_created_after_its_node_feature(nfd_sim: SimServer, nfd: NfdMaster) -> None:
    nfd_sim.store.create(node_feature("late-dm", "late", {"gpustack.ai/a": "1"}))
    await eventually(nfd.idle)
    nfd_sim.store.create(node("late"))
    await eventually(lambda: labels_of(nfd_sim, "late").get("gpustack.ai/a") == "1")


@pytest.mark.anyio
async def test_other_namespaces_are_ignored(nfd_sim: SimServer, nfd: NfdMaster) -> None:
    nfd_sim.store.create(node("n1"))
    nfd_sim.store.create(node_feature("elsewhere", "n1", {"gpustack.ai/a": "1"}, namespace="other"))
    nfd_sim.store.create(node_feature("here", "n1", {"gpustack.ai/b": "1"}))
    await eventually(lambda: "gpustack.ai/b" in labels_of(nfd_sim, "n1"))
    assert "gpustack.ai/a" not in labels_of(nfd_sim, "n1")


@pytest.mark.anyio
async def test_start_reconciles_existing_objects(nfd_sim: SimServer) -> None:
    nfd_sim.store.create(node("n1"))
    nfd_sim.store.create(node_feature("n1-dm", "n1", {"gpustack.ai/a": "1"}))
    assert labels_of(nfd_sim, "n1") == {}
    async with NfdMaster(nfd_sim, namespace=SYSTEM):
        await eventually(lambda: labels_of(nfd_sim, "n1") == {"gpustack.ai/a": "1"})


@pytest.mark.anyio
async def test_labels_a_real_dump_names_stay(nfd_sim: SimServer, nfd: NfdMaster) -> None:
    """docs/simulator.md, "Real dumps": labels named by the feature-labels annotation a Node
    arrives with stand for publishers the simulator does not run, so they are kept (and
    still listed) while NodeFeature labels come and go beside them."""
    real = node(
        "gpu-1",
        {
            "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
            "kubernetes.io/hostname": "gpu-1",
        },
    )
    real["metadata"]["annotations"] = {
        FEATURE_LABELS_ANNOTATION: "cpu-model.vendor_id,nvidia.com/gpu.product",
        "nfd.node.kubernetes.io/extended-resources": "",
    }
    nfd_sim.store.create(real)
    nfd_sim.store.create(node_feature("gpu-1-w", "gpu-1", {"gpustack.ai/a": "1"}))
    await eventually(lambda: labels_of(nfd_sim, "gpu-1").get("gpustack.ai/a") == "1")
    labels = labels_of(nfd_sim, "gpu-1")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["feature.node.kubernetes.io/cpu-model.vendor_id"] == "AMD"
    stored = nfd_sim.store.get("v1", "Node", "gpu-1")
    assert stored is not None
    annotations = stored["metadata"]["annotations"]
    assert annotations[FEATURE_LABELS_ANNOTATION] == (
        "cpu-model.vendor_id,gpustack.ai/a,nvidia.com/gpu.product"
    )
    assert "nfd.node.kubernetes.io/extended-resources" in annotations
    nfd_sim.store.delete("nfd.k8s-sigs.io/v1alpha1", "NodeFeature", "gpu-1-w", SYSTEM)
    await eventually(lambda: "gpustack.ai/a" not in labels_of(nfd_sim, "gpu-1"))
    assert labels_of(nfd_sim, "gpu-1")["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
