"""A vCluster tenant on shared host nodes through the simulator (docs/tenants.md): the
worker builds the chain from host-owned labels and the host's scheduler can place what Kueue
admits; a tenant on private nodes gets the chain of any cluster."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml

from gpustack_operator.domain.chain.tenancy import Tenancy, host_owned_keys
from gpustack_operator.domain.nodeview import labels_of, name_of
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.chain.test_kueue_admission import JOBS, KUEUE, get, job, pools, until

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[3]


def tenant_nodes() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load(
        (REPO / "examples" / "vcluster-tenant.yaml").read_text()
    )["items"]
    return items


async def placed_pod(http: httpx.AsyncClient, job_name: str) -> dict[str, Any]:
    """The Job's first pod once the scheduler stand-in has decided on it, polled."""
    deadline = time.monotonic() + 30
    while True:
        pods = (await get(http, "/api/v1/namespaces/default/pods"))["items"]
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if labels.get("batch.kubernetes.io/job-name") == job_name and (
                pod.get("status") or {}
            ).get("phase"):
                return dict(pod)
        assert time.monotonic() < deadline, f"{job_name}: no pod decided ({pods})"
        await anyio.sleep(0.05)


def unpooled_failures() -> float:
    """Failed reconciles of the worker's unpooled report so far, in this process."""
    found = REGISTRY.get_sample_value(
        "controller_runtime_reconcile_errors_total", {"controller": "unpooled"}
    )
    return found or 0.0


async def test_shared_node_tenant_chain_admits_and_the_host_places_a_gpu_job() -> None:
    """The worker writes no NodeFeature and installs nothing; every flavor selects host-owned
    labels only; a Job asking for one GPU is admitted and its pod lands on a host node with
    the GPU.

    Flavors built as in an ordinary cluster fail it (tried by making ``tenant_flavor``
    return the flavor unchanged): their ``nodeLabels`` are ``gpustack.ai/managed`` and
    ``acceleratable.feature.gpustack.ai/…`` labels, which the host does not own, so the
    host-owned check fails; without that check the Job is still admitted, but the host
    scheduler stand-in finds no node with those labels and its pod stays Pending
    (``Unschedulable``), as in a real tenant.
    """
    nodes = tenant_nodes()
    failures_before = unpooled_failures()
    async with SimCluster(nodes, ["default"]) as cluster:
        assert cluster.tenant.tenancy is Tenancy.SHARED_NODES
        await cluster.converge(45)
        # The unpooled report runs without the capacity controller here and still reads
        # the ResourceSlices by node (the simulator serves resource.k8s.io/v1).
        assert cluster.worker_config.dra
        assert unpooled_failures() == failures_before
        store = cluster.sim.store
        assert store.list("nfd.k8s-sigs.io/v1alpha1", "NodeFeature") == []
        assert store.list("apps/v1", "DaemonSet") == []
        assert store.list("apps/v1", "Deployment") == []
        flavors = store.list("kueue.x-k8s.io/v1beta2", "ResourceFlavor")
        assert flavors
        for flavor in flavors:
            selector = flavor["spec"]["nodeLabels"]
            matched = [
                n for n in nodes if all(labels_of(n).get(k) == v for k, v in selector.items())
            ]
            assert matched, flavor["metadata"]["name"]
            for node in matched:
                assert set(selector) <= host_owned_keys(node), flavor["metadata"]["name"]

        async with httpx.AsyncClient(base_url=cluster.sim.url, timeout=10) as http:
            t4, _, local = await pools(http)
            body = job("one-gpu", local[t4["metadata"]["name"]], 1)
            (await http.post(JOBS, json=body)).raise_for_status()
            await until(http, "one-gpu", admitted=True)
            pod = await placed_pod(http, "one-gpu")
            assert pod["status"]["phase"] == "Running", pod["status"]
            host = next(n for n in nodes if name_of(n) == pod["spec"]["nodeName"])
            assert int(host["status"]["allocatable"]["nvidia.com/gpu"]) >= 1
            assert labels_of(host)["nvidia.com/gpu.product"] == "Tesla-T4"
            quota = await get(http, f"{KUEUE}/clusterqueues/{t4['metadata']['name']}")
            assert "note.gpustack.ai/sharedCapacity" in quota["metadata"]["annotations"]


async def test_private_node_tenant_gets_the_ordinary_chain() -> None:
    """A tenant on private nodes sees its own, ordinary Nodes: NFD's stand-in and the agents
    run and the chain equals an ordinary cluster's (SimCluster.converge compares it with
    ``plan``'s for the same input, NodeFeatures included)."""
    from tests.integration.chain.support import example_nodes

    nodes = example_nodes()[:3]
    async with SimCluster(nodes, ["default"]) as cluster:
        assert cluster.tenant.tenancy is Tenancy.ORDINARY
        await cluster.converge(45)
        assert cluster.sim.store.list("nfd.k8s-sigs.io/v1alpha1", "NodeFeature")
        ordinary = cluster.expected().as_list()
    policy = ChainPolicy(load_manufacturers(), tenancy=Tenancy.ORDINARY)
    explicit = SimCluster(nodes, ["default"], policy=policy)
    assert explicit.expected().as_list() == ordinary


async def test_pseudo_node_tenant_gets_no_pools() -> None:
    """vCluster's pseudo nodes (no devices, made-up capacity): the worker builds nothing."""
    amounts = {"cpu": "16", "memory": "32Gi", "ephemeral-storage": "100Gi", "pods": "110"}
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"vn-{i}", "labels": {"vcluster.loft.sh/fake-node": "true"}},
            "status": {"capacity": dict(amounts), "allocatable": dict(amounts)},
        }
        for i in range(2)
    ]
    async with SimCluster(nodes, ["default"]) as cluster:
        assert cluster.tenant.tenancy is Tenancy.PSEUDO_NODES
        await cluster.converge(45)
        store = cluster.sim.store
        assert store.list("kueue.x-k8s.io/v1beta2", "ResourceFlavor") == []
        assert store.list("kueue.x-k8s.io/v1beta2", "ClusterQueue") == []
        assert store.list("nfd.k8s-sigs.io/v1alpha1", "NodeFeature") == []
        back = await cluster.read_back()
        codes = {e.node: [r.code for r in e.reasons] for e in back.explanations}
        assert codes == {"vn-0": ["vcluster-pseudo-node"], "vn-1": ["vcluster-pseudo-node"]}
