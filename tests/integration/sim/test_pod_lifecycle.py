"""The Pod lifecycle stand-in binds Pods to Nodes and starts them, as kube-scheduler and the
kubelet do on a kind cluster (docs/simulator.md, "Pod lifecycle stand-in")."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.podlifecycle import PodLifecycleStandIn
from tests.integration.sim.helpers import call, eventually

pytestmark = pytest.mark.anyio

PODS = "/api/v1/namespaces/default/pods"


def node(name: str, *, ready: bool = True, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"podCIDR": "10.244.1.0/24", **spec},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "addresses": [{"type": "InternalIP", "address": "172.18.0.3"}],
        },
    }


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}], **spec},
    }


def stored(sim: SimServer, name: str) -> dict[str, Any]:
    found = sim.store.get("v1", "Pod", name, "default")
    assert found is not None
    return found


def conditions(found: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in found["status"].get("conditions") or []}


async def test_a_pod_is_bound_to_a_fitting_node_and_runs(sim: SimServer, kube) -> None:
    sim.store.create(node("a-tainted", taints=[{"key": "gpu", "effect": "NoSchedule"}]))
    sim.store.create(node("b-cordoned", unschedulable=True))
    sim.store.create(node("c-not-ready", ready=False))
    sim.store.create(node("d-fits"))
    async with PodLifecycleStandIn(sim) as stand_in:
        assert (await call(kube, "POST", PODS, pod("web"))).status_code == 201
        running = await eventually(
            lambda: (p := stored(sim, "web"))["status"]["phase"] == "Running" and p
        )
        await eventually(stand_in.idle)
    assert running["spec"]["nodeName"] == "d-fits"
    assert conditions(running) == dict.fromkeys(
        ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"),
        "True",
    )
    [container] = running["status"]["containerStatuses"]
    assert (container["name"], container["ready"], container["started"]) == ("app", True, True)
    assert "running" in container["state"]
    assert running["status"]["hostIP"] == "172.18.0.3"
    assert running["status"]["podIP"].startswith("10.244.1.")


async def test_a_pod_nothing_fits_waits_unschedulable_until_a_node_does(
    sim: SimServer, kube
) -> None:
    sim.store.create(node("gpu-1", taints=[{"key": "gpu", "effect": "NoSchedule"}]))
    async with PodLifecycleStandIn(sim) as stand_in:
        await call(kube, "POST", PODS, pod("picky", nodeSelector={"zone": "b"}))
        waiting = await eventually(
            lambda: (
                conditions(stored(sim, "picky")).get("PodScheduled") == "False"
                and stored(sim, "picky")
            )
        )
        assert waiting["status"]["phase"] == "Pending"
        [condition] = waiting["status"]["conditions"]
        assert condition["reason"] == "Unschedulable" and "0/1 nodes" in condition["message"]
        await eventually(stand_in.idle)
        assert "nodeName" not in waiting["spec"]
        late = node("cpu-2")
        late["metadata"]["labels"]["zone"] = "b"
        sim.store.create(late)
        started = await eventually(
            lambda: (p := stored(sim, "picky"))["status"]["phase"] == "Running" and p
        )
    assert started["spec"]["nodeName"] == "cpu-2"


async def test_pods_of_another_scheduler_or_on_a_missing_node_stay_pending(
    sim: SimServer, kube
) -> None:
    sim.store.create(node("n1"))
    async with PodLifecycleStandIn(sim) as stand_in:
        await call(kube, "POST", PODS, pod("custom", schedulerName="volcano"))
        await call(kube, "POST", PODS, pod("ghost", nodeName="no-such-node"))
        await call(kube, "POST", PODS, pod("bound", nodeName="n1"))
        await eventually(lambda: stored(sim, "bound")["status"]["phase"] == "Running")
        await eventually(stand_in.idle)
    assert stored(sim, "custom")["status"]["phase"] == "Pending"
    assert "nodeName" not in stored(sim, "custom")["spec"]
    assert stored(sim, "ghost")["status"]["phase"] == "Pending"
