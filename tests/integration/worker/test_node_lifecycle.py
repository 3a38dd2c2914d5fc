"""Every row of docs/node-lifecycle.md, "Signals", against the simulator: a pool of two
nodes of two cards each (quota 4), one node shows the signal; the quota at the signal,
during the grace, after it, and after recovery, with the worker on a driven clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from gpustack_operator.domain.node.availability import format_time
from tests.integration.worker.lifecycle import GPU, TIMERS, Lifecycle, gpu_node, lifecycle_cluster

pytestmark = pytest.mark.anyio

Edit = Callable[[dict[str, Any], float], None]
UPGRADE = "nvidia.com/gpu-driver-upgrade-state"
MIG = "nvidia.com/mig.config.state"


def cordon(n: dict[str, Any], _: float) -> None:
    n["spec"]["unschedulable"] = True


def uncordon(n: dict[str, Any], _: float) -> None:
    n["spec"].pop("unschedulable", None)


def ready(status: str) -> Edit:
    def edit(n: dict[str, Any], now: float) -> None:
        n["status"]["conditions"] = [
            {"type": "Ready", "status": status, "lastTransitionTime": format_time(now)}
        ]

    return edit


def taint(key: str) -> Edit:
    def edit(n: dict[str, Any], _: float) -> None:
        n["spec"]["taints"] = [{"key": key, "effect": "NoSchedule"}]

    return edit


def untaint(n: dict[str, Any], _: float) -> None:
    n["spec"].pop("taints", None)


def label(key: str, value: str | None, *, cordoned: bool = False, gpus: str | None = None) -> Edit:
    def edit(n: dict[str, Any], _: float) -> None:
        labels = n["metadata"]["labels"]
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
        if cordoned:
            n["spec"]["unschedulable"] = True
        else:
            n["spec"].pop("unschedulable", None)
        if gpus is not None:
            n["status"]["allocatable"][GPU] = gpus

    return edit


def allocatable(gpus: str) -> Edit:
    def edit(n: dict[str, Any], _: float) -> None:
        n["status"]["allocatable"][GPU] = gpus

    return edit


def no_conditions(n: dict[str, Any], _: float) -> None:
    n["status"].pop("conditions", None)


@dataclass(frozen=True)
class Row:
    """One row of the docs table: the signal, its undoing, the grace it runs on, and the
    pool's GPU quota at the signal, in the grace, after it, after recovery (once the join
    window has passed; ``rejoining``: during it)."""

    signal: Edit
    recover: Edit
    grace: float
    at_signal: int
    during: int
    after: int
    recovered: int
    rejoining: int | None = None


SOFT, PLANNED, DEVICE = TIMERS.soft_grace, TIMERS.maintenance_grace, TIMERS.device_grace
ROWS: dict[str, Row] = {
    "ready": Row(ready("True"), ready("True"), SOFT, 4, 4, 4, 4),
    "no-conditions": Row(no_conditions, ready("True"), SOFT, 4, 4, 4, 4),
    "cordon": Row(cordon, uncordon, SOFT, 4, 4, 2, 4, rejoining=2),
    "not-ready": Row(ready("False"), ready("True"), SOFT, 4, 4, 2, 4, rejoining=2),
    "unreachable": Row(ready("Unknown"), ready("True"), SOFT, 4, 4, 2, 4, rejoining=2),
    "out-of-service": Row(
        taint("node.kubernetes.io/out-of-service"), untaint, SOFT, 2, 2, 2, 4, rejoining=2
    ),
    "cloud-shutdown": Row(
        taint("node.cloudprovider.kubernetes.io/shutdown"), untaint, SOFT, 2, 2, 2, 4, rejoining=2
    ),
    "autoscaler-removal": Row(
        taint("ToBeDeletedByClusterAutoscaler"), untaint, SOFT, 2, 2, 2, 4, rejoining=2
    ),
    "karpenter-disruption": Row(
        taint("karpenter.sh/disrupted"), untaint, SOFT, 2, 2, 2, 4, rejoining=2
    ),
    "spot-notice": Row(
        taint("cloud.google.com/impending-node-termination"), untaint, SOFT, 2, 2, 2, 4, rejoining=2
    ),
    "upgrade-failed": Row(
        label(UPGRADE, "upgrade-failed", cordoned=True),
        label(UPGRADE, "upgrade-done"),
        SOFT,
        2,
        2,
        2,
        4,
        rejoining=2,
    ),
    "driver-upgrade": Row(
        label(UPGRADE, "pod-deletion-required", cordoned=True, gpus="0"),
        label(UPGRADE, "upgrade-done", gpus="2"),
        PLANNED,
        4,
        4,
        2,
        4,
        rejoining=2,
    ),
    "mig-change": Row(
        label(MIG, "pending", gpus="0"),
        label(MIG, "success", gpus="2"),
        PLANNED,
        4,
        4,
        2,
        4,
        rejoining=2,
    ),
    "devices-briefly-gone": Row(allocatable("0"), allocatable("2"), DEVICE, 4, 4, 2, 4),
    "failing-card": Row(allocatable("1"), allocatable("2"), DEVICE, 4, 4, 3, 4),
}


def pool(clock: Any) -> list[dict[str, Any]]:
    return [gpu_node("gpu-a", clock), gpu_node("gpu-b", clock)]


async def show(life: Lifecycle, edit: Edit) -> None:
    life.edit("gpu-a", lambda n: edit(n, life.clock.now))
    await life.settled()


@pytest.mark.parametrize("row", list(ROWS), ids=list(ROWS))
async def test_each_signal_moves_the_quota_as_the_table_says(row: str) -> None:
    r = ROWS[row]
    async with lifecycle_cluster(pool) as life:
        flavors = life.flavors()
        assert life.gpus() == 4
        await show(life, r.signal)
        assert life.gpus() == r.at_signal, "at the signal"
        await life.advance(r.grace / 2)
        assert life.gpus() == r.during, "during the grace"
        await life.advance(r.grace / 2 + 1)
        assert life.gpus() == r.after, "after the grace"
        assert life.flavors() == flavors, "withholding renames no flavor"
        await show(life, r.recover)
        if r.rejoining is not None:
            assert life.gpus() == r.rejoining, "in the join window"
        await life.advance(TIMERS.join_window + 1)
        assert life.gpus() == r.recovered, "after recovery"
        assert life.flavors() == flavors


async def test_a_deleting_node_stops_counting_at_once_and_a_new_one_counts() -> None:
    async with lifecycle_cluster(pool) as life:
        life.edit("gpu-a", lambda n: n["metadata"].update(finalizers=["example.com/hold"]))
        await life.settled()
        life.cluster.sim.store.delete("v1", "Node", "gpu-a")
        await life.settled(lambda: life.gpus() == 2)
        released = life.stored("gpu-a")
        released["metadata"]["finalizers"] = []
        life.cluster.sim.store.update(released)  # the last finalizer goes: the Node is gone
        await life.settled(lambda: life.cluster.sim.store.get("v1", "Node", "gpu-a") is None)
        life.cluster.sim.store.create(gpu_node("gpu-a", life.clock))
        await life.settled(lambda: life.gpus() == 4)


async def test_a_withheld_node_says_why_in_an_event_and_the_gauge() -> None:
    from gpustack_operator.worker.availability import NODES_WITHHELD

    async with lifecycle_cluster(pool) as life:
        await show(life, cordon)
        await life.advance(SOFT + 1)
        verdict = life.tracker.verdict("gpu-a")
        assert verdict is not None and verdict.withheld and verdict.reason == "cordoned"
        assert NODES_WITHHELD.labels(reason="cordoned")._value.get() >= 1

        def withheld_event() -> bool:
            events = life.cluster.sim.store.list("v1", "Event", "default")
            return any(
                e.get("reason") == "NodeWithheld"
                and e["involvedObject"]["name"] == "gpu-a"
                and "cordoned" in e.get("message", "")
                for e in events
            )

        await life.settled(withheld_event)


def gfd_pool(clock: Any) -> list[dict[str, Any]]:
    from gpustack_operator.commands.plan import read_nodes_file
    from tests.integration.chain.support import REPO

    nodes, _ = read_nodes_file(REPO / "examples" / "gfd-a100.yaml")
    return [dict(n) for n in nodes]


async def test_a_mig_change_keeps_the_last_good_device_facts() -> None:
    """GFD publishes MIG-INVALID with count 0 while mig-manager is mid-change, and the device
    plugin is paused: the worker keeps the labels it published before, so the flavor keeps
    its name and, during the grace, the node its installed cards."""
    async with lifecycle_cluster(gfd_pool) as life:
        flavors, before = life.flavors(), life.gpus()
        assert before == 16
        feature = life.cluster.sim.store.get(
            "nfd.k8s-sigs.io/v1alpha1",
            "NodeFeature",
            "dgx-a100-1-gpustack-worker",
            "gpustack-system",
        )
        assert feature is not None

        def mid_change(n: dict[str, Any]) -> None:
            labels = n["metadata"]["labels"]
            labels[MIG] = "pending"
            labels["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
            labels["nvidia.com/gpu.count"] = "0"
            n["status"]["allocatable"][GPU] = "0"

        life.edit("dgx-a100-1", mid_change)
        await life.settled()
        assert life.flavors() == flavors and life.gpus() == 16
        kept = life.cluster.sim.store.get(
            "nfd.k8s-sigs.io/v1alpha1",
            "NodeFeature",
            "dgx-a100-1-gpustack-worker",
            "gpustack-system",
        )
        assert kept is not None and kept["spec"] == feature["spec"]
        await life.advance(TIMERS.maintenance_grace + 1)
        assert life.flavors() == flavors and life.gpus() == 8


def _events(life: Lifecycle, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for ns in ("default", "gpustack-system")
        for e in life.cluster.sim.store.list("v1", "Event", ns)
        if e.get("reason") == reason
    ]


async def test_a_device_plugin_down_past_its_grace_keeps_the_flavor_at_quota_0() -> None:
    """docs/node-lifecycle.md: a flavor never leaves its queue while its nodes exist. Every
    node's device plugin down past ``--device-grace`` (kubelet then reports the resource as
    0 in capacity too) leaves the flavor listed with quota 0 and a Warning Event saying why;
    once, the queue's resource groups became ``[]`` without a word."""
    async with lifecycle_cluster(pool) as life:
        flavors = life.flavors()
        for name in ("gpu-a", "gpu-b"):
            life.edit(name, lambda n: allocatable("0")(n, life.clock.now))

        def both_short() -> bool:
            verdicts = [life.tracker.verdict(n) for n in ("gpu-a", "gpu-b")]
            return all(v is not None and v.reason == "devices-short" for v in verdicts)

        await life.settled(both_short)
        assert life.gpus() == 4, "within the grace: counted at capacity"
        await life.advance(DEVICE + 1)
        for name in ("gpu-a", "gpu-b"):
            life.edit(name, lambda n: n["status"]["capacity"].update({GPU: "0"}))
        await life.advance(1)
        assert life.flavors() == flavors, "the flavor stays in its queue"
        assert life.gpus() == 0
        await life.settled(lambda: bool(_events(life, "NoDevicesAdvertised")))
        message = _events(life, "NoDevicesAdvertised")[0]["message"]
        assert flavors[0] in message and "device plugin" in message, message
        for name in ("gpu-a", "gpu-b"):
            life.edit(name, lambda n: allocatable("2")(n, life.clock.now))
            life.edit(name, lambda n: n["status"]["capacity"].update({GPU: "2"}))
        await life.settled(lambda: life.gpus() == 4)
        assert life.flavors() == flavors


