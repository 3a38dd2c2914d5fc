"""`plan` on a dump of nodes in every state of docs/node-lifecycle.md equals what the
simulated cluster converges to, and every withheld node is explained (docs/node-lifecycle.md,
"What the worker remembers, and what `plan` assumes")."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.cli import main
from gpustack_operator.domain.node.availability import LifecycleTimers, format_time
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.worker.support import fast_config, node

pytestmark = pytest.mark.anyio

GPU = "nvidia.com/gpu"
UPGRADE = "nvidia.com/gpu-driver-upgrade-state"
HOUR_AGO = format_time(time.time() - 3600)


def gpu(name: str, cpu: str, **changes: Any) -> dict[str, Any]:
    obj = node(name, cpu=cpu, cards=("Tesla T4", 2))
    obj["status"]["capacity"][GPU] = "2"
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": HOUR_AGO}
    ]
    obj["spec"] = {}
    for path, value in changes.items():
        section, _, key = path.partition("__")
        target = obj if section == "top" else obj[section] if section == "spec" else None
        if section == "labels":
            obj["metadata"]["labels"][key] = value
        elif section == "allocatable":
            obj["status"]["allocatable"][GPU] = value
        elif section == "ready":
            obj["status"]["conditions"][0]["status"] = value
        elif target is not None:
            target[key] = value
    return obj


def dump() -> list[dict[str, Any]]:
    """A mixed pool (16 CPUs) with a node in each state, a pool (32 CPUs) wholly in a driver
    upgrade, and a node that reports no conditions (8 CPUs)."""
    bare = node("bare", cpu="8", cards=("Tesla T4", 2))
    bare["status"].pop("conditions")
    return [
        gpu("a-ready", "16"),
        gpu("a-cordoned", "16", spec__unschedulable=True),
        gpu("a-not-ready", "16", ready__="False"),
        gpu("a-unreachable", "16", ready__="Unknown"),
        gpu(
            "a-karpenter",
            "16",
            spec__taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}],
        ),
        gpu("a-mig", "16", **{"labels__nvidia.com/mig.config.state": "rebooting"}),
        gpu("a-failed", "16", spec__unschedulable=True, **{f"labels__{UPGRADE}": "upgrade-failed"}),
        gpu("a-plugin-gone", "16", allocatable__="0"),
        gpu("a-failing-card", "16", allocatable__="1"),
        gpu("b-1", "32", spec__unschedulable=True, **{f"labels__{UPGRADE}": "drain-required"}),
        gpu("b-2", "32", spec__unschedulable=True, **{f"labels__{UPGRADE}": "cordon-required"}),
        bare,
    ]


WITHHELD = {
    "a-cordoned": "withheld-cordoned",
    "a-not-ready": "withheld-not-ready",
    "a-unreachable": "withheld-unreachable",
    "a-karpenter": "withheld-karpenter-disruption",
    "a-mig": "withheld-mig-change",
    "a-failed": "withheld-upgrade-failed",
}


def policy() -> ChainPolicy:
    return ChainPolicy(load_manufacturers({}), lifecycle=LifecycleTimers())


def gpu_quota(queue: dict[str, Any]) -> int:
    return sum(
        int(r["nominalQuota"])
        for g in queue["spec"].get("resourceGroups") or []
        for f in g["flavors"]
        for r in f["resources"]
        if r["name"] == GPU
    )


def queue_of(queues: list[dict[str, Any]], cpu: str) -> dict[str, Any]:
    """The device queue whose flavor is of nodes with *cpu* CPUs."""

    def flavors(queue: dict[str, Any]) -> list[str]:
        groups = queue["spec"].get("resourceGroups") or []
        return [f["name"] for g in groups for f in g["flavors"]]

    found = [
        q
        for q in queues
        if "nvidia" in q["metadata"]["name"] and any(f"-{cpu}c-" in f for f in flavors(q))
    ]
    assert len(found) == 1, [q["metadata"]["name"] for q in queues]
    return found[0]


def test_plan_withholds_and_explains_each_node_in_a_dump() -> None:
    state = plan_state(dump(), ["default"], policy(), now=time.time())
    reasons = {e.node: [r.code for r in e.reasons] for e in state.explanations}
    for name, code in WITHHELD.items():
        assert code in reasons[name], (name, reasons[name])
    for counted in ("a-ready", "bare", "a-plugin-gone", "a-failing-card"):
        assert not any(c.startswith("withheld") for c in reasons[counted]), reasons[counted]
    assert "withheld-driver-upgrade" in reasons["b-1"]
    mixed = queue_of(state.cluster_queues, "16")
    # a-ready 2, a-plugin-gone 0 (start unknown: its grace taken as run out), a-failing-card 1
    assert gpu_quota(mixed) == 3 and "stopPolicy" not in mixed["spec"]
    held = queue_of(state.cluster_queues, "32")
    assert held["spec"]["stopPolicy"] == "Hold" and gpu_quota(held) == 4
    assert gpu_quota(queue_of(state.cluster_queues, "8")) == 2


async def test_the_simulated_cluster_converges_to_plan_on_the_dump() -> None:
    config = fast_config(lifecycle=LifecycleTimers())
    async with SimCluster(dump(), ["default"], run_agents=False, worker_config=config) as cluster:
        await cluster.converge(60)  # the server holds exactly what plan computes
        chain = await cluster.read_back()
        reasons = {e.node: [r.code for r in e.reasons] for e in chain.explanations}
        for name, code in WITHHELD.items():
            assert code in reasons[name], (name, reasons[name])
        assert cluster.worker is not None
        tracker = cluster.worker.availability
        assert {n: f"withheld-{r}" for n, r in tracker.withheld().items()} == {
            **WITHHELD,
            "b-1": "withheld-driver-upgrade",
            "b-2": "withheld-driver-upgrade",
        }


def test_plan_explain_names_the_signal_since_and_the_assumption(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": dump()}))
    assert main(["plan", "--nodes", str(path), "--explain", "a-not-ready", "-o", "json"]) == 0
    reason = next(
        r for r in json.loads(capsys.readouterr().out)["reasons"] if r["code"].startswith("with")
    )
    assert reason["code"] == "withheld-not-ready" and HOUR_AGO in reason["message"]
    assert main(["plan", "--nodes", str(path), "--explain", "a-cordoned"]) == 0
    out = capsys.readouterr().out
    assert "withheld-cordoned" in out and "does not record when this began" in out
    assert (
        main(["plan", "--nodes", str(path), "--soft-grace", "7200", "--explain", "a-not-ready"])
        == 0
    )
    out = capsys.readouterr().out
    assert "counted-not-ready" in out and "stops counting at" in out
