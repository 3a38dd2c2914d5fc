"""Pure helpers of the worker's reconcilers (controllers/): no cluster needed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.apis import kueue_resources
from gpustack_operator.cli import build_parser
from gpustack_operator.commands.plan import read_nodes_file
from gpustack_operator.commands.worker import build_config, build_options
from gpustack_operator.controllers.capacity import NotLastApplied
from gpustack_operator.domain.chain.kueueusage import has_reservations
from gpustack_operator.domain.labels import LABEL_REPAIR_ANNOTATION
from gpustack_operator.domain.node.nodefeature import worker_node_feature_with
from gpustack_operator.domain.node.nodemodel import node_view
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.runtime.cache import compact
from gpustack_operator.wiring import WorkerTiming
from gpustack_operator.worker.common import (
    NodeChanged,
    comparison_for,
    is_up_to_date,
    trim_for_worker,
)

MFRS = load_manufacturers({})


def a_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n",
            "uid": "u1",
            "resourceVersion": "5",
            "managedFields": [{"manager": "kubelet"}],
            "labels": {"gpustack.ai/managed": "true", "kubernetes.io/hostname": "n"},
            "annotations": {"feature.gpustack.ai/cpu-name": "AMD EPYC", "other": "x"},
        },
        "spec": {"podCIDR": "10.0.0.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "2"},
            "allocatable": {"cpu": "15", "memory": "60Gi", "nvidia.com/gpu": "2"},
            "conditions": [{"type": "Ready"}],
            "images": [{"names": ["x"], "sizeBytes": 1}],
            "nodeInfo": {"kubeletVersion": "v1.31"},
        },
    }


def test_the_node_transform_keeps_only_what_the_worker_reads() -> None:
    node = a_node()
    original = copy.deepcopy(node)
    trimmed = trim_for_worker(node)
    assert node == original  # the input is not modified
    assert "managedFields" not in trimmed["metadata"]
    assert trimmed["metadata"]["labels"] == node["metadata"]["labels"]
    assert trimmed["metadata"]["annotations"] == node["metadata"]["annotations"]
    assert set(trimmed["status"]) == {"capacity", "allocatable", "conditions"}
    assert trimmed["status"]["conditions"] == [{"type": "Ready"}]
    assert trimmed["spec"] == {"taints": node["spec"]["taints"]}
    node["spec"]["unschedulable"] = True
    node["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastHeartbeatTime": "x", "lastTransitionTime": "y"},
        {"type": "DiskPressure", "status": "False"},
    ]
    trimmed = trim_for_worker(node)
    assert trimmed["spec"] == {"taints": node["spec"]["taints"], "unschedulable": True}
    assert trimmed["status"]["conditions"] == [
        {"type": "Ready", "status": "True", "lastTransitionTime": "y"}
    ]
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "status": {"a": 1}}
    assert trim_for_worker(cq)["status"] == {"a": 1}


def test_nodes_the_worker_caches_share_their_strings() -> None:
    """Two Nodes decoded apart keep one copy of what they share (keys, CPU name, quantities)."""
    import json

    first, second = (trim_for_worker(json.loads(json.dumps(a_node()))) for _ in range(2))
    assert first == trim_for_worker(a_node())
    cpu_name = "feature.gpustack.ai/cpu-name"
    assert first["metadata"]["annotations"][cpu_name] is second["metadata"]["annotations"][cpu_name]
    assert first["status"]["capacity"]["memory"] is second["status"]["capacity"]["memory"]
    key_a, key_b = (next(iter(n["status"]["allocatable"])) for n in (first, second))
    assert key_a is key_b


@pytest.mark.parametrize(
    ("change", "relevant"),
    [
        (lambda n: n["status"]["conditions"].append({"type": "DiskPressure"}), False),
        (lambda n: n["metadata"].update(resourceVersion="6"), False),
        (lambda n: n["metadata"]["labels"].update({"team": "a"}), False),
        (lambda n: n["metadata"]["annotations"].update({"other": "y"}), False),
        (lambda n: n["metadata"]["labels"].update({"gpustack.ai/managed": "false"}), True),
        (lambda n: n["metadata"]["labels"].update({"kubernetes.io/arch": "arm64"}), True),
        (
            lambda n: n["metadata"]["annotations"].update({"feature.gpustack.ai/cpu-name": "Z"}),
            True,
        ),
        (lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "1"}), True),
        (lambda n: n["status"]["capacity"].update({"memory": "128Gi"}), True),
        (lambda n: n["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"), True),
        # docs/node-lifecycle.md: the availability rule's inputs
        (lambda n: n["spec"].update(unschedulable=True), True),
        (lambda n: n["status"]["conditions"][0].update(status="False"), True),
        (lambda n: n["status"]["conditions"][0].update(lastHeartbeatTime="later"), False),
        (lambda n: n["spec"]["taints"].append({"key": "karpenter.sh/disrupted"}), True),
        (
            lambda n: n["metadata"]["labels"].update(
                {"nvidia.com/gpu-driver-upgrade-state": "cordon-required"}
            ),
            True,
        ),
    ],
)
def test_node_updates_pass_only_when_the_worker_view_changes(change: Any, relevant: bool) -> None:
    old = a_node()
    new = copy.deepcopy(old)
    change(new)
    assert NodeChanged(MFRS).update(old, new) is relevant
    assert (node_view(old, MFRS) != node_view(new, MFRS)) is relevant


def flavor(**spec: Any) -> dict[str, Any]:
    return {
        "kind": "ResourceFlavor",
        "metadata": {
            "name": "f",
            "labels": {"app.kubernetes.io/managed-by": "gpustack-operator"},
            "annotations": {"note.gpustack.ai/cpu": "16"},
        },
        "spec": {"nodeLabels": {"a": "1"}, **spec},
    }


def test_up_to_date_tolerates_server_defaults_but_not_our_drift() -> None:
    want = flavor()
    have = copy.deepcopy(want)
    have["metadata"]["labels"]["extra"] = "someone's"
    have["metadata"]["annotations"]["kubectl.io/x"] = "y"
    have["spec"]["tolerations"] = []  # a default the server filled in
    assert is_up_to_date(have, want)
    assert not is_up_to_date(None, want)
    stale_note = copy.deepcopy(have)
    stale_note["metadata"]["annotations"]["note.gpustack.ai/omittedFlavors"] = "1"
    assert not is_up_to_date(stale_note, want)
    extra_node_label = copy.deepcopy(have)
    extra_node_label["spec"]["nodeLabels"]["b"] = "2"
    assert not is_up_to_date(extra_node_label, want)
    changed = copy.deepcopy(have)
    changed["metadata"]["annotations"]["note.gpustack.ai/cpu"] = "8"
    assert not is_up_to_date(changed, want)
    owned = copy.deepcopy(want)
    owned["metadata"]["ownerReferences"] = [
        {"kind": "Cohort", "name": "c", "uid": "1", "controller": True}
    ]
    assert not is_up_to_date(have, owned)
    list_shorter = flavor(groups=[{"a": 1}, {"b": 2}])
    have_list = copy.deepcopy(list_shorter)
    have_list["spec"]["groups"].pop()
    assert not is_up_to_date(have_list, list_shorter)


def test_a_new_map_field_whose_keys_shrink_is_rewritten() -> None:
    """docs/worker.md, "Writes and ownership": a field no declaration names is compared
    exactly, so nobody has to remember to list a new one."""
    want = flavor(newMap={"a": "1"})
    have = flavor(newMap={"a": "1", "b": "2"})
    assert not is_up_to_date(have, want)
    assert is_up_to_date(flavor(newMap={"a": "1"}), want)


def test_declared_fields_tolerate_server_defaults() -> None:
    queue = {
        "kind": "ClusterQueue",
        "metadata": {"name": "q"},
        "spec": {"cohortName": "c", "preemption": {"withinClusterQueue": "LowerPriority"}},
    }
    defaulted = copy.deepcopy(queue)
    defaulted["spec"]["preemption"]["borrowWithinCohort"] = {"policy": "Never"}
    defaulted["spec"]["stopPolicy"] = "None"
    assert is_up_to_date(defaulted, queue)
    moved = copy.deepcopy(defaulted)
    moved["spec"]["cohortName"] = "d"
    assert not is_up_to_date(moved, queue)


def test_every_kind_the_worker_writes_declares_its_comparison() -> None:
    nodes, _ = read_nodes_file(Path(__file__).parents[3] / "examples" / "cluster.yaml")
    state = plan_state(nodes, ["default"], ChainPolicy(MFRS))
    assert {o["kind"] for o in state.objects()} >= {"NodeFeature", "ClusterQueue", "LocalQueue"}
    assert {comparison_for(o) is not None for o in state.objects()} == {True}
    with pytest.raises(LookupError, match="Widget"):
        is_up_to_date({"kind": "Widget"}, {"kind": "Widget", "spec": {}})


@pytest.mark.parametrize(
    ("status", "reserved"),
    [
        (None, False),
        ({}, False),
        ({"pendingWorkloads": 3}, False),
        ({"admittedWorkloads": 1}, True),
        (
            {"flavorsReservation": [{"name": "f", "resources": [{"name": "cpu", "total": "0"}]}]},
            False,
        ),
        (
            {
                "flavorsReservation": [
                    {"name": "f", "resources": [{"name": "cpu", "total": "500m"}]}
                ]
            },
            True,
        ),
        ({"flavorsUsage": [{"name": "f", "resources": [{"name": "cpu", "borrowed": "1"}]}]}, True),
        ({"flavorsUsage": [{"name": "f", "resources": [{"name": "cpu", "total": "bogus"}]}]}, True),
    ],
)
def test_reservations_keep_a_cluster_queue(status: Any, reserved: bool) -> None:
    queue: dict[str, Any] = {"metadata": {"name": "q"}}
    if status is not None:
        queue["status"] = status
    assert has_reservations(queue) is reserved


def test_kueue_resources_by_version() -> None:
    # Which version the worker chooses: tests/unit/domain/test_policy.py.
    assert kueue_resources("v1beta1").cluster_queues.api_version == "kueue.x-k8s.io/v1beta1"
    assert kueue_resources().local_queues.namespaced
    with pytest.raises(ValueError, match="v1alpha1"):
        kueue_resources("v1alpha1")
    with pytest.raises(SystemExit):
        build_parser({}).parse_args(["worker", "--kueue-version", "v2"])


def test_worker_flags_and_environment() -> None:
    env = {
        "GPUSTACK_WORKER_NO_LEADER_ELECT": "true",
        "GPUSTACK_WORKER_EXCLUDED_NAMESPACES": "kube-system,batch",
        "GPUSTACK_WORKER_MANUFACTURER": "nvidia,amd",
    }
    args = build_parser(env).parse_args(["worker", "--namespace", "ops"])
    config = build_config(args)
    assert config.policy.system_namespace == "ops"
    assert config.policy.excluded_namespaces == ("kube-system", "batch")
    assert list(config.policy.manufacturers) == ["amd", "nvidia"]
    assert build_options(args).leader_election is None
    args = build_parser({}).parse_args(["worker", "--leader-election-retry-period", "500ms"])
    election = build_options(args).leader_election
    assert election is not None
    assert (election.lease_name, election.lease_namespace) == (
        "worker.gpustack.ai",
        args.system_namespace,
    )
    assert election.retry_period == 0.5
    bad = build_parser({}).parse_args(["worker", "--manufacturer", "acme"])
    with pytest.raises(ValueError, match="acme"):
        build_config(bad)


def test_capacity_coalescing_window_flag() -> None:
    """docs/configuration.md: ``--capacity-coalescing-window`` (default 1s)."""
    assert build_config(build_parser({}).parse_args(["worker"])).timing.capacity_window == 1.0
    env = {"GPUSTACK_WORKER_CAPACITY_COALESCING_WINDOW": "250ms"}
    assert build_config(build_parser(env).parse_args(["worker"])).timing.capacity_window == 0.25
    with pytest.raises(SystemExit):
        build_parser({}).parse_args(["worker", "--capacity-coalescing-window", "0s"])
    with pytest.raises(ValueError, match="capacity_window"):
        WorkerTiming(capacity_window=0)


def test_only_the_echo_of_the_capacity_write_is_dropped() -> None:
    """docs/worker.md, "Flapping nodes": a NodeFeature holding what the reconciler last
    applied is its own write's echo; anything else is repaired at once."""
    applied = NotLastApplied()
    want = {
        "kind": "NodeFeature",
        "metadata": {"name": "n-gpustack-worker", "namespace": "ns", "labels": {"a": "1"}},
        "spec": {"labels": {"x": "1"}},
    }
    echo = copy.deepcopy(want)
    echo["metadata"]["resourceVersion"] = "7"
    assert applied.create(echo) and applied.update(echo, echo)  # nothing applied yet
    applied.applying(want)
    assert not applied.create(echo)
    assert not applied.update(want, echo)
    edited = copy.deepcopy(echo)
    edited["spec"]["labels"]["x"] = "2"
    assert applied.update(echo, edited)
    other = copy.deepcopy(echo)
    other["metadata"]["name"] = "m-gpustack-worker"
    assert applied.update(other, other)
    assert applied.delete(echo)
    assert applied.update(echo, echo)  # forgotten with the object


