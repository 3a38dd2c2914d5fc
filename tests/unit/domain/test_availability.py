"""The availability rule (docs/node-lifecycle.md): one verdict per node, uneven timers."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_operator.domain.node.availability import (
    DeviceBasis,
    LifecycleTimers,
    NodeAvailability,
    Observed,
    Severity,
    after_verdict,
    explain_availability,
    format_time,
    node_availability,
    remember,
)
from gpustack_operator.domain.plan.desired import desired_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers

T = LifecycleTimers(soft_grace=100, maintenance_grace=1000, join_window=50, device_grace=300)
NOW = 1_800_000_000.0
A = "acceleratable.feature.gpustack.ai/"


def node(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "uid": "u", "labels": {}},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "capacity": {"cpu": "8", "nvidia.com/gpu": "4"},
            "allocatable": {"cpu": "8", "nvidia.com/gpu": "4"},
            **status,
        },
    }


def cordoned() -> dict[str, Any]:
    n = node()
    n["spec"]["unschedulable"] = True
    return n


def tainted(key: str) -> dict[str, Any]:
    n = node()
    n["spec"]["taints"] = [{"key": key, "effect": "NoSchedule"}]
    return n


def labelled(key: str, value: str) -> dict[str, Any]:
    n = node()
    n["metadata"]["labels"][key] = value
    return n


def not_ready(status: str, seconds_ago: float) -> dict[str, Any]:
    ltt = format_time(NOW - seconds_ago)
    return node(conditions=[{"type": "Ready", "status": status, "lastTransitionTime": ltt}])


class Clocked:
    """The worker's look at a node over time: remember, judge, record the verdict."""

    def __init__(self) -> None:
        self.memory: Observed | None = None

    def look(self, n: dict[str, Any], at: float) -> NodeAvailability:
        observed = remember(n, self.memory, at)
        verdict = node_availability(n, T, at, observed)
        self.memory = after_verdict(observed, verdict)
        return verdict


def test_a_ready_node_and_one_without_conditions_count() -> None:
    assert node_availability(node(), T, NOW).counted
    bare = node()
    del bare["status"]["conditions"]
    verdict = node_availability(bare, T, NOW)
    assert verdict.counted and verdict.reason == "no-conditions"
    assert explain_availability(verdict) is None


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda: tainted("node.kubernetes.io/out-of-service"), "out-of-service"),
        (lambda: tainted("node.cloudprovider.kubernetes.io/shutdown"), "shutdown"),
        (lambda: tainted("ToBeDeletedByClusterAutoscaler"), "autoscaler-removal"),
        (lambda: tainted("karpenter.sh/disrupted"), "karpenter-disruption"),
        (lambda: tainted("cloud.google.com/impending-node-termination"), "spot-notice"),
        (
            lambda: labelled("nvidia.com/gpu-driver-upgrade-state", "upgrade-failed"),
            "upgrade-failed",
        ),
    ],
)
def test_definite_signals_withhold_at_once(make: Any, code: str) -> None:
    clock = Clocked()
    assert clock.look(node(), NOW).counted
    verdict = clock.look(make(), NOW + 1)
    assert verdict.withheld and verdict.reason == code and verdict.severity is Severity.DEFINITE


def test_a_preferred_autoscaler_taint_is_no_signal() -> None:
    n = node()
    n["spec"]["taints"] = [
        {"key": "DeletionCandidateOfClusterAutoscaler", "effect": "PreferNoSchedule"}
    ]
    assert node_availability(n, T, NOW).counted


def test_a_cordon_counts_for_the_soft_grace_then_rejoins_after_the_join_window() -> None:
    clock = Clocked()
    clock.look(node(), NOW)
    during = clock.look(cordoned(), NOW + 10)
    assert during.counted and during.reason == "cordoned" and during.until == NOW + 10 + 100
    assert clock.look(cordoned(), NOW + 109).counted
    after = clock.look(cordoned(), NOW + 111)
    assert after.withheld and after.severity is Severity.SOFT
    joining = clock.look(node(), NOW + 200)
    assert joining.withheld and joining.reason == "joining" and joining.until == NOW + 250
    assert clock.look(node(), NOW + 249).withheld
    assert clock.look(node(), NOW + 251).counted


