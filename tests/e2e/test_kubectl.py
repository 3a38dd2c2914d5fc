"""The real kubectl drives the simulated API server: discovery, apply, get, label, delete, watch."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.e2e.conftest import Kubectl

pytestmark = pytest.mark.anyio

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels: {app: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: app:1
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
      - name: sidecar
        image: side:1
"""

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-a", "labels": {"kubernetes.io/hostname": "node-a"}},
    "status": {
        "conditions": [{"type": "Ready", "status": "True"}],
        "nodeInfo": {"kubeletVersion": "v1.34.0"},
    },
}


def configmap(data: dict[str, str], name: str = "settings") -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"},
            "data": data,
        }
    )


async def test_discovery_lists_builtin_resources(kubectl: Kubectl) -> None:
    out = await kubectl.out("api-resources", "--no-headers")
    rows = {line.split()[0]: line.split() for line in out.splitlines()}
    assert rows["nodes"][1:] == ["no", "v1", "false", "Node"]
    assert rows["deployments"][1:] == ["deploy", "apps/v1", "true", "Deployment"]
    assert "leases" in rows
    version = json.loads(await kubectl.out("version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"].startswith("v1.")


async def test_client_side_apply_creates_then_merges_changes(
    kubectl: Kubectl, e2e_sim: SimServer
) -> None:
    out = await kubectl.out("apply", "-f", "-", stdin=DEPLOYMENT)
    assert "deployment.apps/web created" in out

    changed = (
        DEPLOYMENT.replace('{name: B, value: "2"}', '{name: C, value: "3"}')
        .replace("image: app:1", "image: app:2")
        .replace("      - name: sidecar\n        image: side:1\n", "")
        .replace("replicas: 1", "replicas: 3")
    )
    out = await kubectl.out("apply", "-f", "-", stdin=changed)
    assert "deployment.apps/web configured" in out

    stored = e2e_sim.store.get("apps/v1", "Deployment", "web", "default")
    assert stored is not None
    containers = stored["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["app"]
    assert containers[0]["image"] == "app:2"
    assert containers[0]["env"] == [{"name": "A", "value": "1"}, {"name": "C", "value": "3"}]
    assert stored["spec"]["replicas"] == 3
    assert stored["metadata"]["generation"] == 2

    out = await kubectl.out("apply", "-f", "-", stdin=changed)
    assert "deployment.apps/web unchanged" in out


async def test_server_side_apply_conflicts_and_force(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    out = await kubectl.out("apply", "--server-side", "-f", "-", stdin=configmap({"a": "1"}))
    assert "configmap/settings serverside-applied" in out

    clash = await kubectl(
        "apply",
        "--server-side",
        "--field-manager=intruder",
        "-f",
        "-",
        stdin=configmap({"a": "2"}),
        check=False,
    )
    assert clash.returncode != 0
    assert "conflict" in clash.stderr.decode().lower()
    stored = e2e_sim.store.get("v1", "ConfigMap", "settings", "default")
    assert stored is not None and stored["data"] == {"a": "1"}

    await kubectl.out(
        "apply",
        "--server-side",
        "--field-manager=intruder",
        "--force-conflicts",
        "-f",
        "-",
        stdin=configmap({"a": "2"}),
    )
    stored = e2e_sim.store.get("v1", "ConfigMap", "settings", "default")
    assert stored is not None and stored["data"] == {"a": "2"}


async def test_get_json_and_table(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    e2e_sim.store.create(NODE)
    listed = json.loads(await kubectl.out("get", "nodes", "-o", "json"))
    assert listed["kind"] == "List" or listed["kind"] == "NodeList"
    assert [n["metadata"]["name"] for n in listed["items"]] == ["node-a"]

    table = await kubectl.out("get", "nodes")
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert row.split()[:3] == ["node-a", "Ready", "<none>"]
    assert row.split()[-1] == "v1.34.0"

    one = json.loads(await kubectl.out("get", "node", "node-a", "-o", "json"))
    assert one["metadata"]["labels"]["kubernetes.io/hostname"] == "node-a"

    missing = await kubectl("get", "node", "nope", check=False)
    assert missing.returncode != 0
    assert 'nodes "nope" not found' in missing.stderr.decode()


async def test_label_add_overwrite_remove(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    e2e_sim.store.create(NODE)

    def labels() -> dict[str, Any]:
        node = e2e_sim.store.get("v1", "Node", "node-a")
        assert node is not None
        return dict(node["metadata"].get("labels") or {})

    await kubectl.out("label", "node", "node-a", "gpustack.ai/managed=true")
    assert labels()["gpustack.ai/managed"] == "true"

    refused = await kubectl("label", "node", "node-a", "gpustack.ai/managed=false", check=False)
    assert refused.returncode != 0
    assert "already has a value" in refused.stderr.decode()

    await kubectl.out("label", "node", "node-a", "gpustack.ai/managed=false", "--overwrite")
    assert labels()["gpustack.ai/managed"] == "false"

    await kubectl.out("label", "node", "node-a", "gpustack.ai/managed-")
    assert "gpustack.ai/managed" not in labels()
    assert labels()["kubernetes.io/hostname"] == "node-a"


async def test_wait_for_a_condition(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    e2e_sim.store.create(NODE)
    result = await kubectl(
        "wait",
        "--for=jsonpath={.metadata.name}=node-a",
        "node/node-a",
        "--timeout=3s",
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert "node/node-a condition met" in result.stdout.decode()


async def test_typed_create_commands(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    """``kubectl create <kind> <name>`` sends protobuf bodies for these kinds."""
    await kubectl.out("create", "namespace", "team-a")
    await kubectl.out("create", "configmap", "conf", "-n", "team-a", "--from-literal=k=v")
    stored = e2e_sim.store.get("v1", "ConfigMap", "conf", "team-a")
    assert stored is not None and stored["data"] == {"k": "v"}


async def test_delete(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    e2e_sim.store.create(json.loads(configmap({"a": "1"})))
    out = await kubectl.out("delete", "configmap", "settings")
    assert 'configmap "settings" deleted' in out
    assert e2e_sim.store.get("v1", "ConfigMap", "settings", "default") is None


async def watch_rows(kubectl: Kubectl, e2e_sim: SimServer) -> list[list[str]]:
    """``kubectl get configmaps -w`` rows: one existing ConfigMap, then one created meanwhile."""
    e2e_sim.store.create(json.loads(configmap({"a": "1"}, name="first")))
    process = await anyio.open_process(kubectl.argv("get", "configmaps", "-w", "--no-headers"))
    try:
        assert process.stdout is not None
        seen, created = "", False
        rows: list[list[str]] = []
        with anyio.fail_after(60):
            async for chunk in process.stdout:
                seen += chunk.decode()
                # Only lines kubectl has finished writing: a chunk can end mid-row.
                complete = seen[: seen.rfind("\n") + 1]
                rows = [line.split() for line in complete.splitlines() if line.strip()]
                names = [row[0] for row in rows]
                if "first" in names and not created:
                    e2e_sim.store.create(json.loads(configmap({"b": "2"}, name="second")))
                    created = True
                if "second" in names:
                    break
        return rows
    finally:
        process.kill()
        await process.wait()


async def test_get_watch_streams_changes(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    rows = await watch_rows(kubectl, e2e_sim)
    assert [row[0] for row in rows[:2]] == ["first", "second"]


async def test_get_watch_prints_server_columns(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    rows = await watch_rows(kubectl, e2e_sim)
    assert rows[1][:2] == ["second", "1"]  # NAME, DATA
