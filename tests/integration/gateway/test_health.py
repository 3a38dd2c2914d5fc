"""Clusters that cannot be served from the start do not hold the others back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gpustack_operator.gateway import cluster as cluster_module
from gpustack_operator.gateway.cluster import ClusterSpec
from gpustack_operator.runtime.manager import Manager
from gpustack_sim.apiserver.server import SimServer

from .conftest import SimCluster
from .support import Watch, all_ready, clusters_list, eventually, running_gateway, until, watching

pytestmark = pytest.mark.anyio


async def test_dead_and_kueue_less_clusters_are_reported(
    clusters: list[SimCluster], tmp_path: Path
) -> None:
    dead = SimServer()
    await dead.start()
    dead_config = dead.write_kubeconfig(tmp_path / "dead.kubeconfig")
    await dead.stop()  # its port now refuses connections
    garbage = tmp_path / "garbage.kubeconfig"
    garbage.write_text("::: not a kubeconfig [")
    async with SimServer() as bare:  # no Kueue CRDs at all
        specs = [
            clusters[0].spec,
            ClusterSpec("dead", dead_config, "sim"),
            ClusterSpec("garbage", garbage, None),
            ClusterSpec("absent", tmp_path / "absent.kubeconfig", None),
            ClusterSpec("bare", bare.write_kubeconfig(tmp_path / "bare.kubeconfig"), None),
        ]
        async with (
            running_gateway(specs) as server,
            httpx.AsyncClient(base_url=server.url) as client,
        ):

            def settled(items: list[dict[str, Any]]) -> bool:
                status = {i["name"]: i["status"] for i in items}
                return status == {
                    "absent": "Unreachable",
                    "bare": "Unreachable",
                    "dead": "Unreachable",
                    "east": "Ready",
                    "garbage": "Unreachable",
                }

            items = await until(lambda: clusters_list(client), settled, "statuses to settle")
            by_name = {i["name"]: i for i in items}
            assert "install Kueue" in by_name["bare"]["lastError"]
            assert by_name["dead"]["lastError"]
            assert by_name["garbage"]["lastError"] and by_name["absent"]["lastError"]
            assert by_name["dead"]["lastSyncTime"] is None
            assert by_name["dead"]["counts"] == {
                "resourceflavors": 0,
                "cohorts": 0,
                "clusterqueues": 0,
                "localqueues": 0,
            }
            ready = await client.get("/readyz", params={"verbose": ""})
            assert ready.status_code == 200, ready.text
            pools = (await client.get("/apis/v1/pools")).json()["items"]
            assert {p["cluster"] for p in pools} == {"east"}
            assert (await client.get("/apis/v1/clusters/dead/cohorts")).json()["items"] == []


class _FailsOnDemand(Manager):
    """A manager whose first run fails when the test sets :attr:`trigger`."""

    trigger: anyio.Event | None = None

    async def run(self) -> None:
        trigger, _FailsOnDemand.trigger = _FailsOnDemand.trigger, None
        if trigger is None:
            await Manager.run(self)
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(Manager.run, self)
            await trigger.wait()
            raise RuntimeError("injected failure")


async def test_a_failed_watch_withdraws_the_objects_and_reconnects(
    clusters: list[SimCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    east = clusters[0]
    trigger = anyio.Event()
    monkeypatch.setattr(cluster_module, "Manager", _FailsOnDemand)
    monkeypatch.setattr(_FailsOnDemand, "trigger", trigger)
    names = {q["metadata"]["name"] for q in east.state.cluster_queues}
    async with (
        running_gateway([east.spec]) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        await all_ready(client, 1)
        async with watching(client, "/apis/v1/pools") as watch:
            assert {e["object"]["name"] for e in watch.snapshot()} == names
            trigger.set()
            await eventually(rebuilt(watch, len(names)), "the pools withdrawn and listed again")
        await all_ready(client, 1)
        events = [(e["type"], e["object"]["name"]) for e in watch.live()]
        deleted = [name for kind, name in events if kind == "DELETED"]
        assert sorted(deleted) == sorted(names)
        last_delete = max(i for i, (kind, _) in enumerate(events) if kind == "DELETED")
        assert {name for kind, name in events[last_delete + 1 :] if kind == "ADDED"} == names
        status = (await client.get("/apis/v1/clusters/east")).json()
        assert status["status"] == "Ready"


def rebuilt(watch: Watch, count: int) -> Callable[[], bool]:
    def check() -> bool:
        kinds = [e["type"] for e in watch.live()]
        return kinds.count("DELETED") >= count and kinds.count("ADDED") >= count

    return check
