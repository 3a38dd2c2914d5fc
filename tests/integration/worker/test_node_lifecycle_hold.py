"""Whole-pool Hold (docs/node-lifecycle.md): every node of a pool cordoned for a driver
upgrade keeps the pool's quota and holds its ClusterQueue (stopPolicy: Hold): nothing
admitted is evicted, nothing new is admitted, and the queue reopens when the nodes are back.
Kueue's part is the simulator's stand-in, which honours stopPolicy."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.chain.test_kueue_admission import job, quota_reserved
from tests.integration.worker.lifecycle import (
    GPU,
    KUEUE,
    TIMERS,
    Lifecycle,
    gpu_node,
    lifecycle_cluster,
)

pytestmark = pytest.mark.anyio
UPGRADE = "nvidia.com/gpu-driver-upgrade-state"


def pool(clock: Any) -> list[dict[str, Any]]:
    return [gpu_node("gpu-a", clock), gpu_node("gpu-b", clock)]


def upgrading(n: dict[str, Any]) -> None:
    n["metadata"]["labels"][UPGRADE] = "pod-deletion-required"
    n["spec"]["unschedulable"] = True
    n["status"]["allocatable"][GPU] = "0"


def upgraded(n: dict[str, Any]) -> None:
    n["metadata"]["labels"][UPGRADE] = "upgrade-done"
    n["spec"].pop("unschedulable", None)
    n["status"]["allocatable"][GPU] = "2"


def local_queue(life: Lifecycle) -> str:
    name = life.device_queue()["metadata"]["name"]
    (lq,) = [
        q
        for q in life.cluster.sim.store.list(KUEUE, "LocalQueue", "default")
        if q["spec"]["clusterQueue"] == name
    ]
    return str(lq["metadata"]["name"])


def admitted(life: Lifecycle, job_name: str) -> bool | None:
    """Whether the Job's Workload holds quota (None: no Workload yet)."""
    for wl in life.cluster.sim.store.list(KUEUE, "Workload", "default"):
        if any(o["name"] == job_name for o in wl["metadata"].get("ownerReferences", [])):
            cond = quota_reserved(wl)
            return cond is not None and cond["status"] == "True"
    return None


def evicted(life: Lifecycle) -> list[str]:
    return [
        wl["metadata"]["name"]
        for wl in life.cluster.sim.store.list(KUEUE, "Workload", "default")
        for c in (wl.get("status") or {}).get("conditions") or []
        if c["type"] == "Evicted" and c["status"] == "True"
    ]


async def test_a_pool_in_a_driver_upgrade_is_held_with_its_quota_and_reopens() -> None:
    async with lifecycle_cluster(pool) as life:
        queue = local_queue(life)
        life.cluster.sim.store.create(
            {
                **job("running", queue, 1),
                "metadata": {
                    "name": "running",
                    "namespace": "default",
                    "labels": {"kueue.x-k8s.io/queue-name": queue},
                },
            }
        )
        await life.settled(lambda: admitted(life, "running") is True)

        for name in ("gpu-a", "gpu-b"):
            life.edit(name, lambda n: upgrading(n))
        await life.settled()
        assert "stopPolicy" not in life.device_queue()["spec"], "in the maintenance grace"
        await life.advance(TIMERS.maintenance_grace + 1)
        held = life.device_queue()
        assert held["spec"]["stopPolicy"] == "Hold"
        assert "driver-upgrade" in held["metadata"]["annotations"]["note.gpustack.ai/hold"]
        assert life.gpus() == 4, "the pool keeps its quota"
        life.cluster.sim.store.create(
            {
                **job("waiting", queue, 1),
                "metadata": {
                    "name": "waiting",
                    "namespace": "default",
                    "labels": {"kueue.x-k8s.io/queue-name": queue},
                },
            }
        )
        await life.settled(lambda: admitted(life, "waiting") is False)
        assert admitted(life, "running") is True and evicted(life) == []

        for name in ("gpu-a", "gpu-b"):
            life.edit(name, lambda n: upgraded(n))
        await life.settled()
        assert life.device_queue()["spec"].get("stopPolicy") == "Hold", "in the join window"
        await life.advance(TIMERS.join_window + 1)
        assert life.device_queue()["spec"].get("stopPolicy") in (None, "None")
        assert "note.gpustack.ai/hold" not in life.device_queue()["metadata"]["annotations"]
        await life.settled(lambda: admitted(life, "waiting") is True)
        assert admitted(life, "running") is True and evicted(life) == []
