"""Jobs through the worker's chain and the sim's Kueue stand-in, driven over HTTP
(docs/simulator.md, "Kueue admission stand-in"; with the real CRDs, "CEL rules")."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import anyio
import httpx
import pytest

from gpustack_sim.cluster.cluster import SimCluster
from tests.conftest import shared_crds_dir
from tests.integration.chain.support import example_nodes
from tests.integration.worker.support import node

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
T4 = ("Tesla T4", 1)

pytestmark = pytest.mark.anyio


def job(name: str, queue: str, cards: int) -> dict[str, Any]:
    """A suspended Job of one pod asking for *cards* NVIDIA cards (and 1 CPU, 1Gi)."""
    requests = {"cpu": "1", "memory": "1Gi", **({"nvidia.com/gpu": str(cards)} if cards else {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": requests}}
                    ],
                }
            },
        },
    }


async def get(http: httpx.AsyncClient, path: str) -> dict[str, Any]:
    resp = await http.get(path)
    resp.raise_for_status()
    body: dict[str, Any] = resp.json()
    return body


async def workload_of(http: httpx.AsyncClient, job_name: str) -> dict[str, Any] | None:
    items = (await get(http, f"{KUEUE}/namespaces/default/workloads"))["items"]
    for wl in items:
        if any(o["name"] == job_name for o in wl["metadata"].get("ownerReferences", [])):
            return dict(wl)
    return None


def quota_reserved(wl: Mapping[str, Any] | None) -> dict[str, Any] | None:
    for cond in ((wl or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == "QuotaReserved":
            return dict(cond)
    return None


async def until(http: httpx.AsyncClient, job_name: str, admitted: bool) -> dict[str, Any]:
    """The Job's Workload once it is admitted (or pending with a reason), polled."""
    deadline = time.monotonic() + 30
    while True:
        wl = await workload_of(http, job_name)
        cond = quota_reserved(wl)
        if wl is not None and cond is not None and (cond["status"] == "True") == admitted:
            return wl
        assert time.monotonic() < deadline, f"{job_name}: workload {wl}"
        await anyio.sleep(0.05)


async def pools(http: httpx.AsyncClient) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """The T4 and the CPU-only ClusterQueues ({} when absent), and ClusterQueue -> its
    LocalQueue in default."""
    queues = (await get(http, f"{KUEUE}/clusterqueues"))["items"]

    def having(key: str, value: str) -> dict[str, Any]:
        found = (q for q in queues if (q["metadata"].get("annotations") or {}).get(key) == value)
        return dict(next(found, {}))

    t4 = having("note.gpustack.ai/product", "Tesla-T4")
    cpu = having("note.gpustack.ai/acceleratable", "false")
    local = (await get(http, f"{KUEUE}/namespaces/default/localqueues"))["items"]
    return t4, cpu, {lq["spec"]["clusterQueue"]: lq["metadata"]["name"] for lq in local}


def credits_config(cq: Mapping[str, Any]) -> dict[str, Any] | None:
    """The transformation a credits-mode chain needs (nvidia.com/gpu -> credits); None when
    the ClusterQueues cover nvidia.com/gpu directly."""
    covered = cq["spec"]["resourceGroups"][0]["coveredResources"]
    credit = next((r for r in covered if r.startswith("credits.gpustack.ai/")), None)
    if credit is None:
        return None
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "resources": {
            "transformations": [
                {"input": "nvidia.com/gpu", "strategy": "Replace", "outputs": {credit: "1"}}
            ]
        },
    }


