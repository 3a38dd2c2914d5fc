"""``gpustack-operator queues`` against the simulated cluster (docs/workloads.md, "Finding a
pool"): one row per LocalQueue, the unit in words, the quota, and the usage read from the
ClusterQueue's status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from gpustack_operator.apis import kueue_resources
from gpustack_operator.cli import build_parser
from gpustack_operator.commands.policy_flags import policy_from_args
from gpustack_operator.commands.queues import fetch_queues, pool_rows, render_table, run_queues
from gpustack_operator.domain.declarationstatus import (
    STATUS_CONFIGMAP,
    DeclarationStatus,
    status_data,
)
from gpustack_operator.domain.plan.desired import desired_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.runtime.client import Client
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


def t4_queue(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (queue,) = [
        o
        for o in objects
        if o["kind"] == "ClusterQueue" and "nvidia-tesla-t4" in o["metadata"]["name"]
    ]
    return queue


async def test_queues_lists_pools_with_usage_from_status(
    sim: SimServer, sim_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    nodes = [node("gpu-a", cards=("Tesla T4", 2)), node("gpu-b", cards=("Tesla T4", 2))]
    state = desired_state(
        nodes, ["team-a"], ChainPolicy(manufacturers=MANUFACTURERS, system_namespace=NS)
    )
    for obj in [*state.cohorts, *state.resource_flavors, *state.cluster_queues]:
        sim.store.create(obj)
    for obj in state.local_queues:
        sim.store.create(obj)
    queue = t4_queue(state.cluster_queues)
    resource = next(r for r in queue["spec"]["resourceGroups"][0]["coveredResources"] if "/" in r)
    # Kueue writes the usage through the status subresource; so does this test.
    client = await Client.connect(sim_kubeconfig)
    try:
        res = kueue_resources("v1beta2").cluster_queues
        live = await client.get(res, queue["metadata"]["name"])
        flavor = queue["spec"]["resourceGroups"][0]["flavors"][0]["name"]
        usage = [{"name": flavor, "resources": [{"name": resource, "total": "1"}]}]
        live["status"] = {"flavorsUsage": usage, "flavorsReservation": usage}
        await client.replace(res, live, subresource="status")
    finally:
        await client.close()

    args = build_parser({}).parse_args(
        ["queues", "--kubeconfig", str(sim_kubeconfig), "-n", "team-a", "-o", "json"]
    )
    fetched = await fetch_queues(args, policy_from_args(args))
    assert not isinstance(fetched, str), fetched
    cluster_queues, local_queues, levels = fetched
    rows = pool_rows(cluster_queues, local_queues, levels=levels)
    (t4,) = [r for r in rows if r["clusterQueue"] == queue["metadata"]["name"]]
    assert t4["unit"].startswith("1x Tesla-T4, ")
    assert (t4["resource"], t4["quota"], t4["reserved"], t4["used"]) == (resource, "4", "1", "1")
    local = next(
        lq for lq in state.local_queues if lq["spec"]["clusterQueue"] == t4["clusterQueue"]
    )
    assert t4["localQueue"] == local["metadata"]["name"]
    assert local["metadata"]["labels"]["gpustack.ai/device-model"] == "tesla-t4"
    assert local["metadata"]["annotations"]["gpustack.ai/unit"] == t4["unit"]
    cpu_rows = [r for r in rows if not r["acceleratable"]]
    assert cpu_rows and all(r["resource"] == "cpu" and r["used"] == "0" for r in cpu_rows)

    # The command itself (its own event loop, so in a thread): -o json, then the table.
    assert await anyio.to_thread.run_sync(run_queues, args) == 0
    assert json.loads(capsys.readouterr().out) == rows
    args.output = "table"
    assert await anyio.to_thread.run_sync(run_queues, args) == 0
    table = capsys.readouterr().out.splitlines()
    assert table == render_table(rows).splitlines()
    assert table[0].split() == ["LOCALQUEUE", "UNIT", "RESOURCE", "QUOTA", "RESERVED", "USED"]
    (line,) = [x for x in table if x.startswith(t4["localQueue"])]
    assert line.split()[-4:] == [resource, "4", "1", "1"]


async def test_queues_shows_the_declarations_the_worker_has_in_force(
    sim: SimServer, sim_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/worker.md, "Declarations in force": under the table, the teams and declared
    pools the worker published as in force, and the last refusal and why."""
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    if sim.store.get("v1", "Namespace", NS) is None:
        sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    state = desired_state(
        [node("gpu-a", cards=("Tesla T4", 2))],
        ["team-a"],
        ChainPolicy(manufacturers=MANUFACTURERS, system_namespace=NS),
    )
    for obj in [*state.cohorts, *state.resource_flavors, *state.cluster_queues]:
        sim.store.create(obj)
    for obj in state.local_queues:
        sim.store.create(obj)
    teams = DeclarationStatus(
        "teams",
        source="configmap",
        revision="41",
        in_force=("research", "serving"),
        text="teams: []",
        refused="namespace ml is in two teams (a and b): keep it in one",
        refused_revision="42",
    )
    pools = DeclarationStatus("pools", source="configmap", revision="7", in_force=("l4-flex",))
    sim.store.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": STATUS_CONFIGMAP, "namespace": NS},
            "data": {**status_data(teams), **status_data(pools)},
        }
    )
    args = build_parser({}).parse_args(
        ["queues", "--kubeconfig", str(sim_kubeconfig), "-n", "team-a"]
    )
    assert await anyio.to_thread.run_sync(run_queues, args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [
        "teams: research, serving (from ConfigMap revision 41); revision 42 refused: "
        "namespace ml is in two teams (a and b): keep it in one",
        "pools: l4-flex (from ConfigMap revision 7)",
    ]
