"""Two vCluster tenants of one host behind the gateway: the capacity they both see is
shown once, per pool and in the totals, with the tenants that share it
(docs/worker-gateway.md, "Tenants")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpustack_operator.domain.chain.tenancy import HOST_NODES_ANNOTATION
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.gateway.cluster import ClusterSpec
from gpustack_sim.apiserver.server import SimServer

from .support import all_ready, running_gateway, start_sim

pytestmark = pytest.mark.anyio

TENANT = Path(__file__).resolve().parents[3] / "examples" / "vcluster-tenant.yaml"


def host_nodes() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load(TENANT.read_text())["items"]
    return items


@pytest.fixture
async def tenants(anyio_backend: str, tmp_path: Path) -> AsyncIterator[list[ClusterSpec]]:
    """tenant-a sees every host node; tenant-b only the A100 node and the CPU node."""
    layout = {
        "tenant-a": host_nodes(),
        "tenant-b": [n for n in host_nodes() if "t4" not in n["metadata"]["name"]],
    }
    sims: list[SimServer] = []
    specs = []
    try:
        for name, nodes in layout.items():
            sim = await start_sim(("v1beta2",))
            sims.append(sim)
            state = plan_state(nodes, ["default"], ChainPolicy(default_manufacturers()))
            for obj in [*state.resource_flavors, *state.cohorts, *state.cluster_queues]:
                sim.store.create(obj)
            specs.append(
                ClusterSpec(name, sim.write_kubeconfig(tmp_path / f"{name}.kubeconfig"), "sim")
            )
        yield specs
    finally:
        for sim in sims:
            await sim.stop()


async def test_capacity_two_tenants_share_is_counted_once(tenants: list[ClusterSpec]) -> None:
    async with (
        running_gateway(tenants) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        await all_ready(client, 2)
        body = (await client.get("/apis/v1/pools")).json()
        pools = {(p["cluster"], p["name"]): p for p in body["items"]}
        a100 = [p for p in body["items"] if p["product"] == "NVIDIA-A100-SXM4-80GB"]
        t4 = [p for p in body["items"] if p["product"] == "Tesla-T4"]
        assert [p["cluster"] for p in a100] == ["tenant-a", "tenant-b"]
        assert [p["cluster"] for p in t4] == ["tenant-a"]
        # The A100 node is seen by both tenants: one shared capacity naming both pools.
        assert a100[0]["hostNodes"] == a100[1]["hostNodes"]
        assert a100[0]["sharedWith"] == [{"cluster": "tenant-b", "name": a100[1]["name"]}]
        assert "sharedWith" not in t4[0]
        shared = {tuple(c["hostNodes"]): c for c in body["sharedCapacity"]}
        gpu = shared[tuple(a100[0]["hostNodes"])]
        assert gpu["clusters"] == ["tenant-a", "tenant-b"]
        assert gpu["nominalQuota"]["nvidia.com/gpu"] == "4"
        # Totals: the A100's 4 cards once, plus tenant-a's 2 T4 cards: 6, not 10.
        assert body["totals"]["nvidia.com/gpu"] == "6"
        naive = sum(int(p["nominalQuota"].get("nvidia.com/gpu", "0")) for p in pools.values())
        assert naive == 10
        # The CPU pools cover different host nodes (tenant-b has no T4 nodes): not shared.
        cpu = [p for p in body["items"] if not p["acceleratable"]]
        assert len({tuple(p["hostNodes"]) for p in cpu}) == 2
        assert all("sharedWith" not in p for p in cpu)
        flavor = (await client.get("/apis/v1/clusters/tenant-a/resourceflavors")).json()
        assert all(HOST_NODES_ANNOTATION in f["metadata"]["annotations"] for f in flavor["items"])
