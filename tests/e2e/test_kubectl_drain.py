"""``kubectl drain`` (cordon, pod listing by node, evictions under a PodDisruptionBudget) and
``kubectl delete crd`` (through Terminating) against the simulator (docs/simulator.md, "Pod
eviction" and "CRD deletion")."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.e2e.conftest import Kubectl
from tests.integration.sim.test_crd_deletion import CRD as GADGET_CRD

pytestmark = pytest.mark.anyio


def _owned_pod(name: str, owner: dict[str, Any], node: str, **spec: Any) -> dict[str, Any]:
    labels = owner["spec"]["selector"]["matchLabels"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}], **spec},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _workload(kind: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            **({"replicas": 2} if kind == "Deployment" else {}),
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
    }


async def test_drain_evicts_within_the_disruption_budget(
    kubectl: Kubectl, e2e_sim: SimServer
) -> None:
    store = e2e_sim.store
    for node in ("n1", "n2"):
        store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    web = store.create(_workload("Deployment", "web"))
    agent = store.create(_workload("DaemonSet", "agent"))
    scratch = [{"name": "scratch", "emptyDir": {}}]
    store.create(_owned_pod("web-1", web, "n1", volumes=scratch))
    store.create(_owned_pod("web-2", web, "n1"))
    store.create(_owned_pod("agent-1", agent, "n1"))
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    await kubectl.out("apply", "-f", "-", stdin=json.dumps(budget))
    await e2e_sim.settle()

    done: dict[str, str] = {}

    async def drain() -> None:
        result = await kubectl(
            "drain", "n1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s"
        )
        done["out"] = result.stdout.decode() + result.stderr.decode()

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain)
        with anyio.fail_after(30):  # one pod went; the budget holds the other
            while True:
                pods = {p["metadata"]["name"] for p in store.list("v1", "Pod", "default")}
                if (
                    len(pods & {"web-1", "web-2"}) == 1
                    and e2e_sim.counters.get("create", "Eviction") >= 2
                ):
                    break
                await anyio.sleep(0.1)
        # The Deployment's replacement starts elsewhere: the budget allows the next eviction.
        store.create(_owned_pod("web-3", web, "n2"))
    out = done["out"]
    assert "node/n1 cordoned" in out
    assert "Warning: ignoring DaemonSet-managed Pods: default/agent-1" in out
    assert (
        "(will retry after 5s): Cannot evict pod as it would violate the pod's disruption "
        "budget." in out
    )
    assert "pod/web-1 evicted" in out and "pod/web-2 evicted" in out
    assert "node/n1 drained" in out
    node = store.get("v1", "Node", "n1")
    assert node is not None and node["spec"]["unschedulable"] is True
    left = {p["metadata"]["name"] for p in store.list("v1", "Pod", "default")}
    assert left == {"agent-1", "web-3"}
    shown = json.loads(await kubectl.out("get", "pdb", "web", "-o", "json"))
    assert shown["status"]["currentHealthy"] == 1 and shown["status"]["disruptionsAllowed"] == 0


async def test_delete_crd_waits_for_its_instances(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    await kubectl.out("apply", "-f", "-", stdin=json.dumps(GADGET_CRD))
    gadget = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    await kubectl.out("apply", "-f", "-", stdin=json.dumps(gadget))
    out = await kubectl.out("delete", "crd", "gadgets.example.com")
    assert 'customresourcedefinition.apiextensions.k8s.io "gadgets.example.com" deleted' in out
    gone = await kubectl("get", "gadgets", check=False)
    assert gone.returncode != 0
    assert "NotFound" in gone.stderr.decode()  # its cached discovery knew them; the API not
    resources = await kubectl.out("api-resources", "-o", "name")
    assert "gadgets.example.com" not in resources.split()
