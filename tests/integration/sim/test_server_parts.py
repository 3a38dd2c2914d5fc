"""The server's own endpoints and TLS (docs/simulator.md, "Server parts" and "TLS and client
certificates"), spoken to over HTTPS with the cluster's CA."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer

pytestmark = pytest.mark.anyio

AUTHZ = "/apis/authorization.k8s.io/v1"
RBAC = "rbac.authorization.k8s.io/v1"


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    auth = TokenAuthenticator()
    auth.add("admin", "admin", groups=["system:masters"])
    server = SimServer(namespaces=["default", "team"], authenticator=auth, tls=True)
    server.store.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "bot", "namespace": "team"},
        }
    )
    server.store.create(
        {
            "apiVersion": RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": "node-reader"},
            "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["nodes"]}],
        }
    )
    server.store.create(
        {
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "ops-read-nodes"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "node-reader",
            },
            "subjects": [{"kind": "Group", "name": "ops", "apiGroup": "rbac.authorization.k8s.io"}],
        }
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _client(
    sim: SimServer, tmp_path: Path, *, token: str | None = None, cert=None
) -> httpx.AsyncClient:
    assert sim.ca is not None
    context = ssl.create_default_context(cadata=sim.ca.pem.decode())
    if cert is not None:
        cert_pem, key_pem = sim.ca.issue_client(*cert)
        (tmp_path / "c.crt").write_bytes(cert_pem)
        (tmp_path / "c.key").write_bytes(key_pem)
        context.load_cert_chain(tmp_path / "c.crt", tmp_path / "c.key")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=sim.url, verify=context, headers=headers)


async def test_https_with_the_cluster_ca_and_health(sim: SimServer, tmp_path: Path) -> None:
    assert sim.url.startswith("https://")
    async with _client(sim, tmp_path) as client:
        for path in ("/healthz", "/livez", "/readyz"):
            resp = await client.get(path)
            assert (resp.status_code, resp.text) == (200, "ok")
        assert (await client.get("/api/v1/nodes")).status_code == 403  # anonymous
        assert (await client.get("/livez/ping")).status_code == 403  # not public-info
    async with _client(sim, tmp_path, token="admin") as admin:
        assert (await admin.get("/livez/ping")).text == "ok"
        assert (await admin.get("/livez/nonsense")).status_code == 404
    untrusting = httpx.AsyncClient(base_url=sim.url)
    async with untrusting:
        with pytest.raises(httpx.ConnectError):
            await untrusting.get("/healthz")


async def test_client_certificate_user_and_groups(sim: SimServer, tmp_path: Path) -> None:
    async with _client(sim, tmp_path, cert=("jane", ["ops"])) as jane:
        who = (await jane.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json={})).json()
        assert who["status"]["userInfo"]["username"] == "jane"
        assert (await jane.get("/api/v1/nodes")).status_code == 200  # by group ops
        denied = await jane.get("/api/v1/namespaces/team/secrets")
        assert denied.status_code == 403 and 'User "jane"' in denied.json()["message"]


async def test_subject_access_reviews(sim: SimServer, tmp_path: Path) -> None:
    def review(**spec: object) -> dict:
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }

    nodes = {"verb": "list", "resource": "nodes"}
    async with _client(sim, tmp_path, token="admin") as admin:
        resp = await admin.post(
            f"{AUTHZ}/subjectaccessreviews",
            json=review(user="x", groups=["ops"], resourceAttributes=nodes),
        )
        assert resp.status_code == 201 and resp.json()["status"] == {"allowed": True}
        resp = await admin.post(
            f"{AUTHZ}/subjectaccessreviews", json=review(user="x", resourceAttributes=nodes)
        )
        assert resp.json()["status"] == {"allowed": False}
        resp = await admin.post(f"{AUTHZ}/subjectaccessreviews", json=review(user="x"))
        assert resp.status_code == 422
        local = await admin.post(
            f"{AUTHZ}/namespaces/team/localsubjectaccessreviews",
            json=review(
                user="system:serviceaccount:team:bot",
                resourceAttributes={"verb": "get", "resource": "pods"},
            ),
        )
        assert local.json()["status"]["allowed"] is False


async def test_token_request(sim: SimServer, tmp_path: Path) -> None:
    path = "/api/v1/namespaces/team/serviceaccounts/{}/token"
    async with _client(sim, tmp_path, token="admin") as admin:
        short = await admin.post(path.format("bot"), json={"spec": {"expirationSeconds": 60}})
        assert short.status_code == 422 and "10 minutes" in short.json()["message"]
        missing = await admin.post(path.format("nobody"), json={"spec": {}})
        assert missing.status_code == 404
        issued = await admin.post(path.format("bot"), json={"spec": {}})
        assert issued.status_code == 201
        body = issued.json()
        assert body["kind"] == "TokenRequest" and body["spec"]["expirationSeconds"] == 3600
        token = body["status"]["token"]
    async with _client(sim, tmp_path, token=token) as bot:
        who = (await bot.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", json={})).json()
        assert who["status"]["userInfo"]["username"] == "system:serviceaccount:team:bot"


async def test_a_node_bound_token_carries_the_node_name(sim: SimServer, tmp_path: Path) -> None:
    """A token bound to a Node authenticates with that node's name as the user's
    ``authentication.kubernetes.io/node-name`` extra, as Kubernetes 1.32+ issues it (the claim
    deploy/components/node-bound-agents checks)."""
    path = "/api/v1/namespaces/team/serviceaccounts/bot/token"
    bound = {"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"}}}
    async with _client(sim, tmp_path, token="admin") as admin:
        token = (await admin.post(path, json=bound)).json()["status"]["token"]
        plain = (await admin.post(path, json={"spec": {}})).json()["status"]["token"]
    reviews = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
    async with _client(sim, tmp_path, token=token) as bot:
        who = (await bot.post(reviews, json={})).json()["status"]["userInfo"]
        assert who["extra"] == {"authentication.kubernetes.io/node-name": ["gpu-1"]}
    async with _client(sim, tmp_path, token=plain) as bot:
        who = (await bot.post(reviews, json={})).json()["status"]["userInfo"]
        assert not who.get("extra")


async def test_scale_rejects_a_negative_count(sim: SimServer, tmp_path: Path) -> None:
    sim.store.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {}},
        }
    )
    path = "/apis/apps/v1/namespaces/team/deployments/web/scale"
    async with _client(sim, tmp_path, token="admin") as admin:
        scale = (await admin.get(path)).json()
        assert scale["spec"] == {"replicas": 2} and scale["status"]["selector"] == "app=web"
        bad = await admin.patch(
            path,
            json={"spec": {"replicas": -1}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert bad.status_code == 422
        scale["metadata"]["resourceVersion"] = "1"
        stale = await admin.put(path, json={**scale, "spec": {"replicas": 3}})
        assert stale.status_code == 409
        assert (await admin.post(path, json={})).status_code == 405


async def test_token_review_answers_for_the_authenticator(sim: SimServer, tmp_path: Path) -> None:
    tokens = "/apis/authentication.k8s.io/v1/tokenreviews"

    def review(token: str) -> dict:
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }

    async with _client(sim, tmp_path, token="admin") as admin:
        issued = await admin.post("/api/v1/namespaces/team/serviceaccounts/bot/token", json={})
        token = issued.json()["status"]["token"]
        known = await admin.post(tokens, json=review(token))
        assert known.status_code == 201, known.text
        status = known.json()["status"]
        assert status["authenticated"] is True
        assert status["user"]["username"] == "system:serviceaccount:team:bot"
        assert "system:serviceaccounts:team" in status["user"]["groups"]
        assert status["audiences"] == ["https://kubernetes.default.svc.cluster.local"]
        unknown = (await admin.post(tokens, json=review("not-a-token"))).json()["status"]
        assert "authenticated" not in unknown and "invalid bearer token" in unknown["error"]
        assert (await admin.post(tokens, json=review(""))).status_code == 422
    # Only a user granted system:auth-delegator (or more) may ask.
    async with _client(sim, tmp_path, token=token) as bot:
        assert (await bot.post(tokens, json=review(token))).status_code == 403
        async with _client(sim, tmp_path, token="admin") as admin:
            bound = await admin.post(
                f"/apis/{RBAC}/clusterrolebindings",
                json={
                    "apiVersion": RBAC,
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": "bot-delegates"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "system:auth-delegator",
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}],
                },
            )
            assert bound.status_code == 201, bound.text
        assert (await bot.post(tokens, json=review(token))).status_code == 201


async def test_the_bootstrap_roles_are_stored_with_authentication_on(sim: SimServer) -> None:
    admin = sim.store.get(RBAC, "ClusterRole", "cluster-admin")
    assert admin is not None
    assert admin["metadata"]["labels"] == {"kubernetes.io/bootstrapping": "rbac-defaults"}
    binding = sim.store.get(RBAC, "ClusterRoleBinding", "cluster-admin")
    assert binding is not None and binding["subjects"][0]["name"] == "system:masters"
    assert sim.store.get(RBAC, "ClusterRole", "system:auth-delegator") is not None
    assert SimServer().store.get(RBAC, "ClusterRole", "cluster-admin") is None  # auth off
