"""A retiring queue's usage is trusted only once Kueue has reported on it since it stopped
admitting (docs/teams.md, "Never more admitted than exists, meanwhile").

Kueue writes a ClusterQueue's usage a moment after it admits (about a second, in v0.19.2), so
a queue retiring as teams arrive may show nothing reserved while a Workload just admitted
holds the whole pool. The worker holds it and gives its replacements nothing until Kueue has
reported on the held queue; then they get what that report leaves, and the queue goes once
the report shows it empty. The test plays Kueue's part, writing the queue's status as Kueue
does (the ``Active`` condition stamped with the generation it saw). On real Kueue:
tests/realcluster/test_teams_transitions.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.domain.chain.teams import TEAMS_CONFIGMAP, TEAMS_KEY
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    KUEUE,
    NS,
    converged,
    eventually,
    fast_config,
    kueue_objects,
    nfd_master,
    node,
    put_node,
    worker_running,
)

pytestmark = pytest.mark.anyio

GPU = "nvidia.com/gpu"
CARDS = 8
TEAMS = """
teams:
  - name: research
    namespaces: [research]
    shares: [{pools: {manufacturer: nvidia}, share: 50%}]
  - name: serving
    namespaces: [serving]
    shares: [{pools: {manufacturer: nvidia}, share: 30%}]
"""


def device_queues(sim: SimServer) -> dict[str, dict[str, Any]]:
    """The ClusterQueues with device quota, by name."""
    return {
        q["metadata"]["name"]: q
        for q in kueue_objects(sim, "ClusterQueue")
        if any(GPU in g["coveredResources"] for g in q["spec"].get("resourceGroups") or ())
    }


def device_quota(queue: dict[str, Any]) -> str:
    (amount,) = [
        r["nominalQuota"]
        for g in queue["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
        if r["name"] == GPU
    ]
    return str(amount)


def kueue_reports(sim: SimServer, name: str, reserved: int) -> None:
    """Write ClusterQueue *name*'s status as Kueue does: its usage and the ``Active``
    condition stamped with the generation it was computed for."""
    queue = sim.store.get(KUEUE, "ClusterQueue", name)
    assert queue is not None, f"ClusterQueue {name} is gone"
    meta = queue["metadata"]
    stopped = queue["spec"].get("stopPolicy") in ("Hold", "HoldAndDrain")
    flavors = [
        {
            "name": f["name"],
            "resources": [
                {"name": GPU, "total": str(reserved), "borrowed": "0"},
                {"name": "cpu", "total": "1" if reserved else "0", "borrowed": "0"},
            ],
        }
        for g in queue["spec"]["resourceGroups"]
        for f in g["flavors"]
    ]
    queue["status"] = {
        "flavorsReservation": flavors,
        "flavorsUsage": flavors,
        "reservingWorkloads": 1 if reserved else 0,
        "admittedWorkloads": 1 if reserved else 0,
        "pendingWorkloads": 0,
        "conditions": [
            {
                "type": "Active",
                "status": "False" if stopped else "True",
                "reason": "Stopped" if stopped else "Ready",
                "message": "",
                "lastTransitionTime": "2026-11-29T14:00:00Z",
                "observedGeneration": int(meta.get("generation") or 1),
            }
        ],
    }
    sim.store.update_status(queue)


async def test_a_retiring_queue_kueue_has_not_reported_on_since_its_hold_is_not_trusted(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    config = fast_config()
    for ns in ("research", "serving"):
        sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    put_node(sim, node("gpu-8", cpu="64", memory="512Gi", cards=("Tesla T4", CARDS)))
    async with nfd_master(sim), worker_running(sim_kubeconfig, config):
        await converged(sim, config)
        ((pool, queue),) = device_queues(sim).items()
        assert device_quota(queue) == str(CARDS)
        # Kueue's last report predates the Workload it has just admitted on all 8 cards.
        kueue_reports(sim, pool, reserved=0)
        sim.store.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": TEAMS_CONFIGMAP, "namespace": NS},
                "data": {TEAMS_KEY: TEAMS},
            }
        )
        team_queues = (f"{pool}-research", f"{pool}-serving")

        def retiring_held_and_replacements_empty() -> bool:
            queues = device_queues(sim)
            old = queues.get(pool)
            return (
                old is not None
                and old["spec"].get("stopPolicy") == "Hold"
                and all(name in queues for name in team_queues)
                and all(device_quota(queues[name]) == "0" for name in team_queues)
            )

        await eventually(
            retiring_held_and_replacements_empty,
            "the retiring queue held, its replacements given nothing while its report may "
            "miss work",
        )
        # Kueue reports on the held queue: the Workload holds the 8 cards.
        kueue_reports(sim, pool, reserved=CARDS)
        await eventually(
            lambda: (
                sim.store.get(KUEUE, "ClusterQueue", pool) is not None
                and all(device_quota(device_queues(sim)[n]) == "0" for n in team_queues)
            ),
            "the held queue kept while it holds the pool",
        )
        # The Workload ends; Kueue's next report shows the queue empty: it goes, and the
        # team queues get their shares of the whole pool (50 % and 30 % of 8, rounded down).
        kueue_reports(sim, pool, reserved=0)

        def shares_in_force() -> bool:
            queues = device_queues(sim)
            return pool not in queues and [
                device_quota(queues[n]) if n in queues else None for n in team_queues
            ] == ["4", "2"]

        await eventually(shares_in_force, "the retiring queue gone and the shares in force")
