"""The device-manager agent against the simulated API server (real sockets, real runtime)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from gpustack_operator.devicemanager.agent import NODE_FEATURES, DeviceManagerAgent
from gpustack_operator.devicemanager.detection import DetectionConfig
from gpustack_operator.devicemanager.detectors.nvidia import NvidiaDetector
from gpustack_operator.domain.labels import LABEL_REPAIR_ANNOTATION
from gpustack_operator.runtime.client import Client, NotFound
from gpustack_operator.runtime.manager import Manager, ManagerOptions
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_operator.runtime.resources import NODES
from gpustack_sim.apiserver.server import SimServer
from tests.unit.devicemanager.fakes import FakeNvml, a10g, tesla_t4

pytestmark = [
    pytest.mark.anyio,
]

NS = "gpustack-system"
P = "acceleratable.feature.gpustack.ai/"
SIM = "sim.gpustack.ai/devices"
T4 = json.dumps([{"manufacturer": "nvidia", "name": "Tesla T4", "memoryMiB": 15360, "count": 2}])
A10G = json.dumps([{"manufacturer": "nvidia", "name": "NVIDIA A10G", "memoryMiB": 23028}])


async def eventually(
    condition: Callable[[], Any],
    what: str,
    timeout: float = 60.0,  # noqa: ASYNC109 - a deadline, part of this helper's contract
) -> None:
    """Return as soon as *condition()* (sync or async) holds; fail after *timeout*."""
    with anyio.move_on_after(timeout):
        while not await _holds(condition):  # noqa: ASYNC110 - polls API state, not an event
            await anyio.sleep(0.01)
        return
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


async def _holds(condition: Callable[[], Any]) -> bool:
    value = condition()
    if hasattr(value, "__await__"):
        value = await value
    return bool(value)


def node(name: str, *, managed: bool = True, devices: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"kubernetes.io/hostname": name}}
    if managed:
        meta["labels"]["gpustack.ai/managed"] = "true"
    if devices is not None:
        meta["annotations"] = {SIM: devices}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


async def feature(client: Client, node_name: str) -> dict[str, Any] | None:
    try:
        return await client.get(NODE_FEATURES, f"{node_name}-gpustack-device-manager", NS)
    except NotFound:
        return None


async def feature_labels(client: Client, node_name: str) -> dict[str, str] | None:
    obj = await feature(client, node_name)
    return None if obj is None else dict(obj["spec"].get("labels") or {})


def idle(manager: Manager) -> bool:
    return all(
        len(c.queue) == 0 and not c.queue.processing() and c.queue.num_waiting() == 0
        for c in manager.controllers
    )


@asynccontextmanager
async def agent_running(
    kubeconfig: Path, node_name: str, **kw: Any
) -> AsyncIterator[DeviceManagerAgent]:
    """A manager with one agent, running in the background until the block ends."""
    client = await Client.connect(kubeconfig)
    options = ManagerOptions(
        component="gpustack-device-manager",
        health_probe_bind_address="0",
        metrics_bind_address="0",
        graceful_shutdown_timeout=5.0,
    )
    manager = Manager(client, options)
    simulated = kw.pop("simulated", True)
    config = kw.pop("config", None) or DetectionConfig.from_environment(["nvidia"], env={})
    agent = DeviceManagerAgent(
        manager,
        config,
        node_name=node_name,
        system_namespace=NS,
        simulated=simulated,
        **kw,
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(manager.run)
            try:
                yield agent
            finally:
                tg.cancel_scope.cancel()
    finally:
        await client.close()


async def settled(agent: DeviceManagerAgent) -> None:
    """The agent reconciled at least once and has nothing queued or running."""
    await eventually(
        lambda: agent.last_identity is not None and idle(agent.manager), "the agent to settle"
    )


async def test_creates_updates_and_prunes_the_node_feature(
    sim: SimServer, sim_kubeconfig: Path, admin_kubeconfig: Path
) -> None:
    async with await Client.connect(admin_kubeconfig) as client:  # the test's own steps
        created = await client.create(NODES, node("node-a", devices=T4))
        async with agent_running(sim_kubeconfig, "node-a"):
            await eventually(lambda: feature(client, "node-a"), "the NodeFeature")
            obj = await feature(client, "node-a")
            assert obj is not None
            labels = obj["spec"]["labels"]
            assert labels[P + "nvidia-tesla-t4.count"] == "2"
            assert labels[P + "nvidia-tesla-t4.memory"] == "15Gi"
            assert labels["feature.gpustack.ai/acceleratable"] == "true"
            meta = obj["metadata"]
            assert meta["labels"]["nfd.node.kubernetes.io/node-name"] == "node-a"
            assert meta["labels"]["app.kubernetes.io/part-of"] == "gpustack-operator-device-manager"
            (owner,) = meta["ownerReferences"]
            assert (owner["kind"], owner["name"], owner["uid"]) == (
                "Node",
                "node-a",
                created["metadata"]["uid"],
            )
            # the sim devices annotation changes: re-detect, replace, prune the T4 keys
            await client.patch(NODES, "node-a", {"metadata": {"annotations": {SIM: A10G}}})

            async def a10g_only() -> bool:
                got = await feature_labels(client, "node-a")
                return (
                    got is not None
                    and P + "nvidia-a10g" in got
                    and P + "nvidia-tesla-t4" not in got
                )

            await eventually(a10g_only, "the A10G labels to replace the T4 ones")
            got = await feature_labels(client, "node-a")
            assert got is not None
            assert not any("tesla-t4" in key for key in got)
            assert got[P + "nvidia-a10g.memory"] == "22Gi"


async def test_a_restart_makes_no_writes_when_nothing_changed(
    sim: SimServer, sim_kubeconfig: Path, admin_kubeconfig: Path
) -> None:
    async with await Client.connect(admin_kubeconfig) as client:  # the test's own steps
        await client.create(NODES, node("node-a", devices=T4))
        async with agent_running(sim_kubeconfig, "node-a") as agent:
            await eventually(lambda: feature(client, "node-a"), "the NodeFeature")
            await settled(agent)
        published = await feature_labels(client, "node-a")
        await client.patch(NODES, "node-a", {"metadata": {"labels": published}})  # NFD's merge
        before = sim.counters.writes("NodeFeature")
        async with agent_running(sim_kubeconfig, "node-a") as agent:
            await settled(agent)
            assert agent.nodes.has_synced and agent.features.has_synced
        assert sim.counters.writes("NodeFeature") == before


async def test_a_label_taken_while_the_agent_was_down_is_published_again_at_start(
    sim: SimServer, sim_kubeconfig: Path, admin_kubeconfig: Path
) -> None:
    """docs/worker.md, "Label repair": at start-up every Node is compared with the
    NodeFeature. Before, only an update seen while running was, and the label stayed
    removed."""
    async with await Client.connect(admin_kubeconfig) as client:  # the test's own steps
        await client.create(NODES, node("node-a", devices=T4))
        async with agent_running(sim_kubeconfig, "node-a") as agent:
            await settled(agent)
        published = await feature_labels(client, "node-a")
        assert published
        await client.patch(NODES, "node-a", {"metadata": {"labels": published}})  # NFD's merge
        taken = await client.patch(  # while no agent runs
            NODES, "node-a", {"metadata": {"labels": {P + "nvidia-tesla-t4.count": None}}}
        )
        version = taken["metadata"]["resourceVersion"]

        async def marked() -> bool:
            obj = await feature(client, "node-a")
            annotations = (obj or {}).get("metadata", {}).get("annotations") or {}
            return annotations.get(LABEL_REPAIR_ANNOTATION) == version

        async with agent_running(sim_kubeconfig, "node-a") as agent:
            await eventually(marked, "the NodeFeature to be rewritten for the Node's version")
            await settled(agent)
        assert await feature_labels(client, "node-a") == published


async def test_other_nodes_and_unmanaged_nodes_are_left_alone(
    sim: SimServer, sim_kubeconfig: Path, admin_kubeconfig: Path
) -> None:
    async with await Client.connect(admin_kubeconfig) as client:  # the test's own steps
        await client.create(NODES, node("node-a", managed=False, devices=T4))
        await client.create(NODES, node("node-b", devices=T4))
        async with agent_running(sim_kubeconfig, "node-a") as agent:
            await settled_or_skipped(agent)
            assert agent.nodes.indexer.keys() == ["node-a"]  # the field selector at work
            await client.patch(NODES, "node-b", {"metadata": {"annotations": {SIM: A10G}}})
            assert await feature(client, "node-a") is None  # not managed: skipped
            # being labelled managed is an event of its own node: now it publishes
            await client.patch(
                NODES, "node-a", {"metadata": {"labels": {"gpustack.ai/managed": "false"}}}
            )
            await eventually(lambda: feature(client, "node-a"), "the NodeFeature of node-a")
            await settled(agent)
            assert agent.nodes.indexer.keys() == ["node-a"]
        assert await feature(client, "node-b") is None


async def settled_or_skipped(agent: DeviceManagerAgent) -> None:
    await eventually(lambda: agent.nodes.has_synced and idle(agent.manager), "the first sync")


async def test_the_monitor_republishes_when_cards_change(
    sim: SimServer, sim_kubeconfig: Path, admin_kubeconfig: Path, tmp_path: Path
) -> None:
    nvml = FakeNvml([tesla_t4("GPU-0")])
    config = DetectionConfig.from_environment(
        ["nvidia"], pci_root=tmp_path, no_pci_check=True, env={}
    )
    registry = CollectorRegistry()
    async with await Client.connect(admin_kubeconfig) as client:  # the test's own steps
        await client.create(NODES, node("node-a"))
        async with agent_running(
            sim_kubeconfig,
            "node-a",
            simulated=False,
            config=config,
            library_detectors={"nvidia": NvidiaDetector(nvml)},
            monitor_period=1.05,
            metrics_registry=registry,
        ) as agent:
            await eventually(lambda: feature(client, "node-a"), "the NodeFeature")
            await settled(agent)
            nvml.gpus.append(a10g("GPU-1"))  # a card appears (hot-plug, driver reload)

            async def both() -> bool:
                got = await feature_labels(client, "node-a")
                return got is not None and P + "nvidia-a10g.count" in got

            await eventually(both, "the monitor to publish the new card")
            labels = {"manufacturer": "nvidia", "uuid": "GPU-1", "index": "1"}

            def memory() -> float | None:
                return registry.get_sample_value(
                    "gpustack_device_memory_total_bytes",
                    {"node": "node-a", "model": "NVIDIA A10G", **labels},
                )

            # The monitor refreshes the metrics of the cards it knew before it detects new
            # ones, so the new card's series can follow its labels by one monitor tick.
            await eventually(lambda: memory() is not None, "the new card's memory metric")
            assert memory() == 23028 * 2**20


async def test_serve_publishes_and_stops_cleanly_on_sigterm(
    sim: SimServer, sim_kubeconfig: Path, admin_kubeconfig: Path, tmp_path: Path
) -> None:
    """The real command on a machine without accelerators: it says so and publishes nothing."""
    async with await Client.connect(admin_kubeconfig) as client:  # the test's own steps
        await client.create(NODES, node("node-a"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")}
        command = [
            sys.executable,
            "-m",
            "gpustack_operator",
            "--log-format",
            "json",
            "device-manager",
            "serve",
            *("--kubeconfig", str(sim_kubeconfig), "--node-name", "node-a"),
            *("--pci-root", str(tmp_path), "--health-probe-bind-address", "127.0.0.1:0"),
            *("--metrics-bind-address", "127.0.0.1:0"),
        ]
        log_file = tmp_path / "serve.log"
        with log_file.open("w") as log:
            process = await anyio.open_process(
                command, env=env, stdout=subprocess.DEVNULL, stderr=log
            )
            try:
                await eventually(lambda: feature(client, "node-a"), "the NodeFeature", timeout=30)
                assert await feature_labels(client, "node-a") == {}
                process.send_signal(signal.SIGTERM)
                with anyio.fail_after(30):
                    code = await process.wait()
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        err = log_file.read_text()
        assert code == 0, err
        assert "no accelerator found" in err
        assert "signal received" in err


async def test_a_device_label_taken_from_the_node_is_published_again(
    sim: SimServer, sim_kubeconfig: Path, admin_kubeconfig: Path
) -> None:
    """docs/worker.md, "Label repair": the NodeFeature is rewritten (marked with the Node's
    resourceVersion) so NFD merges it again; a Node that only waits for NFD is left alone."""

    def repairs() -> float:
        sample = {"publisher": "device-manager"}
        return REGISTRY.get_sample_value("gpustack_label_repairs_total", sample) or 0.0

    async with await Client.connect(admin_kubeconfig) as client:  # the test's own steps
        await client.create(NODES, node("node-a", devices=T4))
        async with agent_running(sim_kubeconfig, "node-a") as agent:
            await settled(agent)
            published = await feature_labels(client, "node-a")
            assert published
            before = repairs()
            # NFD merges the labels (the Node only lacked them so far: no repair).
            await client.patch(NODES, "node-a", {"metadata": {"labels": published}})
            await eventually(
                lambda: P + "nvidia-tesla-t4.count" in agent.node()["metadata"]["labels"],
                "the merge in the cache",
            )
            await settled(agent)
            assert repairs() == before
            # A person removes one of them.
            taken = await client.patch(
                NODES, "node-a", {"metadata": {"labels": {P + "nvidia-tesla-t4.count": None}}}
            )
            version = taken["metadata"]["resourceVersion"]

            async def marked() -> bool:
                obj = await feature(client, "node-a")
                annotations = (obj or {}).get("metadata", {}).get("annotations") or {}
                return annotations.get(LABEL_REPAIR_ANNOTATION) == version

            await eventually(marked, "the NodeFeature to be rewritten for the Node's version")
            assert repairs() == before + 1
            assert await feature_labels(client, "node-a") == published