def test_a_cordon_is_maintenance_through_its_join_window_and_not_ready_is_not() -> None:
    """docs/node-lifecycle.md, "Team quotas through maintenance": a node back from a cordon
    is still away for maintenance while it rejoins; one back from NotReady is not."""
    clock = Clocked()
    clock.look(node(), NOW)
    clock.look(cordoned(), NOW + 10)
    assert clock.look(cordoned(), NOW + 111).away_for_maintenance
    joining = clock.look(node(), NOW + 200)
    assert joining.reason == "joining" and joining.away_for_maintenance
    assert not clock.look(node(), NOW + 251).away_for_maintenance
    failing = Clocked()
    failing.look(node(), NOW)
    assert not failing.look(not_ready("False", 0), NOW + 500).counted
    assert not failing.look(not_ready("False", 0), NOW + 500).away_for_maintenance
    back = failing.look(node(), NOW + 600)
    assert back.reason == "joining" and not back.away_for_maintenance


def test_not_ready_is_timed_from_the_conditions_transition() -> None:
    assert node_availability(not_ready("False", 99), T, NOW).counted
    late = node_availability(not_ready("False", 101), T, NOW)
    assert late.withheld and late.reason == "not-ready" and late.since == NOW - 101
    unknown = node_availability(not_ready("Unknown", 101), T, NOW)
    assert unknown.withheld and unknown.reason == "unreachable"


