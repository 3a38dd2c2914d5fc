"""Watch streams: snapshot then ordered changes; unreachable clusters; removal; registration."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest
import yaml

from gpustack_operator.gateway.api import ApiOptions

from .conftest import SimCluster
from .support import (
    all_ready,
    clusters_list,
    eventually,
    running_gateway,
    until,
    watching,
)

pytestmark = pytest.mark.anyio

CQ_V1BETA2 = "kueue.x-k8s.io/v1beta2"


def _extra_queue(cluster: SimCluster, name: str) -> dict[str, Any]:
    """A copy of the cluster's first ClusterQueue under another name."""
    queue = copy.deepcopy(cluster.state.cluster_queues[0])
    queue["metadata"] = {**queue["metadata"], "name": name}
    return queue


def _names(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    def name(obj: dict[str, Any]) -> str:
        return str(obj.get("name") or obj.get("metadata", {}).get("name"))

    return [(e["type"], e["cluster"], name(e["object"])) for e in events]


async def test_changes_stream_in_order_after_the_snapshot(clusters: list[SimCluster]) -> None:
    east, west, _ = clusters
    async with (
        running_gateway([c.spec for c in clusters]) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        await all_ready(client, 3)
        async with (
            watching(client, "/apis/v1/pools") as pools,
            watching(client, "/apis/v1/clusters/east/clusterqueues") as raw,
        ):
            want = {
                (c.name, q["metadata"]["name"]) for c in clusters for q in c.state.cluster_queues
            }
            assert {(e["cluster"], e["object"]["name"]) for e in pools.snapshot()} == want
            assert all(e["type"] == "ADDED" for e in pools.snapshot())
            assert {e["object"]["metadata"]["name"] for e in raw.snapshot()} == {
                q["metadata"]["name"] for q in east.state.cluster_queues
            }

            queue = east.sim.store.create(_extra_queue(east, "gpustack--extra-1c-2g"))
            west.sim.store.create(_extra_queue(west, "gpustack--west-extra-1c-2g"))
            queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "99"
            east.sim.store.update(queue)
            east.sim.store.delete(CQ_V1BETA2, "ClusterQueue", "gpustack--extra-1c-2g")

            await eventually(lambda: len(pools.live()) >= 4, "four pool events")
            await eventually(lambda: len(raw.live()) >= 3, "three ClusterQueue events")
            east_events = [e for e in pools.live() if e["cluster"] == "east"]
            assert _names(east_events) == [
                ("ADDED", "east", "gpustack--extra-1c-2g"),
                ("MODIFIED", "east", "gpustack--extra-1c-2g"),
                ("DELETED", "east", "gpustack--extra-1c-2g"),
            ]
            assert east_events[1]["object"]["nominalQuota"]["cpu"] == "99"
            assert _names([e for e in pools.live() if e["cluster"] == "west"]) == [
                ("ADDED", "west", "gpustack--west-extra-1c-2g")
            ]
            # The per-cluster raw stream sees only east, in the same order, as raw objects.
            assert _names(raw.live()) == [
                ("ADDED", "east", "gpustack--extra-1c-2g"),
                ("MODIFIED", "east", "gpustack--extra-1c-2g"),
                ("DELETED", "east", "gpustack--extra-1c-2g"),
            ]
            assert raw.live()[0]["object"]["kind"] == "ClusterQueue"


async def test_an_unreachable_cluster_is_reported_and_comes_back(
    clusters: list[SimCluster],
) -> None:
    east, west, _ = clusters
    async with (
        running_gateway([c.spec for c in clusters]) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        await all_ready(client, 3)
        await west.sim.stop()

        def west_down(items: list[dict[str, Any]]) -> bool:
            return any(i["name"] == "west" and i["status"] == "Unreachable" for i in items)

        items = await until(lambda: clusters_list(client), west_down, "west Unreachable")
        by_name = {i["name"]: i for i in items}
        assert by_name["west"]["lastError"]
        assert by_name["east"]["status"] == "Ready" and by_name["legacy"]["status"] == "Ready"
        # The last known pools of west are still served; the others keep streaming.
        pools = (await client.get("/apis/v1/pools", params={"cluster": "west"})).json()
        assert len(pools["items"]) == len(west.state.cluster_queues)
        async with watching(client, "/apis/v1/pools") as watch:
            east.sim.store.create(_extra_queue(east, "gpustack--while-west-down-1c-2g"))
            await eventually(lambda: len(watch.live()) >= 1, "an east event while west is down")
            assert _names(watch.live()) == [("ADDED", "east", "gpustack--while-west-down-1c-2g")]

            await west.sim.start()
            await all_ready(client, 3)
            west.sim.store.create(_extra_queue(west, "gpustack--after-return-1c-2g"))
            await eventually(lambda: len(watch.live()) >= 2, "a west event after its return")
            assert _names(watch.live())[1] == ("ADDED", "west", "gpustack--after-return-1c-2g")
        entry = (await client.get("/apis/v1/clusters/west")).json()
        assert entry["status"] == "Ready" and entry["lastError"] is None


async def test_removing_a_cluster_streams_a_delete_for_everything_it_had(
    clusters: list[SimCluster],
) -> None:
    east, west, _ = clusters
    options = ApiOptions(allow_registration=True)
    async with (
        running_gateway([east.spec, west.spec], api=options) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        await all_ready(client, 2)
        async with (
            watching(client, "/apis/v1/pools") as pools,
            watching(client, "/apis/v1/clusters") as cluster_events,
            watching(client, "/apis/v1/clusters/west/localqueues") as local_queues,
        ):
            response = await client.delete("/apis/v1/clusters/west")
            assert response.status_code == 200, response.text
            want = {q["metadata"]["name"] for q in west.state.cluster_queues}
            await eventually(lambda: len(pools.live()) >= len(want), "the pool deletes")
            assert all(e["type"] == "DELETED" and e["cluster"] == "west" for e in pools.live())
            assert {e["object"]["name"] for e in pools.live()} == want
            await eventually(lambda: bool(cluster_events.live()), "the cluster delete")
            assert _names(cluster_events.live()) == [("DELETED", "west", "west")]
            await eventually(
                lambda: len(local_queues.live()) >= len(west.state.local_queues),
                "the LocalQueue deletes",
            )
            assert {e["type"] for e in local_queues.live()} == {"DELETED"}
            # A watch of the removed cluster ends: nothing more will come for it.
            await eventually(lambda: local_queues.ended, "the end of the west-only stream")

        assert [i["name"] for i in await clusters_list(client)] == ["east"]
        assert (await client.get("/apis/v1/clusters/west")).status_code == 404
        assert (await client.delete("/apis/v1/clusters/west")).status_code == 404


async def test_clusters_are_registered_at_run_time(clusters: list[SimCluster]) -> None:
    east, west, legacy = clusters
    # The allow-list names the servers registered below (docs/worker-gateway.md, "Security").
    api = ApiOptions(allow_registration=True, allowed_servers=[legacy.sim.url, west.sim.url])
    async with (
        running_gateway([east.spec], api=api) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        await all_ready(client, 1)
        kubeconfig = legacy.kubeconfig.read_text()
        created = await client.post("/apis/v1/clusters/legacy", content=kubeconfig)
        assert created.status_code == 201, created.text
        assert created.json()["name"] == "legacy"
        items = await all_ready(client, 2)
        assert {i["name"]: i["kueueVersion"] for i in items} == {
            "east": "v1beta2",
            "legacy": "v1beta1",
        }
        pools = (await client.get("/apis/v1/pools", params={"cluster": "legacy"})).json()
        assert len(pools["items"]) == len(legacy.state.cluster_queues)

        again = await client.post("/apis/v1/clusters/legacy", content=kubeconfig)
        assert again.status_code == 409
        # JSON works as well as YAML; a context that is not in the file is refused.
        as_json = yaml.safe_load(west.kubeconfig.read_text())
        wrong = await client.post(
            "/apis/v1/clusters/west", json=as_json, params={"context": "nope"}
        )
        assert wrong.status_code == 400 and "nope" in wrong.json()["message"]
        plugin = copy.deepcopy(as_json)
        plugin["users"][0]["user"] = {"exec": {"command": "/bin/sh", "apiVersion": "x"}}
        refused = await client.post("/apis/v1/clusters/west", json=plugin)
        assert refused.status_code == 400 and "exec" in refused.json()["message"]
        garbage = await client.post("/apis/v1/clusters/west", content=b"{{{ not yaml")
        assert garbage.status_code == 400
        binary = await client.post("/apis/v1/clusters/west", content=b"\xff\xfe")
        assert binary.status_code == 400 and "UTF-8" in binary.json()["message"]
        bad_name = await client.post("/apis/v1/clusters/-west", json=as_json)
        assert bad_name.status_code == 400 and "invalid cluster name" in bad_name.json()["message"]
        good = await client.post("/apis/v1/clusters/west", json=as_json, params={"context": "sim"})
        assert good.status_code == 201
        await all_ready(client, 3)

        # The private kubeconfig copy goes away with the cluster.
        runner = server.gateway.clusters["legacy"]
        copy_path = runner.owned_kubeconfig
        assert copy_path is not None and copy_path.exists()
        assert copy_path.stat().st_mode & 0o077 == 0
        assert (await client.delete("/apis/v1/clusters/legacy")).status_code == 200
        assert not copy_path.exists()


async def test_registration_is_refused_unless_enabled(clusters: list[SimCluster]) -> None:
    east = clusters[0]
    async with (
        running_gateway([east.spec]) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        posted = await client.post("/apis/v1/clusters/x", content=east.kubeconfig.read_text())
        assert posted.status_code == 403
        assert "--allow-cluster-registration" in posted.json()["message"]
        assert (await client.delete("/apis/v1/clusters/east")).status_code == 403
        assert [i["name"] for i in await clusters_list(client)] == ["east"]
