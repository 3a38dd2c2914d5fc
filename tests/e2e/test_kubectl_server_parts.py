"""kubectl's requests to the server's own endpoints: health, ``auth can-i``, ``auth whoami``,
``create token`` and ``scale`` (docs/simulator.md, "Server parts")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer
from tests.e2e.conftest import Kubectl

pytestmark = pytest.mark.anyio

NS = "team-a"
RBAC = "rbac.authorization.k8s.io/v1"


def _objects() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "dev", "namespace": NS},
        },
        {
            "apiVersion": RBAC,
            "kind": "Role",
            "metadata": {"name": "pod-reader", "namespace": NS},
            "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}],
        },
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": {"name": "dev-reads-pods", "namespace": NS},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "dev", "namespace": NS}],
        },
    ]


@pytest.fixture
async def auth_sim() -> AsyncIterator[SimServer]:
    auth = TokenAuthenticator()
    auth.add("admin-token", "admin", groups=["system:masters"])
    auth.add("dev-token", f"system:serviceaccount:{NS}:dev")
    sim = SimServer(namespaces=["default", NS], authenticator=auth, tls=True)
    for obj in _objects():
        sim.store.create(obj)
    await sim.start()
    try:
        yield sim
    finally:
        await sim.stop()


def _as(kubectl_bin: Path, sim: SimServer, tmp_path: Path, token: str) -> Kubectl:
    config = sim.write_kubeconfig(tmp_path / f"{token}.yaml", token=token)
    return Kubectl(kubectl_bin, config, tmp_path / f"cache-{token}")


async def test_health_endpoints(kubectl: Kubectl) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        assert await kubectl.out("get", "--raw", path) == "ok"
    verbose = await kubectl.out("get", "--raw", "/readyz?verbose")
    assert verbose.strip().endswith("readyz check passed")


async def test_auth_can_i_follows_rbac(
    kubectl_bin: Path, auth_sim: SimServer, tmp_path: Path
) -> None:
    dev = _as(kubectl_bin, auth_sim, tmp_path, "dev-token")
    assert (await dev.out("auth", "can-i", "list", "pods", "-n", NS)).strip() == "yes"
    denied = await dev("auth", "can-i", "delete", "pods", "-n", NS, check=False)
    assert denied.returncode == 1 and denied.stdout.decode().strip() == "no"
    assert (
        await dev("auth", "can-i", "list", "pods", "-n", "default", check=False)
    ).returncode == 1

    admin = _as(kubectl_bin, auth_sim, tmp_path, "admin-token")
    assert (await admin.out("auth", "can-i", "delete", "nodes")).strip() == "yes"


async def test_client_certificate_user_gets_rbac_by_its_groups(
    kubectl_bin: Path, auth_sim: SimServer, tmp_path: Path
) -> None:
    auth_sim.store.create(
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": {"name": "devs-read-pods", "namespace": NS},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [
                {"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        }
    )
    config = auth_sim.write_kubeconfig(tmp_path / "jane.yaml", client_cert=("jane", ["devs"]))
    jane = Kubectl(kubectl_bin, config, tmp_path / "cache-jane")
    who = json.loads(await jane.out("auth", "whoami", "-o", "json"))["status"]["userInfo"]
    assert who["username"] == "jane"
    assert set(who["groups"]) == {"devs", "system:authenticated"}
    assert (await jane.out("auth", "can-i", "list", "pods", "-n", NS)).strip() == "yes"
    assert (await jane.out("get", "pods", "-n", NS, "-o", "name")) == ""
    refused = await jane("get", "secrets", "-n", NS, check=False)
    assert refused.returncode != 0
    assert 'User "jane" cannot list resource "secrets"' in refused.stderr.decode()

    stranger = _as(kubectl_bin, auth_sim, tmp_path, "not-a-known-token")
    refused = await stranger("auth", "can-i", "list", "pods", "-n", NS, check=False)
    assert refused.returncode != 0 and "Unauthorized" in refused.stderr.decode()

    admin = Kubectl(kubectl_bin, auth_sim.write_kubeconfig(tmp_path / "a.yaml"), tmp_path / "c")
    who = json.loads(await admin.out("auth", "whoami", "-o", "json"))["status"]["userInfo"]
    assert who["username"] == "kubernetes-admin" and "system:masters" in who["groups"]


async def test_auth_whoami(kubectl_bin: Path, auth_sim: SimServer, tmp_path: Path) -> None:
    dev = _as(kubectl_bin, auth_sim, tmp_path, "dev-token")
    who = json.loads(await dev.out("auth", "whoami", "-o", "json"))
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{NS}:dev"
    assert f"system:serviceaccounts:{NS}" in who["status"]["userInfo"]["groups"]


async def test_create_token_authenticates_as_the_service_account(
    kubectl_bin: Path, auth_sim: SimServer, tmp_path: Path
) -> None:
    admin = _as(kubectl_bin, auth_sim, tmp_path, "admin-token")
    token = (await admin.out("create", "token", "dev", "-n", NS, "--duration=20m")).strip()
    assert token
    dev = _as(kubectl_bin, auth_sim, tmp_path, token)
    who = json.loads(await dev.out("auth", "whoami", "-o", "json"))
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{NS}:dev"
    assert (await dev.out("auth", "can-i", "get", "pods", "-n", NS)).strip() == "yes"
    missing = await admin("create", "token", "nobody", "-n", NS, check=False)
    assert missing.returncode != 0 and "not found" in missing.stderr.decode()


async def test_a_node_bound_token_from_kubectl_carries_the_node_name(
    kubectl_bin: Path, auth_sim: SimServer, tmp_path: Path
) -> None:
    """kubectl sends the TokenRequest as protobuf: its bound object must survive the decoding
    for the token to carry the node-name extra (docs/simulator.md, differences)."""
    admin = _as(kubectl_bin, auth_sim, tmp_path, "admin-token")
    token = (
        await admin.out(
            "create",
            "token",
            "dev",
            "-n",
            NS,
            "--bound-object-kind=Node",
            "--bound-object-name=gpu-1",
        )
    ).strip()
    dev = _as(kubectl_bin, auth_sim, tmp_path, token)
    who = json.loads(await dev.out("auth", "whoami", "-o", "json"))["status"]["userInfo"]
    assert who["extra"] == {"authentication.kubernetes.io/node-name": ["gpu-1"]}


SCALABLE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "pools.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "pools", "singular": "pool", "kind": "Pool"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.size",
                        "statusReplicasPath": ".status.ready",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                            "status": {
                                "type": "object",
                                "properties": {
                                    "ready": {"type": "integer"},
                                    "selector": {"type": "string"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


async def test_scale_a_custom_resource(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    e2e_sim.load_crds([SCALABLE_CRD])
    pool = {"apiVersion": "example.com/v1", "kind": "Pool", "metadata": {"name": "p"},
            "spec": {"size": 1}}  # fmt: skip
    await kubectl.out("apply", "-f", "-", stdin=json.dumps(pool))
    out = await kubectl.out("scale", "pool/p", "--replicas=4")
    assert "pool.example.com/p scaled" in out
    stored = e2e_sim.store.get("example.com/v1", "Pool", "p", "default")
    assert stored is not None and stored["spec"]["size"] == 4

    stale = await kubectl("scale", "pool/p", "--current-replicas=2", "--replicas=5", check=False)
    assert stale.returncode != 0
    assert e2e_sim.store.get("example.com/v1", "Pool", "p", "default")["spec"]["size"] == 4


async def test_scale_a_deployment(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }
    await kubectl.out("apply", "-f", "-", stdin=json.dumps(deployment))
    assert "scaled" in await kubectl.out("scale", "deployment/web", "--replicas=3")
    stored = e2e_sim.store.get("apps/v1", "Deployment", "web", "default")
    assert stored is not None and stored["spec"]["replicas"] == 3
