"""kubectl rolls a Deployment out against the simulator with its Deployment, ReplicaSet and
Pod lifecycle stand-ins running, as ``sim --serve`` runs them (docs/simulator.md,
"Deployment and ReplicaSet stand-in")."""

from __future__ import annotations

import json

import pytest

from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.deployments import DeploymentStandIn, ReplicaSetStandIn
from gpustack_sim.standins.podlifecycle import PodLifecycleStandIn
from tests.e2e.conftest import Kubectl

pytestmark = pytest.mark.anyio

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "worker"},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}


async def pod_names(kubectl: Kubectl) -> list[str]:
    listed = json.loads(await kubectl.out("get", "pods", "-l", "app=web", "-o", "json"))
    return sorted(
        p["metadata"]["name"]
        for p in listed["items"]
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


async def test_create_rollout_status_scale_and_pods(e2e_sim: SimServer, kubectl: Kubectl) -> None:
    e2e_sim.store.create(NODE)
    async with (
        DeploymentStandIn(e2e_sim),
        ReplicaSetStandIn(e2e_sim),
        PodLifecycleStandIn(e2e_sim),
    ):
        # `kubectl create deployment` sends protobuf, which the simulator decodes for a few
        # kinds only: the same object goes through `apply` as JSON.
        manifest = await kubectl.out(
            "create", "deployment", "web", "--image=nginx", "--replicas=2", "--dry-run=client",
            "-o", "json",
        )  # fmt: skip
        assert "deployment.apps/web created" in await kubectl.out(
            "apply", "-f", "-", stdin=manifest
        )
        rollout = await kubectl.out("rollout", "status", "deployment/web", "--timeout=30s")
        assert 'deployment "web" successfully rolled out' in rollout
        [rs_name] = (await kubectl.out("get", "rs", "-l", "app=web", "-o", "name")).split()
        rs = rs_name.removeprefix("replicaset.apps/")
        assert rs.startswith("web-")
        table = (await kubectl.out("get", "rs", rs)).splitlines()
        assert table[0].split() == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
        assert table[1].split()[:4] == [rs, "2", "2", "2"]
        names = await pod_names(kubectl)
        assert len(names) == 2 and all(n.startswith(f"{rs}-") for n in names)

        assert "deployment.apps/web scaled" in await kubectl.out(
            "scale", "deployment/web", "--replicas=3"
        )
        await kubectl.out("rollout", "status", "deployment/web", "--timeout=30s")
        assert len(await pod_names(kubectl)) == 3
        await kubectl.out("scale", "deployment/web", "--replicas=1")
        await kubectl.out("rollout", "status", "deployment/web", "--timeout=30s")
        assert len(await pod_names(kubectl)) == 1

        await kubectl.out("set", "image", "deployment/web", "nginx=nginx:1.27")
        await kubectl.out("rollout", "status", "deployment/web", "--timeout=30s")
        history = await kubectl.out("rollout", "history", "deployment/web")
        _, *rows = history.split("REVISION", 1)[1].splitlines()
        revisions = [row.split()[0] for row in rows if row.strip()]
        assert revisions == ["1", "2"]
        [pod] = await pod_names(kubectl)
        assert not pod.startswith(f"{rs}-")
