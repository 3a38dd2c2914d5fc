"""Registration checks a new member once through kr8s's objects before the gateway serves it
(docs/worker-gateway.md, "Registering a cluster"): over HTTPS, with the posted kubeconfig's
inline token and CA; an unreachable member, refused credentials, a CA that does not match,
a member without Kueue and credentials that may not list Kueue's kinds are refused with 422
and what to fix, and leave nothing behind."""

from __future__ import annotations

import base64
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.plan.desired import DesiredState
from gpustack_operator.gateway.api import ApiOptions
from gpustack_operator.gateway.registration import MemberRefused, check_member
from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.apiserver.tls import ClusterCA

from .support import all_ready, clusters_list, kueue_crds, running_gateway, seed_chain

pytestmark = pytest.mark.anyio

KUEUE_KINDS = ["resourceflavors", "cohorts", "clusterqueues", "localqueues"]
READ_ONLY_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "gateway-reader"},
    "rules": [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": KUEUE_KINDS,
            "verbs": ["get", "list", "watch"],
        }
    ],
}
READ_ONLY_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "gateway-reader"},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "gateway-reader",
    },
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "reader"}],
}


@dataclass
class Member:
    sim: SimServer
    state: DesiredState


async def _member(*, kueue_kinds: tuple[str, ...] = ("ClusterQueue", "LocalQueue", "Cohort",
                    "ResourceFlavor")) -> SimServer:  # fmt: skip
    """HTTPS with its own CA serving Kueue's *kueue_kinds*; tokens: ``reader`` (the read-only
    role above), ``nobody`` (no role: discovery only); an unknown token is a 401."""
    auth = TokenAuthenticator()
    auth.add("reader-token", "reader")
    auth.add("nobody-token", "nobody")
    sim = SimServer(authenticator=auth, tls=True, bookmark_interval=0.2)
    crds = kueue_crds(("v1beta2",))
    sim.load_crds(c for c in crds if c["spec"]["names"]["kind"] in kueue_kinds)
    sim.store.create(READ_ONLY_ROLE)
    sim.store.create(READ_ONLY_BINDING)
    return await sim.start()


@pytest.fixture
async def member(anyio_backend: str) -> AsyncIterator[Member]:
    sim = await _member()
    try:
        yield Member(sim, seed_chain(sim, ("cpu-epyc-1", "gpu-t4-1"), KueueVersion.V1BETA2))
    finally:
        await sim.stop()


def posted(sim: SimServer, tmp_path: Path, token: str = "reader-token", **cluster: Any) -> str:
    """The kubeconfig a client posts: the member's server and CA inline, a bearer token."""
    path = sim.write_kubeconfig(tmp_path / "posted.kubeconfig", token=token)
    config = yaml.safe_load(path.read_text())
    config["clusters"][0]["cluster"].update(cluster)
    return yaml.safe_dump(config)


async def git_version(sim: SimServer) -> str:
    assert sim.ca is not None
    trust = ssl.create_default_context(cadata=sim.ca.pem.decode())
    async with httpx.AsyncClient(verify=trust) as client:
        answer = await client.get(
            f"{sim.url}/version", headers={"Authorization": "Bearer reader-token"}
        )
    answer.raise_for_status()
    return str(answer.json()["gitVersion"])