def test_planned_maintenance_counts_installed_devices_for_the_longer_grace() -> None:
    n = labelled("nvidia.com/gpu-driver-upgrade-state", "drain-required")
    n["spec"]["unschedulable"] = True  # the GPU Operator's own cordon is part of it
    n["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    clock = Clocked()
    clock.look(node(), NOW)
    during = clock.look(n, NOW + 500)
    assert during.counted and during.reason == "driver-upgrade"
    assert during.devices is DeviceBasis.INSTALLED
    after = clock.look(n, NOW + 1501)
    assert after.withheld and after.severity is Severity.PLANNED
    back = clock.look(node(), NOW + 1600)
    assert back.reason == "joining" and back.severity is Severity.PLANNED


def test_a_cordon_left_when_maintenance_ends_label_first_is_still_planned() -> None:
    """The upgrade label removed before the uncordon: the node stays withheld for planned
    maintenance, so a whole pool stays held with its quota (docs/node-lifecycle.md)."""
    n = labelled("nvidia.com/gpu-driver-upgrade-state", "drain-required")
    n["spec"]["unschedulable"] = True
    clock = Clocked()
    clock.look(node(), NOW)
    clock.look(n, NOW + 1)
    assert clock.look(n, NOW + 1002).severity is Severity.PLANNED
    left = clock.look(cordoned(), NOW + 1003)
    assert left.withheld and left.reason == "cordoned" and left.severity is Severity.PLANNED
    assert "end of planned maintenance" in left.message
    back = clock.look(node(), NOW + 1004)
    assert back.reason == "joining" and back.severity is Severity.PLANNED
    assert clock.look(node(), NOW + 1004 + 51).counted


def test_a_signal_older_than_the_maintenance_is_not_its_end() -> None:
    """Found by the chain's property test: a node NotReady (and cordoned) before a driver
    upgrade, still NotReady once it ends, is withheld for that NotReady, as before the
    upgrade and as ``plan`` shows it; taking it as the end of the maintenance held the pool
    for good. A cordon that came with the maintenance is still its end."""
    down = not_ready("Unknown", 5000)
    down["spec"]["unschedulable"] = True
    upgrading = copy.deepcopy(down)
    upgrading["metadata"]["labels"]["nvidia.com/gpu-driver-upgrade-state"] = "drain-required"
    clock = Clocked()
    clock.look(node(), NOW - 6000)
    assert clock.look(down, NOW).severity is Severity.SOFT
    assert clock.look(upgrading, NOW + 1).severity is Severity.PLANNED
    assert clock.look(upgrading, NOW + 1002).severity is Severity.PLANNED
    left = clock.look(not_ready("Unknown", 5000), NOW + 1003)
    assert left.withheld and left.reason == "unreachable" and left.severity is Severity.SOFT
    assert "end of planned maintenance" not in left.message
    # The NotReady gone and back during the maintenance is the maintenance's own.
    clock = Clocked()
    clock.look(down, NOW)
    clock.look(upgrading, NOW + 1)
    during = copy.deepcopy(upgrading)
    during["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    clock.look(during, NOW + 2)
    clock.look(upgrading, NOW + 3)
    left = clock.look(not_ready("Unknown", 0), NOW + 4)
    assert left.severity is Severity.PLANNED and "end of planned maintenance" in left.message


def test_upgrade_required_and_done_are_no_signal() -> None:
    for value in ("upgrade-required", "upgrade-done", ""):
        assert node_availability(
            labelled("nvidia.com/gpu-driver-upgrade-state", value), T, NOW
        ).counted


def test_a_mig_change_is_planned() -> None:
    for value in ("pending", "rebooting"):
        verdict = node_availability(labelled("nvidia.com/mig.config.state", value), T, None)
        assert verdict.withheld and verdict.reason == "mig-change" and verdict.assumed
    assert node_availability(labelled("nvidia.com/mig.config.state", "success"), T, NOW).counted


def test_devices_briefly_gone_count_at_capacity_within_the_device_grace() -> None:
    gone = node(allocatable={"cpu": "8", "nvidia.com/gpu": "0"})
    clock = Clocked()
    clock.look(node(), NOW)
    during = clock.look(gone, NOW + 200)
    assert during.counted and during.devices is DeviceBasis.CAPACITY
    after = clock.look(gone, NOW + 501)
    assert after.counted and after.devices is DeviceBasis.ALLOCATABLE
    assert clock.look(node(), NOW + 502).devices is DeviceBasis.ALLOCATABLE


def test_without_memory_an_undated_signal_has_run_out_its_timer() -> None:
    verdict = node_availability(cordoned(), T, NOW)
    assert verdict.withheld and verdict.assumed
    code, message = explain_availability(verdict) or ("", "")
    assert code == "withheld-cordoned" and "does not record" in message
    # the worker's first look at a node already cordoned agrees with plan
    assert Clocked().look(cordoned(), NOW).withheld


def test_a_withheld_node_gets_no_fresh_grace_while_it_flaps() -> None:
    clock = Clocked()
    clock.look(node(), NOW)
    assert clock.look(tainted("karpenter.sh/disrupted"), NOW + 1).withheld
    for t in range(2, 60, 2):
        n = cordoned() if t % 4 else node()
        assert clock.look(n, NOW + t).withheld


def nodes_of_a_pool(*states: dict[str, Any]) -> list[dict[str, Any]]:
    labels = {
        "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
        "feature.node.kubernetes.io/cpu-model.family": "25",
        "feature.node.kubernetes.io/cpu-model.id": "1",
        "feature.gpustack.ai/acceleratable": "true",
        A + "nvidia": "true",
        A + "nvidia-tesla-t4": "true",
        A + "nvidia-tesla-t4.count": "2",
        A + "nvidia-tesla-t4.product": "Tesla-T4",
        A + "nvidia-tesla-t4.memory": "15Gi",
    }
    result = []
    for i, state in enumerate(states):
        n = copy.deepcopy(state)
        n["metadata"] = {"name": f"n{i}", "labels": {**labels, **state["metadata"]["labels"]}}
        n["status"]["capacity"] = {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "100Gi"}
        n["status"]["capacity"]["nvidia.com/gpu"] = "2"
        n["status"]["allocatable"] = dict(n["status"]["capacity"])
        result.append(n)
    return result


def device_queue(nodes: list[dict[str, Any]], now: float | None = NOW) -> dict[str, Any]:
    policy = ChainPolicy(load_manufacturers({}), lifecycle=T)
    state = desired_state(nodes, [], policy, now=now)
    return next(q for q in state.cluster_queues if "nvidia" in q["metadata"]["name"])


def quota(queue: dict[str, Any]) -> dict[str, str]:
    flavor = queue["spec"]["resourceGroups"][0]["flavors"][0]
    return {r["name"]: r["nominalQuota"] for r in flavor["resources"]}


def test_a_withheld_node_leaves_the_quota_but_not_the_flavor() -> None:
    whole = device_queue(nodes_of_a_pool(node(), node()))
    half = device_queue(nodes_of_a_pool(node(), cordoned()))
    assert quota(whole)["nvidia.com/gpu"] == "4" and quota(half)["nvidia.com/gpu"] == "2"
    assert quota(half)["cpu"] == str(int(quota(whole)["cpu"]) // 2)
    none = device_queue(nodes_of_a_pool(cordoned(), cordoned()))
    assert quota(none)["nvidia.com/gpu"] == "0"
    names = [f["name"] for g in none["spec"]["resourceGroups"] for f in g["flavors"]]
    assert names == [f["name"] for g in whole["spec"]["resourceGroups"] for f in g["flavors"]]
    assert "stopPolicy" not in none["spec"]


def test_a_pool_wholly_in_planned_maintenance_is_held_with_its_quota() -> None:
    upgrading = labelled("nvidia.com/gpu-driver-upgrade-state", "pod-deletion-required")
    queue = device_queue(nodes_of_a_pool(upgrading, upgrading))
    assert queue["spec"]["stopPolicy"] == "Hold"
    assert "driver-upgrade" in queue["metadata"]["annotations"]["note.gpustack.ai/hold"]
    assert quota(queue)["nvidia.com/gpu"] == "4"
    mixed = device_queue(nodes_of_a_pool(upgrading, cordoned()))
    assert "stopPolicy" not in mixed["spec"] and quota(mixed)["nvidia.com/gpu"] == "0"


def test_a_failing_card_lowers_the_quota_without_renaming_the_flavor() -> None:
    healthy = nodes_of_a_pool(node())
    failing = copy.deepcopy(healthy)
    failing[0]["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    before, after = device_queue(healthy), device_queue(failing)
    assert quota(before)["nvidia.com/gpu"] == "2" and quota(after)["nvidia.com/gpu"] == "1"
    assert before["metadata"]["name"] == after["metadata"]["name"]
    assert quota(before)["cpu"] == quota(after)["cpu"]


def test_plan_explains_a_withheld_node() -> None:
    from gpustack_operator.domain.plan.plan import plan_state

    policy = ChainPolicy(load_manufacturers({}), lifecycle=T)
    state = plan_state(nodes_of_a_pool(node(), cordoned()), [], policy, now=NOW)
    reasons = {e.node: [r.code for r in e.reasons] for e in state.explanations}
    assert "withheld-cordoned" in reasons["n1"] and not any(
        c.startswith("withheld") for c in reasons["n0"]
    )
    assert state.availability["n1"].withheld


def test_a_new_lifecycle_taint_is_one_entry_in_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a lifecycle taint is one entry of ``LIFECYCLE_TAINTS``: the availability rule
    withholds the node at once, the node model and its view see it, and flavors never
    tolerate it (docs/node-lifecycle.md, "Signals")."""
    from gpustack_operator.domain.node import availability
    from gpustack_operator.domain.node.nodemodel import ModelSettings, node_model
    from gpustack_operator.domain.node.taints import dedication_taints

    key = "example.com/reclaimed"
    n = tainted(key)
    n["spec"]["taints"].append({"key": "dedicated", "value": "ml", "effect": "NoSchedule"})
    before = node_model(n, ModelSettings(manufacturers=load_manufacturers()))
    assert (key, "", "NoSchedule") in dedication_taints(n)
    assert Clocked().look(n, NOW).counted

    monkeypatch.setitem(availability.LIFECYCLE_TAINTS, key, "reclaim")
    clock = Clocked()
    assert clock.look(node(), NOW).counted
    verdict = clock.look(n, NOW + 1)
    assert verdict.withheld and verdict.reason == "reclaim"
    assert verdict.severity is Severity.DEFINITE
    assert dedication_taints(n) == {("dedicated", "ml", "NoSchedule")}
    model = node_model(n, ModelSettings(manufacturers=load_manufacturers()))
    assert [s.code for s in model.lifecycle.signals] == ["reclaim"]
    assert model.dedication_taints == {("dedicated", "ml", "NoSchedule")}
    assert model.view != before.view


def test_every_node_memory_without_maintenance_shares_one_empty_set() -> None:
    """The worker remembers every node; most remember no signal from before a maintenance,
    and an empty frozenset is 216 bytes each (docs/performance.md, "Memory per node")."""
    first, second = (remember(node(), None, 0.0) for _ in range(2))
    later = remember(node(), first, 10.0)
    assert first.before_maintenance == frozenset()
    assert first.before_maintenance is second.before_maintenance is later.before_maintenance


def test_a_healthy_nodes_memory_is_one_object_for_all_and_carries_no_dict() -> None:
    """docs/performance.md, "Memory per node": the worker keeps a memory and a verdict per
    node for its life, so they are slotted, and every node that shows no signal and is not
    withheld shares one memory."""
    first = remember(node(), None, 100.0)
    again = remember(node(), first, 160.0)
    assert first is again and remember(node(), None, 0.0) is first
    assert first == Observed()
    verdict = NodeAvailability(node="n", counted=True)
    assert not hasattr(first, "__dict__") and not hasattr(verdict, "__dict__")
