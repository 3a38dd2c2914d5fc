"""The per-node verdicts the worker publishes for ``queues`` (docs/node-lifecycle.md,
"Seeing why"): read back as written, bounded, and a verdict past its ``until`` or of another
Node of the same name is not used."""

from __future__ import annotations

import json

from gpustack_operator.domain.node.availability import DeviceBasis, NodeAvailability, Severity
from gpustack_operator.domain.node.workerverdicts import (
    MAX_BYTES,
    MAX_NODES,
    OMITTED_ANNOTATION,
    in_force,
    verdicts_configmap,
    verdicts_from_configmap,
)

CORDONED = NodeAvailability(
    "gpu-a", True, "cordoned", Severity.SOFT, "cordoned", since=1000.0, until=1100.0
)
JOINING = NodeAvailability(
    "gpu-b", False, "joining", None, "back", since=900.0, until=1050.0,
    devices=DeviceBasis.CAPACITY,
)  # fmt: skip
QUIET = NodeAvailability("gpu-c", True)


def test_verdicts_are_read_back_as_published_and_quiet_nodes_left_out() -> None:
    cm = verdicts_configmap([("u-a", CORDONED), ("u-b", JOINING), ("u-c", QUIET)], "sys")
    assert list(cm["data"]) == ["gpu-b", "gpu-a"], "withheld first, nothing for a quiet node"
    assert cm["metadata"]["annotations"][OMITTED_ANNOTATION] == "0"
    back, omitted = verdicts_from_configmap(cm)
    assert omitted == 0
    assert back == {"gpu-a": ("u-a", CORDONED), "gpu-b": ("u-b", JOINING)}


def test_a_verdict_holds_for_its_node_until_its_until() -> None:
    back, _ = verdicts_from_configmap(verdicts_configmap([("u-a", CORDONED)], "sys"))
    assert in_force(back, "gpu-a", "u-a", 1050.0) == CORDONED
    assert in_force(back, "gpu-a", "u-a", 1100.0) is None, "past until: judged afresh"
    assert in_force(back, "gpu-a", "another-uid", 1050.0) is None, "a new Node of that name"
    assert in_force(back, "gpu-x", "u-x", 1050.0) is None


def test_a_big_cluster_publishes_a_bounded_configmap() -> None:
    many = [
        (f"u{i}", NodeAvailability(f"node-{i:05d}", False, "cordoned", Severity.SOFT, "x" * 200))
        for i in range(MAX_NODES + 500)
    ]
    cm = verdicts_configmap(many, "sys")
    size = sum(len(k) + len(v) for k, v in cm["data"].items())
    assert len(cm["data"]) <= MAX_NODES and size <= MAX_BYTES
    omitted = int(cm["metadata"]["annotations"][OMITTED_ANNOTATION])
    assert omitted == len(many) - len(cm["data"]) > 0
    assert verdicts_from_configmap(cm)[1] == omitted


def test_entries_that_cannot_be_read_are_skipped() -> None:
    cm = verdicts_configmap([("u-a", CORDONED)], "sys")
    cm["data"]["broken"] = "{not json"
    cm["data"]["other-version"] = json.dumps({"counted": True, "severity": "someday"})
    cm["metadata"]["annotations"][OMITTED_ANNOTATION] = "many"
    back, omitted = verdicts_from_configmap(cm)
    assert list(back) == ["gpu-a"] and omitted == 0
    assert verdicts_from_configmap(None) == ({}, 0)
