"""``gpustack-operator queues`` says which nodes a pool does not count now, why and since
when, and which pools are held (docs/node-lifecycle.md, "Seeing why")."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

from gpustack_operator.cli import build_parser
from gpustack_operator.commands.queues import run_queues
from gpustack_operator.domain.plan.desired import desired_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_sim.apiserver.server import SimServer
from tests.conftest import shared_crds_dir
from tests.integration.worker.support import MANUFACTURERS, NS, node

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        shared_crds_dir() is None,
        reason="needs the Kueue and NFD CRDs from ../shared/crds (or $GPUSTACK_SHARED_CRDS)",
    ),
]


async def test_queues_names_the_withheld_nodes_of_each_pool(
    sim: SimServer, sim_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cordoned = node("gpu-b", cards=("Tesla T4", 2))
    cordoned["spec"] = {"unschedulable": True}
    nodes = [node("gpu-a", cards=("Tesla T4", 2)), cordoned]
    state = desired_state(
        nodes, ["default"], ChainPolicy(manufacturers=MANUFACTURERS, system_namespace=NS)
    )
    for obj in state.nodes:  # with the capacity labels the worker would have published
        sim.store.create(obj)
    for obj in [*state.cohorts, *state.resource_flavors, *state.cluster_queues]:
        sim.store.create(obj)
    for obj in state.local_queues:
        sim.store.create(obj)
    args = build_parser({}).parse_args(
        ["queues", "--kubeconfig", str(sim_kubeconfig), "-n", "default", "-o", "json"]
    )
    assert await anyio.to_thread.run_sync(run_queues, args) == 0
    rows = json.loads(capsys.readouterr().out)
    t4 = next(r for r in rows if r["acceleratable"])
    assert t4["quota"] == "2" and t4["stopPolicy"] in ("", "None")
    assert [(n["node"], n["reason"], n["counted"]) for n in t4["nodes"]] == [
        ("gpu-b", "cordoned", False)
    ]
    assert t4["nodes"][0]["timerAssumedRunOut"] is True
    args.output = "table"
    assert await anyio.to_thread.run_sync(run_queues, args) == 0
    out = capsys.readouterr().out
    assert f"{t4['localQueue']}: node gpu-b withheld-cordoned: " in out
    assert "does not record when this began" in out


async def test_queues_judges_nodes_with_the_timers_the_worker_published(
    sim: SimServer, sim_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node NotReady for 200 s: the worker, with --soft-grace 600, still counts it; so
    does ``queues``, reading the worker's timers ConfigMap (once it assumed the default
    120 s and said "not counted" for a node the QUOTA column still counted)."""
    from gpustack_operator.domain.node.availability import LifecycleTimers, format_time
    from gpustack_operator.domain.node.workertimers import timers_configmap

    timers = LifecycleTimers(soft_grace=600)
    since = format_time(time.time() - 200)
    flaky = node("gpu-b", cards=("Tesla T4", 2))
    flaky["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": since}
    ]
    nodes = [node("gpu-a", cards=("Tesla T4", 2)), flaky]
    policy = ChainPolicy(manufacturers=MANUFACTURERS, system_namespace=NS, lifecycle=timers)
    state = desired_state(nodes, ["default"], policy, now=time.time())
    for obj in [*state.nodes, *state.cohorts, *state.resource_flavors, *state.cluster_queues]:
        sim.store.create(obj)
    for obj in state.local_queues:
        sim.store.create(obj)
    sim.store.create(timers_configmap(timers, NS))
    args = build_parser({}).parse_args(
        ["queues", "--kubeconfig", str(sim_kubeconfig), "-n", "default", "-o", "json"]
    )
    assert await anyio.to_thread.run_sync(run_queues, args) == 0
    t4 = next(r for r in json.loads(capsys.readouterr().out) if r["acceleratable"])
    assert t4["quota"] == "4"
    assert [(n["node"], n["reason"], n["counted"]) for n in t4["nodes"]] == [
        ("gpu-b", "not-ready", True)
    ]
