"""Shared by the chain tests: the example cluster and person-made objects to protect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpustack_operator.commands.plan import read_nodes_file
from gpustack_sim.cluster.cluster import SimCluster

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "cluster.yaml"
KUEUE = "kueue.x-k8s.io/v1beta2"


def example_nodes() -> list[dict[str, Any]]:
    nodes, _ = read_nodes_file(EXAMPLE)
    return [dict(n) for n in nodes]


def person_objects() -> list[dict[str, Any]]:
    """Objects a person made, without the operator's managed-by label (docs/worker.md): names
    that look like the operator's must not fool it into adopting or deleting them."""
    return [
        {
            "apiVersion": KUEUE,
            "kind": "Cohort",
            "metadata": {"name": "gpustack--person-made-1c-2g"},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpustack--person-made-4c-8g-16g"},
            "spec": {"nodeLabels": {"team": "a"}},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "team-a"},
            "spec": {"cohortName": "gpustack--person-made-1c-2g", "resourceGroups": []},
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "team-a", "namespace": "default"},
            "spec": {"clusterQueue": "team-a"},
        },
        {
            "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
            "kind": "NodeFeature",
            "metadata": {"name": "cpu-epyc-1-by-hand", "namespace": "gpustack-system"},
            "spec": {"labels": {"feature.node.kubernetes.io/by-hand": "true"}},
        },
    ]


def create_person_objects(cluster: SimCluster) -> dict[tuple[str, str], str]:
    """Create :func:`person_objects`; returns (kind, name) -> uid."""
    uids = {}
    for obj in person_objects():
        stored = cluster.sim.store.create(obj, field_manager="kubectl")
        uids[(obj["kind"], obj["metadata"]["name"])] = stored["metadata"]["uid"]
    return uids


def surviving_person_objects(cluster: SimCluster) -> dict[tuple[str, str], str]:
    """(kind, name) -> uid of the person-made objects still on the server, unchanged."""
    out = {}
    for obj in person_objects():
        meta = obj["metadata"]
        stored = cluster.sim.store.get(
            obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")
        )
        if stored is not None and stored.get("spec") == obj.get("spec"):
            out[(obj["kind"], meta["name"])] = stored["metadata"]["uid"]
    return out
