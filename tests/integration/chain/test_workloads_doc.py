"""docs/workloads.md's Job, applied as written to the two T4 nodes of examples/cluster.yaml,
here carrying a dedication taint: the sim's Kueue stand-in, with Kueue's default
configuration, admits it to the T4 pool, and the started Job is pinned to the flavor's nodes
and tolerates their taint (docs/workloads.md, "A complete Job"; docs/worker.md,
"Tolerations")."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from gpustack_operator.domain.plan.desired import desired_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.cluster.cluster import SimCluster
from tests.conftest import shared_crds_dir
from tests.integration.chain.test_kueue_admission import KUEUE, get, quota_reserved
from tests.integration.worker.support import MANUFACTURERS, NS, node
from tests.unit.domain.test_workloads_doc import example_t4_nodes, job_example

pytestmark = pytest.mark.anyio
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


async def admitted_workload(
    http: httpx.AsyncClient, namespace: str, job_name: str
) -> dict[str, Any]:
    """The Job's Workload once its quota is reserved, polled with a deadline."""
    last: Any = None
    with anyio.move_on_after(30):
        while True:
            items = (await get(http, f"{KUEUE}/namespaces/{namespace}/workloads"))["items"]
            for wl in items:
                owners = wl["metadata"].get("ownerReferences", [])
                if any(o["name"] == job_name for o in owners):
                    last = wl
                    cond = quota_reserved(wl)
                    if cond is not None and cond["status"] == "True":
                        return dict(wl)
            await anyio.sleep(0.05)
    raise AssertionError(f"{job_name} was not admitted: {last}")


def tainted(obj: dict[str, Any], *taints: dict[str, str]) -> dict[str, Any]:
    obj["spec"] = {"taints": list(taints or (TAINT,))}
    return obj


async def test_the_documented_job_is_admitted_pinned_and_tolerated() -> None:
    job = job_example()
    namespace = job["metadata"]["namespace"]  # type: ignore[index]
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    nodes = [tainted(n) for n in example_t4_nodes()]
    async with SimCluster(nodes, [namespace]) as cluster:
        await cluster.converge(45)
        async with httpx.AsyncClient(base_url=cluster.sim.url, timeout=10) as http:
            (await http.post(jobs, json=job)).raise_for_status()
            name = job["metadata"]["name"]  # type: ignore[index]
            workload = await admitted_workload(http, namespace, name)
            queue = workload["status"]["admission"]["clusterQueue"]
            cq = await get(http, f"{KUEUE}/clusterqueues/{queue}")
            assert cq["metadata"]["annotations"]["note.gpustack.ai/product"] == "Tesla-T4"
            (flavor_name,) = set(
                workload["status"]["admission"]["podSetAssignments"][0]["flavors"].values()
            )
            flavor = await get(http, f"{KUEUE}/resourceflavors/{flavor_name}")
            assert flavor["spec"]["tolerations"] == [{**TAINT, "operator": "Equal"}]
            started = await get(http, f"{jobs}/{name}")
            pod = started["spec"]["template"]["spec"]
            assert started["spec"]["suspend"] is False
            assert pod["nodeSelector"] == flavor["spec"]["nodeLabels"]
            assert {**TAINT, "operator": "Equal"} in pod["tolerations"]


@pytest.mark.skipif(shared_crds_dir() is None, reason="needs the real Kueue CRDs (CEL rules)")
async def test_flavor_tolerations_pass_kueues_cel_rules(sim: SimServer) -> None:
    """Both toleration shapes the worker writes (Equal with a value, Exists without one)
    are accepted by the real ResourceFlavor CRD's rules."""
    team = {"key": "team", "effect": "NoExecute"}
    nodes = [
        tainted(node("gpu-a", cards=("Tesla T4", 2)), TAINT, team),
        tainted(node("gpu-b", cards=("Tesla T4", 2)), team, TAINT),
    ]
    state = desired_state(nodes, [], ChainPolicy(manufacturers=MANUFACTURERS, system_namespace=NS))
    (flavor,) = [f for f in state.resource_flavors if "nvidia" in f["metadata"]["name"]]
    assert [t["operator"] for t in flavor["spec"]["tolerations"]] == ["Equal", "Exists"]
    async with httpx.AsyncClient(base_url=sim.url) as http:
        resp = await http.post(f"{KUEUE}/resourceflavors", json=flavor)
    assert resp.status_code == 201, resp.text
