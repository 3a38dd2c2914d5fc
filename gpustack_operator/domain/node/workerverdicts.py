"""The worker's per-node verdicts as it publishes them (docs/node-lifecycle.md, "Seeing
why"): what only its memory knows (when a cordon began, a node in its join window) in one
small ConfigMap, so ``queues`` shows the verdicts the quotas were computed from instead of
judging each Node afresh.

Only nodes with something to say are published (a signal, a grace, a join window), withheld
ones first, at most :data:`MAX_NODES` of them and :data:`MAX_BYTES` of text, so the
ConfigMap stays far under the API server's 1 MiB on any cluster; how many were left out is
the annotation :data:`OMITTED_ANNOTATION`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from gpustack_operator.domain.labels import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from gpustack_operator.domain.node.availability import (
    COUNTED_AS_TODAY,
    DeviceBasis,
    NodeAvailability,
    Severity,
    parse_time,
)

VERDICTS_CONFIGMAP: Final = "gpustack-worker-nodes"
"""Name of the ConfigMap, in the worker's system namespace."""
OMITTED_ANNOTATION: Final = "gpustack.ai/nodes-omitted"
"""How many nodes with something to say did not fit."""
MAX_NODES: Final = 1000
MAX_BYTES: Final = 256 * 1024

Published = Mapping[str, tuple[str, NodeAvailability]]
"""Node name -> (the Node's uid, the worker's verdict)."""


def worth_publishing(verdict: NodeAvailability) -> bool:
    """A verdict that says more than "counted, nothing to see"."""
    return bool(verdict.reason) and verdict.reason != COUNTED_AS_TODAY


def verdicts_configmap(
    verdicts: Iterable[tuple[str, NodeAvailability]], namespace: str
) -> dict[str, Any]:
    """The ConfigMap of *verdicts* ((uid, verdict) pairs): one key per node, its value the
    verdict as ``plan --explain`` prints it, with the Node's uid."""
    chosen = sorted(
        ((uid, v) for uid, v in verdicts if worth_publishing(v)),
        key=lambda pair: (pair[1].counted, pair[1].node),
    )
    data: dict[str, str] = {}
    size = 0
    omitted = 0
    for uid, verdict in chosen:
        text = json.dumps({"uid": uid, **verdict.as_dict()}, sort_keys=True)
        if len(data) >= MAX_NODES or size + len(verdict.node) + len(text) > MAX_BYTES:
            omitted += 1
            continue
        data[verdict.node] = text
        size += len(verdict.node) + len(text)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": VERDICTS_CONFIGMAP,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            "annotations": {OMITTED_ANNOTATION: str(omitted)},
        },
        "data": data,
    }


def _verdict(name: str, raw: object) -> tuple[str, NodeAvailability] | None:
    try:
        entry = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("counted"), bool):
        return None
    try:
        verdict = NodeAvailability(
            node=name,
            counted=entry["counted"],
            reason=str(entry.get("reason", "")),
            severity=Severity(entry["severity"]) if "severity" in entry else None,
            message=str(entry.get("message", "")),
            since=parse_time(entry.get("since")),
            until=parse_time(entry.get("until")),
            assumed=entry.get("timerAssumedRunOut") is True,
            devices=DeviceBasis(entry.get("devices", DeviceBasis.ALLOCATABLE.value)),
        )
    except ValueError:  # a severity or device basis of another version
        return None
    return str(entry.get("uid", "")), verdict


def verdicts_from_configmap(
    configmap: Mapping[str, Any] | None,
) -> tuple[dict[str, tuple[str, NodeAvailability]], int]:
    """The verdicts a worker published and how many it left out; entries that cannot be
    read (a worker of another version) are skipped, their nodes judged afresh."""
    if configmap is None:
        return {}, 0
    data = configmap.get("data")
    out: dict[str, tuple[str, NodeAvailability]] = {}
    if isinstance(data, Mapping):
        for name, raw in data.items():
            read = _verdict(str(name), raw)
            if read is not None:
                out[str(name)] = read
    meta = configmap.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    omitted = annotations.get(OMITTED_ANNOTATION) if isinstance(annotations, Mapping) else None
    try:
        left_out = max(0, int(omitted)) if omitted is not None else 0
    except (TypeError, ValueError):
        left_out = 0
    return out, left_out


def in_force(published: Published, name: str, uid: str, now: float) -> NodeAvailability | None:
    """The worker's verdict of node *name* if it still holds at *now*: published for this
    Node (same uid) and not past its ``until`` (then the worker judges again)."""
    found = published.get(name)
    if found is None or found[0] != uid:
        return None
    verdict = found[1]
    if verdict.until is not None and now >= verdict.until:
        return None
    return verdict