def test_the_capacity_memo_keeps_no_copy_of_the_applied_node_feature() -> None:
    """docs/performance.md, "Memory per node": the memo of the worker's own NodeFeature is
    the node's name, uid and the labels map shared with every equal one (the cache's), not a
    copy of the whole object; it still tells the echo from an edit, a repair mark included."""
    applied = NotLastApplied()
    labels = {"feature.gpustack.ai/cpu.x": "64", "feature.gpustack.ai/ram.x": "256Gi"}
    wants = [
        worker_node_feature_with(
            {"metadata": {"name": name, "uid": f"uid-{name}"}}, labels, "gpustack-system"
        )
        for name in ("n1", "n2")
    ]
    assert wants[0] is not None and wants[1] is not None
    marked = copy.deepcopy(wants[1])
    marked["metadata"]["annotations"] = {LABEL_REPAIR_ANNOTATION: "12"}
    for want in (wants[0], marked):
        applied.applying(copy.deepcopy(want))
    memos = list(applied._applied.values())
    assert not any(isinstance(memo, dict) for memo in memos)
    assert memos[0].labels is memos[1].labels is compact(dict(labels))  # type: ignore[union-attr]
    for want in (wants[0], marked):
        echo = compact({**copy.deepcopy(want), "status": {}})
        echo["metadata"]["resourceVersion"] = "7"
        assert not applied.update(echo, echo)
    edited = copy.deepcopy(wants[0])
    edited["spec"]["labels"]["feature.gpustack.ai/cpu.x"] = "32"
    assert applied.update(edited, edited)
    assert applied.update(wants[1], wants[1])  # the repair mark is part of what was applied
