"""Label repair's rules (docs/worker.md, "Label repair") without a cluster."""

from __future__ import annotations

from typing import Any

from gpustack_operator.domain.labels import LABEL_REPAIR_ANNOTATION
from gpustack_operator.domain.node.nodefeature import is_worker_label
from gpustack_operator.labelrepair import LabelsTaken, repair_request

MANAGED = "gpustack.ai/managed"
CPU = "general.feature.gpustack.ai/amd-25-1-ln-x64.cpu"


def node(labels: dict[str, str], version: str = "7") -> dict[str, Any]:
    return {"metadata": {"name": "n1", "resourceVersion": version, "labels": labels}}


def feature(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "n1-gpustack-worker", "namespace": "gpustack-system"}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"labels": labels}}


def test_a_first_sight_and_an_update_that_takes_a_published_label_mark_the_node() -> None:
    taken = LabelsTaken(is_worker_label)
    full = node({MANAGED: "true", CPU: "8", "team": "a"})
    # First sight (start-up): a label may have been taken meanwhile. A new Node is not
    # repaired all the same: its NodeFeature is written first (the reconcilers' tests).
    assert taken.create(full) and taken.take("n1") and not taken.take("n1")
    taken.mark("n1")  # a repair that failed
    assert taken.take("n1") and not taken.take("n1")
    assert taken.update(full, node({MANAGED: "true", CPU: "8", "team": "b"}))
    assert not taken.take("n1")  # a label of someone else changed
    assert taken.update(node({MANAGED: "true"}), full)  # NFD added labels
    assert not taken.take("n1")
    assert taken.update(full, node({CPU: "8", "team": "a"}))  # managed removed
    assert taken.take("n1") and not taken.take("n1")  # read once
    taken.update(full, node({MANAGED: "true", CPU: "4", "team": "a"}))  # value changed
    assert taken.delete(full) and not taken.take("n1")  # a deleted Node is forgotten


def test_a_repair_is_the_same_feature_marked_once_per_node_version() -> None:
    want = feature({MANAGED: "true", CPU: "8"})
    assert repair_request(node({MANAGED: "true", CPU: "8"}), want, want, publisher="t") is None
    lost = node({CPU: "8"}, version="9")
    marked = repair_request(lost, want, want, publisher="t")
    assert marked is not None
    assert marked["spec"] == want["spec"]
    assert marked["metadata"]["annotations"] == {LABEL_REPAIR_ANNOTATION: "9"}
    assert "annotations" not in want["metadata"]  # the desired object is left as it was
    # NFD did not apply it and the Node did not change: no second write for version 9.
    assert repair_request(lost, want, marked, publisher="t") is None
    assert repair_request(node({CPU: "8"}, version="10"), want, marked, publisher="t")
