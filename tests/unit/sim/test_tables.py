"""Server-side tables for kubectl get: columns, cells, JSONPath and ages."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from gpustack_sim.apiserver import discovery
from gpustack_sim.apiserver.kinds import KindInfo, KindRegistry, kinds_from_crd
from gpustack_sim.apiserver.tables import evaluate_jsonpath, human_duration, maybe_table, table_for

TABLE_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def registry(crd_docs: dict[str, list[dict[str, Any]]]) -> KindRegistry:
    reg = KindRegistry.with_builtins()
    for doc in crd_docs["kueue.x-k8s.io_clusterqueues.yaml"]:
        reg.register_all(kinds_from_crd(doc))
    return reg


def cluster_queue(registry: KindRegistry) -> KindInfo:
    info = registry.by_kind("kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert info is not None
    return info


def test_discovery_re_exports_maybe_table_for_the_server() -> None:
    assert discovery.maybe_table is maybe_table


def test_table_for_a_crd_list_uses_printer_columns(registry: KindRegistry) -> None:
    items: list[dict[str, Any]] = [
        {
            "metadata": {"name": "cq-a", "creationTimestamp": "2026-01-01T11:00:00Z"},
            "spec": {"cohortName": "gpustack", "queueingStrategy": "BestEffortFIFO"},
            "status": {"pendingWorkloads": 3},
        },
        {"metadata": {"name": "cq-b"}, "spec": {}},
    ]
    payload = {
        "kind": "ClusterQueueList",
        "metadata": {"resourceVersion": "42", "continue": "abc"},
        "items": items,
    }
    table = table_for(cluster_queue(registry), payload, now=NOW)
    assert table["kind"] == "Table"
    assert table["metadata"] == {"resourceVersion": "42", "continue": "abc"}
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Cohort",
        "Strategy",
        "Pending Workloads",
        "Admitted Workloads",
    ]
    assert [c["priority"] for c in table["columnDefinitions"]] == [0, 0, 1, 0, 1]
    assert table["rows"][0]["cells"] == ["cq-a", "gpustack", "BestEffortFIFO", 3, None]
    assert table["rows"][1]["cells"] == ["cq-b", None, None, None, None]
    assert table["rows"][0]["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": items[0]["metadata"],
    }


def test_table_for_builtin_kinds_has_age(registry: KindRegistry) -> None:
    cm = registry.by_kind("v1", "ServiceAccount")
    assert cm is not None
    obj = {
        "metadata": {
            "name": "c",
            "resourceVersion": "7",
            "creationTimestamp": "2026-01-01T11:55:00Z",
        }
    }
    table = table_for(cm, obj, include_object="Object", now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]
    assert table["rows"] == [{"cells": ["c", "5m"], "object": obj}]
    assert table["metadata"] == {"resourceVersion": "7"}


def test_config_map_table_counts_data(registry: KindRegistry) -> None:
    cm = registry.by_kind("v1", "ConfigMap")
    assert cm is not None
    obj = {"metadata": {"name": "c"}, "data": {"a": "1"}, "binaryData": {"b": ""}}
    table = table_for(cm, obj, now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    assert table["rows"][0]["cells"] == ["c", 2, None]


def test_node_table_shows_status_roles_and_wide_columns(registry: KindRegistry) -> None:
    node_kind = registry.by_kind("v1", "Node")
    assert node_kind is not None
    node = {
        "metadata": {
            "name": "n1",
            "labels": {"node-role.kubernetes.io/control-plane": ""},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.34.0", "osImage": "Ubuntu"},
        },
    }
    table = table_for(node_kind, {"items": [node], "metadata": {}}, include_object="None", now=NOW)
    definitions = table["columnDefinitions"]
    assert [c["name"] for c in definitions if c["priority"] == 0] == [
        "Name",
        "Status",
        "Roles",
        "Age",
        "Version",
    ]
    assert table["rows"] == [
        {
            "cells": [
                "n1",
                "Ready",
                "control-plane",
                "12h",
                "v1.34.0",
                "10.0.0.1",
                "<none>",
                "Ubuntu",
                "<none>",
                "<none>",
            ]
        }
    ]


def test_deployment_counts_default_to_zero(registry: KindRegistry) -> None:
    deployment = registry.by_kind("apps/v1", "Deployment")
    assert deployment is not None
    table = table_for(deployment, {"metadata": {"name": "d"}, "spec": {"replicas": 2}}, now=NOW)
    assert table["rows"][0]["cells"] == ["d", "0/2", 0, 0, None]


def test_maybe_table_follows_the_accept_header(registry: KindRegistry) -> None:
    payload: dict[str, Any] = {"kind": "ClusterQueueList", "metadata": {}, "items": []}
    plain = make_mocked_request("GET", "/apis/x", headers={"Accept": "application/json"})
    assert maybe_table(plain, cluster_queue(registry), payload) is None
    wants = make_mocked_request(
        "GET", "/apis/x?includeObject=Object", headers={"Accept": TABLE_ACCEPT}
    )
    table = maybe_table(wants, cluster_queue(registry), payload)
    assert table is not None and table["apiVersion"] == "meta.k8s.io/v1"
    old = make_mocked_request(
        "GET", "/apis/x", headers={"Accept": "application/json;as=Table;v=v1beta1;g=meta.k8s.io"}
    )
    table = maybe_table(old, cluster_queue(registry), payload)
    assert table is not None and table["apiVersion"] == "meta.k8s.io/v1beta1"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".spec.cohortName", "c"),
        (".status.conditions[1].status", "False"),
        ('.status.conditions[?(@.type=="Ready")].status', "True"),
        ("{.spec.cohortName}", "c"),
        (".spec.missing.deeper", None),
        (".status.conditions[7]", None),
    ],
)
def test_jsonpath(path: str, expected: Any) -> None:
    obj = {
        "spec": {"cohortName": "c"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Other", "status": "False"},
            ]
        },
    }
    assert evaluate_jsonpath(obj, path) == expected


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (190, "3m10s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (20 * 3600, "20h"),
        (3 * 86400 + 3600, "3d1h"),
        (400 * 86400, "400d"),
        (-3, "0s"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_job_table_shows_status_completions_and_duration(registry: KindRegistry) -> None:
    """kubectl get jobs prints STATUS, COMPLETIONS, DURATION as kube-apiserver's printJob."""
    job_kind = registry.by_kind("batch/v1", "Job")
    assert job_kind is not None
    held = {
        "metadata": {"name": "held", "creationTimestamp": "2026-01-01T11:59:00Z"},
        "spec": {
            "completions": 2,
            "parallelism": 2,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
            "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}},
        },
        "status": {"conditions": [{"type": "Suspended", "status": "True"}]},
    }
    running = {
        "metadata": {"name": "run", "creationTimestamp": "2026-01-01T11:50:00Z"},
        "spec": {"parallelism": 3},
        "status": {"startTime": "2026-01-01T11:58:30Z", "succeeded": 1},
    }
    done = {
        "metadata": {"name": "done", "creationTimestamp": "2026-01-01T11:00:00Z"},
        "spec": {},
        "status": {
            "startTime": "2026-01-01T11:00:05Z",
            "completionTime": "2026-01-01T11:00:17Z",
            "succeeded": 1,
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"},
                {"type": "Complete", "status": "True"},
            ],
        },
    }
    payload = {"kind": "JobList", "metadata": {}, "items": [held, running, done]}
    table = table_for(job_kind, payload, now=NOW)
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", 0),
        ("Status", 0),
        ("Completions", 0),
        ("Duration", 0),
        ("Age", 0),
        ("Containers", 1),
        ("Images", 1),
        ("Selector", 1),
    ]
    assert [r["cells"] for r in table["rows"]] == [
        [
            "held",
            "Suspended",
            "0/2",
            "",
            "60s",
            "main",
            "busybox",
            "batch.kubernetes.io/controller-uid=u1",
        ],
        ["run", "Running", "1/1 of 3", "90s", "10m", "", "", "<none>"],
        ["done", "Complete", "1/1", "12s", "60m", "", "", "<none>"],
    ]