async def test_the_worker_publishes_its_timers_for_queues() -> None:
    """docs/node-lifecycle.md, "Timers": the ConfigMap ``queues`` reads them from."""
    from gpustack_operator.domain.node.workertimers import TIMERS_CONFIGMAP, timers_from_configmap

    async with lifecycle_cluster(pool) as life:

        def published() -> bool:
            found = life.cluster.sim.store.get(
                "v1", "ConfigMap", TIMERS_CONFIGMAP, "gpustack-system"
            )
            return timers_from_configmap(found) == TIMERS

        await life.settled(published)


async def test_queues_shows_the_verdicts_the_worker_published(tmp_path: Any) -> None:
    """docs/node-lifecycle.md, "Seeing why": a cordon the worker saw begin is in its grace,
    counted; a node uncordoned is in its join window, not counted. Neither is on the Node,
    so ``queues`` once said "not counted, timer assumed run out" for the first and nothing
    for the second; it now shows the verdicts the worker publishes."""
    import json
    import sys

    import anyio

    from gpustack_operator.domain.node.workerverdicts import (
        VERDICTS_CONFIGMAP,
        verdicts_from_configmap,
    )

    async with lifecycle_cluster(pool) as life:
        kubeconfig = life.cluster.sim.write_kubeconfig(tmp_path / "kubeconfig")
        command = [sys.executable, "-m", "gpustack_operator", "queues"]
        command += ["--kubeconfig", str(kubeconfig), "-n", "default"]

        async def queues(output: str) -> str:
            # A process of its own: the worker's logs share this one's stdout.
            done = await anyio.run_process([*command, "-o", output], check=True)
            return done.stdout.decode()

        def published(reason: str, counted: bool) -> Callable[[], bool]:
            def seen() -> bool:
                found = life.cluster.sim.store.get(
                    "v1", "ConfigMap", VERDICTS_CONFIGMAP, "gpustack-system"
                )
                verdicts, _ = verdicts_from_configmap(found)
                got = verdicts.get("gpu-a")
                return got is not None and (got[1].reason, got[1].counted) == (reason, counted)

            return seen

        async def shown() -> list[tuple[str, str, bool, str]]:
            rows = json.loads(await queues("json"))
            return [
                (n["node"], n["reason"], n["counted"], n.get("judgedBy", ""))
                for row in rows
                if row["acceleratable"]
                for n in row["nodes"]
            ]

        await show(life, cordon)
        await life.settled(published("cordoned", True))
        assert life.gpus() == 4
        assert await shown() == [("gpu-a", "cordoned", True, "worker")]
        await life.advance(SOFT + 1)
        await life.settled(published("cordoned", False))
        await show(life, uncordon)
        await life.settled(published("joining", False))
        assert life.gpus() == 2
        assert await shown() == [("gpu-a", "joining", False, "worker")]
        out = await queues("table")
        assert "node gpu-a withheld-joining: " in out and "(the worker's verdict)" in out
