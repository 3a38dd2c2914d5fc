"""The aggregated lists and the raw views across three simulated clusters."""

from __future__ import annotations

import httpx
import pytest

from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.gateway.kinds import KIND_NAMES

from .conftest import SimCluster
from .support import all_ready, running_gateway, until

pytestmark = pytest.mark.anyio

T4_QUEUE = "gpustack--intel-xeon-platinum-8358-ln-x64-4c-16g--nvidia-tesla-t4-1d"


async def test_clusters_and_pools_aggregate_every_cluster(clusters: list[SimCluster]) -> None:
    async with (
        running_gateway([c.spec for c in clusters]) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        entries = await all_ready(client, 3)
        by_name = {e["name"]: e for e in entries}
        assert sorted(by_name) == ["east", "legacy", "west"]
        for cluster in clusters:
            entry = by_name[cluster.name]
            assert entry["kueueVersion"] == cluster.version.value
            assert entry["lastError"] is None and entry["lastSyncTime"]
            assert entry["counts"] == {
                "resourceflavors": len(cluster.state.resource_flavors),
                "cohorts": len(cluster.state.cohorts),
                "clusterqueues": len(cluster.state.cluster_queues),
                "localqueues": len(cluster.state.local_queues),
            }

        pools = (await client.get("/apis/v1/pools")).json()["items"]
        expected = sorted(
            (c.name, q["metadata"]["name"]) for c in clusters for q in c.state.cluster_queues
        )
        assert sorted((p["cluster"], p["name"]) for p in pools) == expected
        # Every pool names its cohort, whichever field its Kueue version uses.
        for cluster in clusters:
            field = "cohortName" if cluster.version is KueueVersion.V1BETA2 else "cohort"
            want = {q["metadata"]["name"]: q["spec"][field] for q in cluster.state.cluster_queues}
            got = {p["name"]: p["cohort"] for p in pools if p["cluster"] == cluster.name}
            assert got == want

        t4 = next(p for p in pools if p["cluster"] == "east" and p["name"] == T4_QUEUE)
        assert t4["manufacturer"] == "nvidia" and t4["product"] == "Tesla-T4"
        assert t4["acceleratable"] is True
        assert t4["unit"] == {"cpu": "4", "memory": "16Gi", "accelerators": 1}
        # gpu-t4-1 and gpu-t4-2 each bring one flavor of 8 CPUs, 32Gi and 2 cards.
        assert t4["nominalQuota"]["nvidia.com/gpu"] == "4"
        assert t4["nominalQuota"]["cpu"] == "16"
        assert t4["nominalQuota"]["memory"] == "64Gi"
        assert t4["usage"] is None and t4["workloads"] is None

        only_west = (await client.get("/apis/v1/pools", params={"cluster": "west"})).json()
        assert {p["cluster"] for p in only_west["items"]} == {"west"}
        assert len(only_west["items"]) == len(clusters[1].state.cluster_queues)

        for cluster in clusters:
            for kind, objects in zip(
                KIND_NAMES,
                (
                    cluster.state.resource_flavors,
                    cluster.state.cohorts,
                    cluster.state.cluster_queues,
                    cluster.state.local_queues,
                ),
                strict=True,
            ):
                body = (await client.get(f"/apis/v1/clusters/{cluster.name}/{kind}")).json()
                names = sorted(o["metadata"]["name"] for o in body["items"])
                assert names == sorted(o["metadata"]["name"] for o in objects)

        missing = await client.get("/apis/v1/clusters/nowhere/clusterqueues")
        assert missing.status_code == 404 and "nowhere" in missing.json()["message"]
        bad_kind = await client.get("/apis/v1/clusters/east/nodes")
        assert bad_kind.status_code == 404 and "clusterqueues" in bad_kind.json()["message"]
        assert (await client.get("/apis/v1/pools", params={"cluster": "x"})).status_code == 404
        one = (await client.get("/apis/v1/clusters/legacy")).json()
        assert one["name"] == "legacy" and one["kueueVersion"] == "v1beta1"

        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 200
        metrics = (await client.get("/metrics")).text
        assert 'gpustack_gateway_clusters{status="Ready"}' in metrics


async def test_usage_comes_from_the_cluster_queue_status(clusters: list[SimCluster]) -> None:
    east = clusters[0]
    async with (
        running_gateway([east.spec]) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        await all_ready(client, 1)
        queue = east.sim.store.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", T4_QUEUE)
        assert queue is not None
        flavors = [f["name"] for f in queue["spec"]["resourceGroups"][0]["flavors"]]
        queue["status"] = {
            "pendingWorkloads": 2,
            "reservingWorkloads": 1,
            "admittedWorkloads": 1,
            "flavorsUsage": [
                {
                    "name": flavors[0],
                    "resources": [
                        {"name": "cpu", "total": "4", "borrowed": "0"},
                        {"name": "memory", "total": "16Gi", "borrowed": "0"},
                        {"name": "nvidia.com/gpu", "total": "1", "borrowed": "0"},
                    ],
                }
            ],
            "flavorsReservation": [
                {"name": flavors[0], "resources": [{"name": "cpu", "total": "8"}]},
            ],
        }
        east.sim.store.update_status(queue)

        async def pool() -> dict[str, object]:
            items = (await client.get("/apis/v1/pools")).json()["items"]
            found: dict[str, object] = next(p for p in items if p["name"] == T4_QUEUE)
            return found

        t4 = await until(pool, lambda p: p["usage"] is not None, "the usage of the T4 pool")
        assert t4["usage"] == {"cpu": "4", "nvidia.com/gpu": "1", "memory": "16Gi"}
        assert t4["reservation"] == {"cpu": "8"}
        assert t4["workloads"] == {"pending": 2, "reserving": 1, "admitted": 1}