def test_pod_table_shows_ready_status_and_restarts(registry: KindRegistry) -> None:
    """kubectl get pods prints READY, STATUS, RESTARTS (and IP, NODE with -o wide)."""
    pod_kind = registry.by_kind("v1", "Pod")
    assert pod_kind is not None
    containers = {"containers": [{"name": "main"}]}
    pending = {
        "metadata": {"name": "p", "creationTimestamp": "2026-01-01T11:59:50Z"},
        "spec": containers,
        "status": {"phase": "Pending"},
    }
    running = {
        "metadata": {"name": "r", "creationTimestamp": "2026-01-01T11:59:00Z"},
        "spec": {**containers, "nodeName": "n1"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.7",
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 2,
                    "state": {"running": {"startedAt": "2026-01-01T11:59:30Z"}},
                    "lastState": {"terminated": {"finishedAt": "2026-01-01T11:59:20Z"}},
                }
            ],
        },
    }
    succeeded = {
        "metadata": {"name": "s", "creationTimestamp": "2026-01-01T11:00:00Z"},
        "spec": {**containers, "nodeName": "n1"},
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                }
            ],
        },
    }
    deleting = {
        "metadata": {
            "name": "d",
            "creationTimestamp": "2026-01-01T11:00:00Z",
            "deletionTimestamp": "2026-01-01T12:00:00Z",
        },
        "spec": containers,
        "status": {"phase": "Running"},
    }
    payload = {"kind": "PodList", "metadata": {}, "items": [pending, running, succeeded, deleting]}
    table = table_for(pod_kind, payload, now=NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
        "IP",
        "Node",
        "Nominated Node",
        "Readiness Gates",
    ]
    assert [r["cells"] for r in table["rows"]] == [
        ["p", "0/1", "Pending", "0", "10s", "<none>", "<none>", "<none>", "<none>"],
        ["r", "1/1", "Running", "2 (40s ago)", "60s", "10.0.0.7", "n1", "<none>", "<none>"],
        ["s", "0/1", "Completed", "0", "60m", "<none>", "n1", "<none>", "<none>"],
        ["d", "0/1", "Terminating", "0", "60m", "<none>", "<none>", "<none>", "<none>"],
    ]