def _refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_member_is_checked_through_kr8s_then_served(member: Member, tmp_path: Path) -> None:
    api = ApiOptions(allow_registration=True, allowed_servers=[member.sim.url])
    async with (
        running_gateway([], api=api) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        created = await client.post("/apis/v1/clusters/east", content=posted(member.sim, tmp_path))
        assert created.status_code == 201, created.text
        answer = created.json()
        assert answer["serverVersion"] == await git_version(member.sim)
        # What registration read is in the entry at once, before the informers connect.
        assert answer["server"] == member.sim.url and answer["kueueVersion"] == "v1beta2"
        [entry] = await all_ready(client, 1)
        assert entry["counts"]["clusterqueues"] == len(member.state.cluster_queues)
        pools = (await client.get("/apis/v1/pools", params={"cluster": "east"})).json()
        assert len(pools["items"]) == len(member.state.cluster_queues)


def _wrong_ca(sim: SimServer, tmp_path: Path) -> tuple[str, str]:
    other = base64.b64encode(ClusterCA().pem).decode()
    return posted(sim, tmp_path, **{"certificate-authority-data": other}), sim.url


def _bad_token(sim: SimServer, tmp_path: Path) -> tuple[str, str]:
    return posted(sim, tmp_path, token="not-a-token"), sim.url


def _not_listening(sim: SimServer, tmp_path: Path) -> tuple[str, str]:
    server = f"https://127.0.0.1:{_refused_port()}"
    return posted(sim, tmp_path, server=server), server


def _may_not_list(sim: SimServer, tmp_path: Path) -> tuple[str, str]:
    return posted(sim, tmp_path, token="nobody-token"), sim.url


@dataclass(frozen=True)
class Refusal:
    make: Callable[[SimServer, Path], tuple[str, str]]
    """The posted kubeconfig and the server to allow."""
    reason: str
    problem: str
    fix: str


REFUSALS = {
    "nothing listens": Refusal(
        _not_listening, "CannotConnect", "cannot reach the API server",
        "check the cluster's server address",
    ),
    "credentials refused": Refusal(
        _bad_token, "CannotConnect", "refused the credentials (401 Unauthorized)",
        "renew the token or client certificate",
    ),
    "CA does not match": Refusal(
        _wrong_ca, "CannotConnect", "certificate that does not verify",
        "certificate-authority-data",
    ),
    "may not list Kueue's kinds": Refusal(
        _may_not_list, "Forbidden", "may not list resourceflavors.kueue.x-k8s.io",
        "grant get, list and watch on resourceflavors, cohorts, clusterqueues and localqueues",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSALS)
async def test_a_member_that_fails_a_check_is_refused_with_the_fix(
    member: Member, tmp_path: Path, case: str
) -> None:
    refusal = REFUSALS[case]
    kubeconfig, server_url = refusal.make(member.sim, tmp_path)
    api = ApiOptions(allow_registration=True, allowed_servers=[server_url])
    async with (
        running_gateway([], api=api) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        refused = await client.post("/apis/v1/clusters/east", content=kubeconfig)
        assert refused.status_code == 422, refused.text
        status = refused.json()
        assert status["reason"] == refusal.reason
        message = status["message"]
        assert message.startswith("cluster 'east' not registered: "), message
        assert refusal.problem in message and refusal.fix in message, message
        # The gateway's private copy is neither named nor kept.
        assert "gpustack-worker-gateway-" not in message, message
        assert await clusters_list(client) == []
        folder = server.gateway._tmpdir
        assert folder is not None and list(folder.iterdir()) == []
        # Fixed, the same name registers.
        if case == "may not list Kueue's kinds":
            fixed = await client.post(
                "/apis/v1/clusters/east", content=posted(member.sim, tmp_path)
            )
            assert fixed.status_code == 201, fixed.text


@pytest.mark.parametrize(
    ("kinds", "problem", "fix"),
    [
        ((), "serves no Kueue API", "install Kueue there"),
        (
            ("ClusterQueue", "Cohort", "ResourceFlavor"),
            "does not serve localqueues.kueue.x-k8s.io/v1beta2 (404)",
            "install Kueue's CRDs there",
        ),
    ],
    ids=["no Kueue", "one of Kueue's kinds missing"],
)
async def test_a_member_without_kueue_is_refused(
    anyio_backend: str, tmp_path: Path, kinds: tuple[str, ...], problem: str, fix: str
) -> None:
    sim = await _member(kueue_kinds=kinds)
    try:
        api = ApiOptions(allow_registration=True, allowed_servers=[sim.url])
        async with (
            running_gateway([], api=api) as server,
            httpx.AsyncClient(base_url=server.url, timeout=30) as client,
        ):
            refused = await client.post("/apis/v1/clusters/bare", content=posted(sim, tmp_path))
            assert refused.status_code == 422, refused.text
            status = refused.json()
            assert status["reason"] == "KueueNotServed"
            assert problem in status["message"] and fix in status["message"], status
            assert await clusters_list(client) == []
    finally:
        await sim.stop()


async def test_the_check_is_bounded_in_time(anyio_backend: str, tmp_path: Path) -> None:
    """A server that accepts connections and never answers is refused after the deadline."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        kubeconfig = tmp_path / "silent.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "a",
                }
            )
        )
        with pytest.raises(MemberRefused) as caught:
            await check_member(kubeconfig, None, within=0.3)
    assert caught.value.reason == "CannotConnect"
    assert "no answer from the API server within 0.3 s" in str(caught.value)
    assert "check that the gateway can reach" in str(caught.value)
