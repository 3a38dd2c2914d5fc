"""Authentication, RBAC authorization and escalation prevention of the simulated API server
(docs/simulator.md, "Authentication and authorization")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer

pytestmark = pytest.mark.anyio

RBAC = "/apis/rbac.authorization.k8s.io/v1"
MERGE = {"Content-Type": "application/merge-patch+json"}
NS = "team-a"


def role(kind: str, name: str, rules: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if kind == "Role":
        meta["namespace"] = NS
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "rules": rules, **extra}  # fmt: skip


def binding(kind: str, name: str, ref_kind: str, ref: str, sa: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if kind == "RoleBinding":
        meta["namespace"] = NS
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": ref},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": NS}],
    }


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[SimServer]:
    auth = TokenAuthenticator()
    auth.add("admin", "admin", groups=["system:masters"])
    auth.add("dev", f"system:serviceaccount:{NS}:dev")
    auth.add("ops", f"system:serviceaccount:{NS}:ops")
    server = SimServer(namespaces=["default", NS], authenticator=auth)
    # dev: may write Roles and RoleBindings in team-a and read pods there, nothing else.
    writer = [
        {"verbs": ["create", "update", "patch", "get"], "apiGroups": ["rbac.authorization.k8s.io"],
         "resources": ["roles", "rolebindings"]},
        {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]},
    ]  # fmt: skip
    for obj in (
        role("Role", "writer", writer),
        binding("RoleBinding", "dev-writer", "Role", "writer", "dev"),
        role("ClusterRole", "secrets-reader",
             [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]),
    ):  # fmt: skip
        server.store.create(obj)
    async with server:
        yield server


def client(sim: SimServer, token: str | None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=sim.url, headers=headers, timeout=10)


async def test_requests_are_authenticated_and_authorized(sim: SimServer) -> None:
    async with client(sim, "dev") as dev, client(sim, None) as anonymous:
        assert (await dev.get(f"/api/v1/namespaces/{NS}/pods")).status_code == 200
        denied = await dev.get("/api/v1/namespaces/default/pods")
        assert denied.status_code == 403
        assert denied.json()["message"] == (
            'pods is forbidden: User "system:serviceaccount:team-a:dev" cannot list resource '
            '"pods" in API group "" in the namespace "default"'
        )
        assert (await dev.get("/api/v1/nodes")).status_code == 403
        assert (await dev.get("/apis")).status_code == 200  # discovery: authenticated users
        assert (await anonymous.get("/apis")).status_code == 403
        assert (await anonymous.get("/version")).status_code == 200
        wrong = await dev.get("/version", headers={"Authorization": "Bearer forged"})
        assert wrong.status_code == 401


async def test_a_role_with_rights_the_writer_lacks_is_refused(sim: SimServer) -> None:
    secrets = [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]
    pods = [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]
    async with client(sim, "dev") as dev, client(sim, "admin") as admin:
        refused = await dev.post(f"{RBAC}/namespaces/{NS}/roles", json=role("Role", "s", secrets))
        assert refused.status_code == 403
        assert "attempting to grant RBAC permissions not currently held" in refused.text
        held = await dev.post(f"{RBAC}/namespaces/{NS}/roles", json=role("Role", "p", pods))
        assert held.status_code == 201, held.text
        # Changing that role to grant more is the same escalation.
        patch = {"rules": pods + secrets}
        widened = await dev.patch(f"{RBAC}/namespaces/{NS}/roles/p", json=patch, headers=MERGE)
        assert widened.status_code == 403
        # With `escalate` on that one role (by name), it is allowed.
        escalate = [{"verbs": ["escalate"], "apiGroups": ["rbac.authorization.k8s.io"],
                     "resources": ["roles"], "resourceNames": ["p"]}]  # fmt: skip
        for obj in (role("Role", "esc", escalate),
                    binding("RoleBinding", "dev-esc", "Role", "esc", "dev")):  # fmt: skip
            plural = obj["kind"].lower() + "s"
            assert (await admin.post(f"{RBAC}/namespaces/{NS}/{plural}", json=obj)).is_success
        widened = await dev.patch(f"{RBAC}/namespaces/{NS}/roles/p", json=patch, headers=MERGE)
        assert widened.status_code == 200, widened.text
        other = await dev.post(f"{RBAC}/namespaces/{NS}/roles", json=role("Role", "q", secrets))
        assert other.status_code == 403


async def test_binding_needs_the_roles_rights_or_bind(sim: SimServer) -> None:
    async with client(sim, "dev") as dev, client(sim, "admin") as admin:
        url = f"{RBAC}/namespaces/{NS}/rolebindings"
        to_secrets = binding("RoleBinding", "b", "ClusterRole", "secrets-reader", "ops")
        refused = await dev.post(url, json=to_secrets)
        assert refused.status_code == 403, refused.text
        bind = [{"verbs": ["bind"], "apiGroups": ["rbac.authorization.k8s.io"],
                 "resources": ["clusterroles"], "resourceNames": ["secrets-reader"]}]  # fmt: skip
        await admin.post(f"{RBAC}/namespaces/{NS}/roles", json=role("Role", "binder", bind))
        await admin.post(url, json=binding("RoleBinding", "dev-binder", "Role", "binder", "dev"))
        created = await dev.post(url, json=to_secrets)
        assert created.status_code == 201, created.text
        # ops now reads secrets in team-a only; the roleRef of a binding never changes.
        async with client(sim, "ops") as ops:
            assert (await ops.get(f"/api/v1/namespaces/{NS}/secrets/x")).status_code == 404
            assert (await ops.get("/api/v1/namespaces/default/secrets/x")).status_code == 403
        moved = {**created.json(), "roleRef": {**to_secrets["roleRef"], "name": "writer"}}
        changed = await dev.put(f"{url}/b", json=moved)
        assert changed.status_code == 422 and "cannot change roleRef" in changed.text


async def test_aggregated_cluster_roles_and_apply_create(sim: SimServer) -> None:
    async with client(sim, "admin") as admin, client(sim, "ops") as ops:
        aggregate = role("ClusterRole", "agg", [], aggregationRule={
            "clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]})  # fmt: skip
        part = role(
            "ClusterRole",
            "part",
            [{"verbs": ["patch"], "apiGroups": [""], "resources": ["configmaps"]}],
        )
        part["metadata"]["labels"] = {"agg": "yes"}
        for obj in (
            aggregate,
            part,
            binding("ClusterRoleBinding", "ops-agg", "ClusterRole", "agg", "ops"),
        ):
            plural = obj["kind"].lower() + "s"
            assert (await admin.post(f"{RBAC}/{plural}", json=obj)).is_success
        # patch is granted, create is not: a server-side apply that would create is refused.
        applied = await ops.patch(
            f"/api/v1/namespaces/{NS}/configmaps/c",
            params={"fieldManager": "ops"},
            content=b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}',
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        assert applied.status_code == 403
        assert "cannot create resource" in applied.json()["message"]
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
        await admin.post(f"/api/v1/namespaces/{NS}/configmaps", json=cm)
        again = await ops.patch(
            f"/api/v1/namespaces/{NS}/configmaps/c",
            params={"fieldManager": "ops"},
            content=b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"b"}}',
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        assert again.status_code == 200, again.text
