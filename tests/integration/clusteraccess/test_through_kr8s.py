"""``worker``, ``device-manager serve`` and ``queues`` reach a cluster over HTTPS with every kind
of credential kr8s reads (docs/runtime.md, "Credentials"): a client certificate, a token file
that changes, an exec plugin, and the in-cluster service account. The simulated API server
checks them: an unknown token is a 401, so a request that passes used the credential."""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.cli import build_parser
from gpustack_operator.commands.cluster_flags import connect
from gpustack_operator.commands.policy_flags import policy_from_args
from gpustack_operator.commands.queues import fetch_queues
from gpustack_operator.kr8sobjects import list_objects
from gpustack_operator.kubeconfig import close_kr8s, connect_kr8s
from gpustack_operator.runtime import kubeconfigfiles
from gpustack_operator.runtime.resources import NAMESPACES
from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.crds import stand_in_crds

pytestmark = pytest.mark.anyio

ADMIN = ("system:masters",)
EXEC_PLUGIN = """#!{python}
import json
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": "from-the-plugin"}}}}))
"""


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[SimServer]:
    """HTTPS with the cluster's own CA, tokens checked (401 for an unknown one), Kueue's CRDs."""
    auth = TokenAuthenticator()
    for token in ("first", "second", "from-the-plugin", "service-account"):
        auth.add(token, f"user-{token}", groups=ADMIN)
    server = SimServer(authenticator=auth, tls=True)
    server.load_crds(stand_in_crds())
    async with server:
        yield server


@pytest.fixture(autouse=True)
def no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(kubeconfigfiles, "SERVICE_ACCOUNT_DIR", tmp_path / "no-account")


def with_user(sim: SimServer, path: Path, user: dict[str, Any]) -> Path:
    """The simulator's kubeconfig (server, CA) with *user* in place of its own."""
    sim.write_kubeconfig(path, token="unused")
    config = yaml.safe_load(path.read_text())
    config["users"][0]["user"] = user
    path.write_text(yaml.safe_dump(config))
    return path


def client_certificate(sim: SimServer, tmp_path: Path, mp: pytest.MonkeyPatch) -> str:
    # Without a token the simulator's kubeconfig holds an administrator's client certificate.
    return str(sim.write_kubeconfig(tmp_path / "kc"))


def token_file(sim: SimServer, tmp_path: Path, mp: pytest.MonkeyPatch) -> str:
    (tmp_path / "token").write_text("first\n")
    return str(with_user(sim, tmp_path / "kc", {"tokenFile": "token"}))


def exec_plugin(sim: SimServer, tmp_path: Path, mp: pytest.MonkeyPatch) -> str:
    plugin = tmp_path / "plugin"
    plugin.write_text(EXEC_PLUGIN.format(python=sys.executable))
    plugin.chmod(0o755)
    exec_entry = {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}
    return str(with_user(sim, tmp_path / "kc", {"exec": exec_entry}))


def service_account(sim: SimServer, tmp_path: Path, mp: pytest.MonkeyPatch) -> None:
    assert sim.ca is not None
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("service-account")
    (account / "ca.crt").write_bytes(sim.ca.pem)
    (account / "namespace").write_text("default")
    host, port = sim.url.removeprefix("https://").rsplit(":", 1)
    mp.setattr(kubeconfigfiles, "SERVICE_ACCOUNT_DIR", account)
    mp.setenv("KUBERNETES_SERVICE_HOST", host)
    mp.setenv("KUBERNETES_SERVICE_PORT", port)


CREDENTIALS: dict[str, Callable[[SimServer, Path, pytest.MonkeyPatch], str | None]] = {
    "client certificate": client_certificate,
    "token file": token_file,
    "exec plugin": exec_plugin,
    "in-cluster service account": service_account,
}


def args_of(command: list[str], kubeconfig: str | None) -> argparse.Namespace:
    flags = ["--kubeconfig", kubeconfig] if kubeconfig else []
    return build_parser({}).parse_args([*command, *flags])


@pytest.mark.parametrize("credential", CREDENTIALS)
@pytest.mark.parametrize("command", [["worker"], ["device-manager", "serve"]])
async def test_the_long_running_commands_connect_through_kr8s(
    sim: SimServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    credential: str,
) -> None:
    args = args_of(command, CREDENTIALS[credential](sim, tmp_path, monkeypatch))
    client = await connect(args)  # what both commands call (commands/cluster_flags.py)
    assert client is not None
    try:
        names = {n["metadata"]["name"] for n in (await client.list(NAMESPACES)).items}
        assert "default" in names
    finally:
        await client.close()


@pytest.mark.parametrize("credential", CREDENTIALS)
async def test_queues_connects_through_kr8s(
    sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, credential: str
) -> None:
    args = args_of(["queues"], CREDENTIALS[credential](sim, tmp_path, monkeypatch))
    fetched = await fetch_queues(args, policy_from_args(args))
    assert fetched == ([], [], {}), fetched  # Kueue served, no pools yet


async def rotate(sim: SimServer, tmp_path: Path) -> None:
    """The token file changes and the old token stops working, as a rotation does."""
    (tmp_path / "token").write_text("second\n")
    assert sim.authenticator is not None
    sim.authenticator._users.pop("first")


async def test_a_changed_token_file_is_read_again_by_the_runtime_client(
    sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await connect(args_of(["worker"], token_file(sim, tmp_path, monkeypatch)))
    assert client is not None
    try:
        await rotate(sim, tmp_path)
        # A 401, the credentials read again (kr8s, then the token file), the request retried.
        assert (await client.list(NAMESPACES)).items
        assert await client.credentials.authorization() == "Bearer second"
    finally:
        await client.close()


async def test_a_changed_token_file_is_read_again_by_kr8s_objects(
    sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = await connect_kr8s(token_file(sim, tmp_path, monkeypatch), None)
    try:
        await rotate(sim, tmp_path)
        namespaces = await list_objects(api, NAMESPACES)
        assert "default" in {n["metadata"]["name"] for n in namespaces}
        assert api.auth.token == "second"
    finally:
        await close_kr8s(api)
