"""The Deployment and ReplicaSet stand-ins roll Deployments out as kube-controller-manager
does on a kind cluster (docs/simulator.md, "Deployment and ReplicaSet stand-in")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.deployments import (
    DeploymentStandIn,
    ReplicaSetStandIn,
    pod_template_hash,
)
from gpustack_sim.standins.podlifecycle import PodLifecycleStandIn
from tests.integration.sim.helpers import call, eventually

pytestmark = pytest.mark.anyio

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
REPLICASETS = "/apis/apps/v1/namespaces/default/replicasets"
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "worker"},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}


def deployment(name: str, replicas: int, image: str = "nginx:1.27") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image}]},
            },
        },
    }


@asynccontextmanager
async def rolling(sim: SimServer) -> AsyncIterator[tuple[Any, ...]]:
    """A Ready Node and the three stand-ins a Deployment needs to become Ready."""
    sim.store.create(NODE)
    async with (
        DeploymentStandIn(sim) as deployments,
        ReplicaSetStandIn(sim) as replicasets,
        PodLifecycleStandIn(sim) as pods,
    ):
        yield deployments, replicasets, pods


def owned(sim: SimServer, kind: str, owner: dict[str, Any]) -> list[dict[str, Any]]:
    api = "v1" if kind == "Pod" else "apps/v1"
    uid = owner["metadata"]["uid"]
    return [
        o
        for o in sim.store.list(api, kind, "default")
        if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences") or [])
        and not o["metadata"].get("deletionTimestamp")
    ]


def rolled_out(sim: SimServer, name: str, replicas: int) -> dict[str, Any] | None:
    """The Deployment once it is as ``kubectl rollout status`` waits for it, else None."""
    found = sim.store.get("apps/v1", "Deployment", name, "default")
    assert found is not None
    status = found.get("status") or {}
    progressing = {c["type"]: c for c in status.get("conditions") or []}.get("Progressing")
    done = (
        status.get("observedGeneration") == found["metadata"]["generation"]
        and status.get("updatedReplicas") == replicas
        and status.get("replicas") == replicas
        and status.get("availableReplicas") == replicas
        and progressing is not None
        and progressing["reason"] == "NewReplicaSetAvailable"
    )
    return found if done else None


def running_pods(sim: SimServer, rs: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in owned(sim, "Pod", rs) if p["status"].get("phase") == "Running"]


async def test_a_deployment_gets_a_replicaset_and_running_pods(sim: SimServer, kube) -> None:
    async with rolling(sim) as stand_ins:
        assert (await call(kube, "POST", DEPLOYMENTS, deployment("web", 2))).status_code == 201
        done = await eventually(lambda: rolled_out(sim, "web", 2))
        for stand_in in stand_ins:
            await eventually(stand_in.idle)
        [rs] = owned(sim, "ReplicaSet", done)
        pods = running_pods(sim, rs)
    template_hash = pod_template_hash(deployment("web", 2)["spec"]["template"])
    assert rs["metadata"]["name"] == f"web-{template_hash}"
    assert rs["metadata"]["labels"] == {"app": "web", "pod-template-hash": template_hash}
    assert rs["spec"]["selector"]["matchLabels"] == rs["metadata"]["labels"]
    assert rs["spec"]["template"]["metadata"]["labels"] == rs["metadata"]["labels"]
    [ref] = rs["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["controller"]) == ("Deployment", "web", True)
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert {k: rs["status"][k] for k in ("replicas", "readyReplicas", "availableReplicas")} == {
        "replicas": 2,
        "readyReplicas": 2,
        "availableReplicas": 2,
    }
    assert rs["status"]["fullyLabeledReplicas"] == 2 and rs["status"]["observedGeneration"] == 1
    assert len(pods) == 2
    for pod in pods:
        assert pod["metadata"]["name"].startswith(f"{rs['metadata']['name']}-")
        assert len(pod["metadata"]["name"]) == len(rs["metadata"]["name"]) + 6
        assert pod["metadata"]["labels"] == rs["metadata"]["labels"]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert done["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert done["status"]["readyReplicas"] == 2 and "unavailableReplicas" not in done["status"]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in done["status"]["conditions"]}
    assert conditions == {
        "Available": ("True", "MinimumReplicasAvailable"),
        "Progressing": ("True", "NewReplicaSetAvailable"),
    }


async def test_scale_through_scale_subresource_adds_and_removes_newest_pods(
    sim: SimServer, kube
) -> None:
    async with rolling(sim):
        await call(kube, "POST", DEPLOYMENTS, deployment("api", 1))
        first = await eventually(lambda: rolled_out(sim, "api", 1))
        [rs] = owned(sim, "ReplicaSet", first)
        [oldest] = owned(sim, "Pod", rs)
        scale = (await call(kube, "GET", f"{DEPLOYMENTS}/api/scale")).json()
        scale["spec"]["replicas"] = 3
        assert (await call(kube, "PUT", f"{DEPLOYMENTS}/api/scale", scale)).status_code == 200
        await eventually(lambda: rolled_out(sim, "api", 3))
        assert len(running_pods(sim, rs)) == 3
        patch = {"spec": {"replicas": 1}}
        resp = await call(
            kube,
            "PATCH",
            f"{DEPLOYMENTS}/api/scale",
            patch,
            content_type="application/merge-patch+json",
        )
        assert resp.status_code == 200
        await eventually(lambda: rolled_out(sim, "api", 1))
        await eventually(lambda: len(owned(sim, "Pod", rs)) == 1)
        [kept] = owned(sim, "Pod", rs)
    assert kept["metadata"]["uid"] == oldest["metadata"]["uid"]
    [scaled] = owned(sim, "ReplicaSet", first)
    assert scaled["metadata"]["uid"] == rs["metadata"]["uid"] and scaled["spec"]["replicas"] == 1


async def test_a_template_change_rolls_out_a_new_replicaset(sim: SimServer, kube) -> None:
    async with rolling(sim):
        await call(kube, "POST", DEPLOYMENTS, deployment("web", 2))
        first = await eventually(lambda: rolled_out(sim, "web", 2))
        [old_rs] = owned(sim, "ReplicaSet", first)
        patch = {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "x:2"}]}}}}
        resp = await call(
            kube, "PATCH", f"{DEPLOYMENTS}/web", patch, content_type="application/merge-patch+json"
        )
        assert resp.status_code == 200
        second = await eventually(
            lambda: (
                (d := rolled_out(sim, "web", 2))
                and d["metadata"]["generation"] == 2
                and not owned(sim, "Pod", old_rs)
                and d
            )
        )
        sets = {r["metadata"]["name"]: r for r in owned(sim, "ReplicaSet", second)}
    assert second["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    new_name = f"web-{pod_template_hash(deployment('web', 2, image='x:2')['spec']['template'])}"
    assert set(sets) == {old_rs["metadata"]["name"], new_name}
    new_rs = sets[new_name]
    assert sets[old_rs["metadata"]["name"]]["spec"]["replicas"] == 0
    assert new_rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    pods = running_pods(sim, new_rs)
    assert [p["spec"]["containers"][0]["image"] for p in pods] == ["x:2", "x:2"]


async def test_deleting_a_deployment_removes_its_replicasets_and_pods(sim: SimServer, kube) -> None:
    async with rolling(sim):
        await call(kube, "POST", DEPLOYMENTS, deployment("gone", 2))
        done = await eventually(lambda: rolled_out(sim, "gone", 2))
        [rs] = owned(sim, "ReplicaSet", done)
        assert (await call(kube, "DELETE", f"{DEPLOYMENTS}/gone")).status_code == 200
        await eventually(
            lambda: (
                not sim.store.list("apps/v1", "ReplicaSet", "default")
                and not sim.store.list("v1", "Pod", "default")
            )
        )
    assert sim.store.get("apps/v1", "ReplicaSet", rs["metadata"]["name"], "default") is None


async def test_a_bare_replicaset_keeps_its_pods(sim: SimServer, kube) -> None:
    body = deployment("bare", 2) | {"kind": "ReplicaSet"}
    async with rolling(sim):
        assert (await call(kube, "POST", REPLICASETS, body)).status_code == 201
        rs = await eventually(
            lambda: (
                (r := sim.store.get("apps/v1", "ReplicaSet", "bare", "default"))
                and (r.get("status") or {}).get("readyReplicas") == 2
                and r
            )
        )
        [victim, _] = owned(sim, "Pod", rs)
        await call(kube, "DELETE", f"/api/v1/namespaces/default/pods/{victim['metadata']['name']}")
        await eventually(
            lambda: (
                len(pods := running_pods(sim, rs)) == 2
                and victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in pods}
            )
        )


async def test_status_is_the_controllers_but_foreign_conditions_stay(sim: SimServer, kube) -> None:
    async with rolling(sim) as stand_ins:
        await call(kube, "POST", DEPLOYMENTS, deployment("web", 1))
        await eventually(lambda: rolled_out(sim, "web", 1))
        condition = {"type": "Checked", "status": "True", "reason": "Probe", "message": "ok"}
        patch = {"status": {"readyReplicas": 7, "conditions": [condition]}}
        resp = await call(
            kube,
            "PATCH",
            f"{DEPLOYMENTS}/web/status",
            patch,
            content_type="application/merge-patch+json",
        )
        assert resp.status_code == 200
        for stand_in in stand_ins:
            await eventually(stand_in.idle)
        found = await eventually(
            lambda: (d := rolled_out(sim, "web", 1)) and d["status"]["readyReplicas"] == 1 and d
        )
    types = [c["type"] for c in found["status"]["conditions"]]
    assert types == ["Checked", "Available", "Progressing"]