async def test_jobs_are_admitted_pinned_or_wait_with_a_reason() -> None:
    nodes = [node("gpu-t4-a", cards=T4), node("cpu-a")]
    async with SimCluster(nodes, ["default"], run_agents=False) as cluster:
        await cluster.converge(45)
        async with httpx.AsyncClient(base_url=cluster.sim.url, timeout=10) as http:
            t4, cpu, local = await pools(http)
            cluster.kueue_admission.configure(credits_config(t4))
            t4_queue, cpu_queue = local[t4["metadata"]["name"]], local[cpu["metadata"]["name"]]
            for body in (
                job("fits", t4_queue, 1),
                job("too-big", t4_queue, 2),
                job("no-gpus-here", cpu_queue, 1),
            ):
                (await http.post(JOBS, json=body)).raise_for_status()

            # 1 card in the T4 pool: admitted to its ClusterQueue and flavor, pinned, started.
            admitted = await until(http, "fits", admitted=True)
            flavor_name = t4["spec"]["resourceGroups"][0]["flavors"][0]["name"]
            assignment = admitted["status"]["admission"]["podSetAssignments"][0]
            assert admitted["status"]["admission"]["clusterQueue"] == t4["metadata"]["name"]
            assert set(assignment["flavors"].values()) == {flavor_name}
            flavor = await get(http, f"{KUEUE}/resourceflavors/{flavor_name}")
            started = await get(http, f"{JOBS}/fits")
            pod = started["spec"]["template"]["spec"]
            assert started["spec"]["suspend"] is False
            assert pod["nodeSelector"] == flavor["spec"]["nodeLabels"]
            for toleration in flavor["spec"].get("tolerations", []):
                assert toleration in pod["tolerations"]

            # More cards than the pool has, and a GPU Job in a CPU-only pool: both wait.
            big = quota_reserved(await until(http, "too-big", admitted=False))
            assert big is not None and big["reason"] == "Pending"
            assert big["message"].startswith(
                "couldn't assign flavors to pod set main: insufficient quota for"
            )
            assert "> maximum capacity (1)" in big["message"]
            wrong = quota_reserved(await until(http, "no-gpus-here", admitted=False))
            assert wrong is not None and "unavailable in ClusterQueue" in wrong["message"]
            assert (await get(http, f"{JOBS}/too-big"))["spec"]["suspend"] is True

            status = (await get(http, f"{KUEUE}/clusterqueues/{t4['metadata']['name']}"))["status"]
            assert status["admittedWorkloads"] == 1 and status["pendingWorkloads"] == 1

            # The first Job finishes (quota released) and a second T4 node joins: the
            # pool grows to 2 cards and the waiting Job is admitted.
            done = await get(http, f"{JOBS}/fits")
            done["status"] = {
                "conditions": [{"type": "Complete", "status": "True"}],
                "succeeded": 1,
            }
            (await http.put(f"{JOBS}/fits/status", json=done)).raise_for_status()
            cluster.add_node(node("gpu-t4-b", cards=T4))
            await cluster.converge(45)
            grown = await until(http, "too-big", admitted=True)
            assert grown["status"]["admission"]["clusterQueue"] == t4["metadata"]["name"]
            assert (await get(http, f"{JOBS}/too-big"))["spec"]["suspend"] is False

            # Deleting the CPU-pool Job deletes its Workload.
            (await http.delete(f"{JOBS}/no-gpus-here")).raise_for_status()
            deadline = time.monotonic() + 30
            while await workload_of(http, "no-gpus-here") is not None:
                assert time.monotonic() < deadline
                await anyio.sleep(0.05)


async def test_a_missing_local_queue_and_a_stopped_cluster_queue_keep_jobs_pending() -> None:
    async with SimCluster([node("cpu-a")], ["default"], run_agents=False) as cluster:
        await cluster.converge(45)
        async with httpx.AsyncClient(base_url=cluster.sim.url, timeout=10) as http:
            (await http.post(JOBS, json=job("lost", "no-such-queue", 0))).raise_for_status()
            lost = quota_reserved(await until(http, "lost", admitted=False))
            assert lost == {
                **lost,
                "reason": "Inadmissible",
                "message": "LocalQueue no-such-queue doesn't exist",
            }
            _, cpu, local = await pools(http)
            name = cpu["metadata"]["name"]
            patch = {"spec": {"stopPolicy": "Hold"}}
            resp = await http.patch(
                f"{KUEUE}/clusterqueues/{name}",
                json=patch,
                headers={"Content-Type": "application/merge-patch+json"},
            )
            resp.raise_for_status()
            (await http.post(JOBS, json=job("held", local[name], 0))).raise_for_status()
            held = quota_reserved(await until(http, "held", admitted=False))
            assert held is not None and held["message"] == f"ClusterQueue {name} is inactive"


@pytest.mark.skipif(
    shared_crds_dir() is None,
    reason="needs the Kueue and NFD CRDs from ../shared/crds (or $GPUSTACK_SHARED_CRDS)",
)
async def test_real_crd_cel_rules_accept_the_chain_and_refuse_a_broken_object() -> None:
    from gpustack_sim.command import load_crd_documents

    crds_dir = shared_crds_dir()
    assert crds_dir is not None
    crds = load_crd_documents(sorted(p for p in crds_dir.iterdir() if p.is_dir()))
    async with SimCluster(example_nodes(), ["default"], crds=crds) as cluster:
        assert cluster.sim.store.cel_rules
        await cluster.converge(60)  # every object the worker wrote passed Kueue's CEL rules
        assert cluster.problems() == []
        async with httpx.AsyncClient(base_url=cluster.sim.url, timeout=10) as http:
            flavor = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "broken"},
                "spec": {"tolerations": [{"operator": "Exists", "value": "x"}]},
            }
            resp = await http.post(f"{KUEUE}/resourceflavors", json=flavor)
            assert resp.status_code == 422
            assert resp.json()["message"] == (
                'ResourceFlavor "broken" is invalid: spec.tolerations: Invalid value: "array": '
                "a value must be empty when 'operator' is 'Exists'"
            )
            local = (await get(http, f"{KUEUE}/namespaces/default/localqueues"))["items"][0]
            local["spec"]["clusterQueue"] = "elsewhere"
            path = f"{KUEUE}/namespaces/default/localqueues/{local['metadata']['name']}"
            resp = await http.put(path, json=local)
            assert resp.status_code == 422
            assert (
                'spec.clusterQueue: Invalid value: "string": field is immutable'
                in resp.json()["message"]
            )
