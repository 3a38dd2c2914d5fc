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
        # The grace runs from when the worker first sees the label: wait until it has seen
        # both edits (on a loaded machine one may still be on its way when the cluster first
        # looks idle, and its grace would start after the clock's advance).
        tracker = life.cluster.worker.availability
        await life.settled(
            lambda: all("driver-upgrade" in tracker.seen(n) for n in ("gpu-a", "gpu-b"))
        )
        assert "stopPolicy" not in life.device_queue()["spec"], "in the maintenance grace"
        await life.advance(TIMERS.maintenance_grace + 1)
        await life.settled(lambda: life.device_queue()["spec"].get("stopPolicy") == "Hold")
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


async def test_a_queue_whose_nodes_are_gone_is_held_until_nothing_is_reserved() -> None:
    async with lifecycle_cluster(pool) as life:
        queue = local_queue(life)
        name = life.device_queue()["metadata"]["name"]
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
        for node_name in ("gpu-a", "gpu-b"):
            life.cluster.sim.store.delete("v1", "Node", node_name)

        def held() -> bool:
            found = life.cluster.sim.store.get(KUEUE, "ClusterQueue", name)
            return found is not None and found["spec"].get("stopPolicy") == "Hold"

        await life.settled(held)
        assert admitted(life, "running") is True and evicted(life) == []
        life.cluster.sim.store.delete("batch/v1", "Job", "running", "default")
        await life.settled(lambda: life.cluster.sim.store.get(KUEUE, "ClusterQueue", name) is None)


async def test_a_shrink_below_usage_is_said_in_an_event_and_a_counter() -> None:
    from gpustack_operator.controllers.clusterqueue import QUOTA_BELOW_USAGE

    async with lifecycle_cluster(pool) as life:
        queue = local_queue(life)
        name = life.device_queue()["metadata"]["name"]
        life.cluster.sim.store.create(
            {
                **job("big", queue, 3),
                "metadata": {
                    "name": "big",
                    "namespace": "default",
                    "labels": {"kueue.x-k8s.io/queue-name": queue},
                },
            }
        )
        await life.settled(lambda: admitted(life, "big") is True)

        def used() -> bool:
            status = life.device_queue().get("status") or {}
            return any(
                r["name"] == GPU and r.get("total") == "3"
                for f in status.get("flavorsUsage") or []
                for r in f["resources"]
            )

        await life.settled(used)
        before = QUOTA_BELOW_USAGE.labels(clusterqueue=name)._value.get()
        life.edit("gpu-a", lambda n: n["spec"].update(unschedulable=True))
        await life.settled()
        await life.advance(TIMERS.soft_grace + 1)
        assert life.gpus() == 2
        assert QUOTA_BELOW_USAGE.labels(clusterqueue=name)._value.get() == before + 1

        def said() -> bool:
            return any(
                e.get("reason") == "QuotaBelowUsage" and e["involvedObject"]["name"] == name
                for e in life.cluster.sim.store.list("v1", "Event", "default")
            )

        await life.settled(said)
        assert admitted(life, "big") is True and evicted(life) == []


def label_removed(n: dict[str, Any]) -> None:
    """The upgrade's label goes first, the node still cordoned (its device plugin back)."""
    n["metadata"]["labels"].pop(UPGRADE, None)
    n["status"]["allocatable"][GPU] = "2"


def uncordoned(n: dict[str, Any]) -> None:
    n["spec"].pop("unschedulable", None)


@pytest.mark.parametrize("label_first", [True, False], ids=["label-first", "uncordon-first"])
async def test_maintenance_ended_in_either_order_keeps_the_hold_until_the_quota_is_back(
    label_first: bool,
) -> None:
    """docs/node-lifecycle.md, "Whole-pool Hold": whichever goes first, the upgrade's label
    or the cordon, the pool stays held with its quota until its nodes count again, so the
    quota never drops below what is admitted (once, label-first lifted the Hold and left
    the pool at quota 0 for the whole join window with work running above it)."""
    async with lifecycle_cluster(pool) as life:
        queue = local_queue(life)
        life.cluster.sim.store.create(
            {
                **job("running", queue, 2),
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

        def both_upgrading() -> bool:  # each node's signal seen at this very clock
            verdicts = [life.tracker.verdict(n) for n in ("gpu-a", "gpu-b")]
            return all(v is not None and v.reason == "driver-upgrade" for v in verdicts)

        await life.settled(both_upgrading)
        await life.advance(TIMERS.maintenance_grace + 1)
        assert life.device_queue()["spec"]["stopPolicy"] == "Hold"

        steps = (label_removed, uncordoned) if label_first else (uncordoned, label_removed)
        for step in steps:
            for name in ("gpu-a", "gpu-b"):
                life.edit(name, step)
            await life.settled()
            assert life.device_queue()["spec"].get("stopPolicy") == "Hold", step.__name__
            assert life.gpus() == 4, step.__name__
            await life.advance(TIMERS.join_window / 2)
            assert life.device_queue()["spec"].get("stopPolicy") == "Hold", step.__name__
            assert life.gpus() == 4, step.__name__
        await life.advance(TIMERS.join_window + 1)
        assert life.device_queue()["spec"].get("stopPolicy") in (None, "None")
        assert life.gpus() == 4
        assert admitted(life, "running") is True and evicted(life) == []
