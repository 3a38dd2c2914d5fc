"""Credentials read as kubectl and client-go read them (docs/runtime.md, "Credentials"):
kubeconfig merging, token files read again, exec plugins, the in-cluster service account."""

from __future__ import annotations

import json
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.runtime.credentials import (
    TOKEN_REREAD_SECONDS,
    CredentialError,
    Credentials,
    load_credentials,
)

from ...certs import self_signed

pytestmark = pytest.mark.anyio

NO_ENV: dict[str, str] = {}


def kubeconfig(path: Path, **sections: Any) -> Path:
    document = {"apiVersion": "v1", "kind": "Config", **sections}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document))
    return path


def one_context(path: Path, user: dict[str, Any], **cluster: Any) -> Path:
    return kubeconfig(
        path,
        clusters=[{"name": "c", "cluster": {"server": "https://api.test:6443", **cluster}}],
        users=[{"name": "u", "user": user}],
        contexts=[{"name": "a", "context": {"cluster": "c", "user": "u"}}],
        **{"current-context": "a"},
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# --- merging --------------------------------------------------------------------------------


async def test_merged_files_the_first_to_name_an_entry_wins_it_whole(tmp_path: Path) -> None:
    first = kubeconfig(
        tmp_path / "one" / "config",
        clusters=[{"name": "unused", "cluster": {"server": "https://unused.test"}}],
        users=[{"name": "u", "user": {"tokenFile": "token"}}],
        contexts=[{"name": "a", "context": {"cluster": "c", "user": "u"}}],
        **{"current-context": "a"},
    )
    (tmp_path / "one" / "token").write_text("from-the-first-file\n")
    second = kubeconfig(
        tmp_path / "two" / "config",
        clusters=[{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        users=[{"name": "u", "user": {"token": "from-the-second-file", "username": "x"}}],
        contexts=[
            {"name": "a", "context": {"cluster": "other", "user": "nobody"}},
            {"name": "b", "context": {"cluster": "c", "user": "u"}},
        ],
        **{"current-context": "b"},
    )
    credentials = await load_credentials(f"{first}:{second}", env=NO_ENV)
    # current-context and context "a" from the first file; the cluster only the second has;
    # user "u" whole from the first (the second's token and username are discarded), its
    # tokenFile relative to the first file.
    assert credentials.server == "http://127.0.0.1:1"
    assert await credentials.authorization() == "Bearer from-the-first-file"
    assert "context a" in credentials.where


async def test_kubeconfig_env_lists_files_and_context_picks_one(tmp_path: Path) -> None:
    first = one_context(tmp_path / "a", {"token": "t"})
    second = kubeconfig(
        tmp_path / "b",
        clusters=[{"name": "d", "cluster": {"server": "https://other.test"}}],
        contexts=[{"name": "other", "context": {"cluster": "d"}}],
    )
    env = {"KUBECONFIG": f"{tmp_path / 'absent'}:{first}:{second}"}
    assert (await load_credentials(env=env)).server == "https://api.test:6443"
    other = await load_credentials(context="other", env=env)
    assert other.server == "https://other.test"
    assert await other.authorization() is None


async def test_a_context_naming_an_undefined_user_says_so(tmp_path: Path) -> None:
    path = kubeconfig(
        tmp_path / "kc",
        clusters=[{"name": "c", "cluster": {"server": "https://api.test"}}],
        contexts=[{"name": "a", "context": {"cluster": "c", "user": "ghost"}}],
    )
    with pytest.raises(CredentialError, match="user 'ghost', which no file defines"):
        await load_credentials(path, env=NO_ENV)


async def test_auth_provider_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = one_context(tmp_path / "kc", {"auth-provider": {"name": "oidc", "config": {}}})
    with pytest.raises(CredentialError, match=r"auth-provider 'oidc'.*exec credential plugin"):
        await load_credentials(path, env=NO_ENV)


async def test_basic_auth_is_sent_as_basic(tmp_path: Path) -> None:
    path = one_context(tmp_path / "kc", {"username": "ada", "password": "pw"})
    credentials = await load_credentials(path, env=NO_ENV)
    assert await credentials.authorization() == "Basic YWRhOnB3"


# --- TLS settings ---------------------------------------------------------------------------


async def test_tls_settings_and_relative_certificate_paths(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    cert, key = self_signed(tmp_path / "certs", "client")
    path = one_context(
        tmp_path / "kc",
        {"client-certificate": "certs/tls.crt", "client-key": "certs/tls.key"},
        **{
            "certificate-authority": "certs/tls.crt",
            "tls-server-name": "api.internal",
            "proxy-url": "http://proxy.test:3128",
        },
    )
    assert (cert.name, key.name) == ("tls.crt", "tls.key")
    credentials = await load_credentials(path, env=NO_ENV)
    context = credentials.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    # Only the kubeconfig's CA is trusted, not the system's.
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "client"),),)]
    assert credentials.tls_server_name == "api.internal"
    assert credentials.proxy == "http://proxy.test:3128"


async def test_inline_data_and_insecure_skip_tls_verify(tmp_path: Path) -> None:
    import base64

    cert, key = self_signed(tmp_path, "inline")
    path = one_context(
        tmp_path / "kc",
        {
            "client-certificate-data": base64.b64encode(cert.read_bytes()).decode(),
            "client-key-data": base64.b64encode(key.read_bytes()).decode(),
        },
        **{"insecure-skip-tls-verify": True},
    )
    context = (await load_credentials(path, env=NO_ENV)).ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname
    plain = await load_credentials(one_context(tmp_path / "plain", {}), env=NO_ENV)
    assert plain.ssl_context() is True
    bad = one_context(tmp_path / "bad", {}, **{"certificate-authority-data": "%%%"})
    with pytest.raises(CredentialError, match="certificate-authority-data is not base64"):
        await load_credentials(bad, env=NO_ENV)


# --- token files ----------------------------------------------------------------------------


async def test_a_token_file_is_read_again_once_a_minute_and_after_a_401(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    clock = Clock()
    credentials = Credentials(server="https://x", where="test", token_file=token, clock=clock)
    await credentials.load()
    assert await credentials.authorization() == "Bearer one"
    token.write_text("two")
    clock.now = TOKEN_REREAD_SECONDS - 1
    assert await credentials.authorization() == "Bearer one"
    clock.now = TOKEN_REREAD_SECONDS
    assert await credentials.authorization() == "Bearer two"
    token.write_text("three")
    await credentials.reauthenticate()
    assert await credentials.authorization() == "Bearer three"
    token.unlink()
    with pytest.raises(CredentialError, match=r"cannot read the token file .*token"):
        await credentials.reauthenticate()


# --- exec plugins ---------------------------------------------------------------------------

PLUGIN = """#!{python}
import json, os, sys
from pathlib import Path
counter = Path(os.environ["COUNTER"])
runs = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(runs))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
Path(os.environ["COUNTER"] + ".info").write_text(json.dumps({{"info": info, "argv": sys.argv[1:]}}))
if os.environ.get("FAIL"):
    print("login expired: run `cloud login`", file=sys.stderr)
    sys.exit(3)
status = {{"token": f"t{{runs}}"}}
if os.environ.get("EXPIRES"):
    status["expirationTimestamp"] = os.environ["EXPIRES"]
print(json.dumps({{"apiVersion": os.environ.get("ANSWER_VERSION", info["apiVersion"]),
                  "kind": "ExecCredential", "status": status}}))
"""


def exec_kubeconfig(tmp_path: Path, *, api_version: str, **env: str) -> Path:
    plugin = tmp_path / "bin" / "plugin"
    plugin.parent.mkdir(parents=True, exist_ok=True)
    plugin.write_text(PLUGIN.format(python=sys.executable))
    plugin.chmod(0o755)
    entries = [{"name": "COUNTER", "value": str(tmp_path / "runs")}]
    entries += [{"name": k, "value": v} for k, v in env.items()]
    return one_context(
        tmp_path / "kc",
        {
            "exec": {
                "apiVersion": api_version,
                "command": "./bin/plugin",  # relative to the kubeconfig's directory
                "args": ["--cluster", "c"],
                "env": entries,
                "provideClusterInfo": True,
                "installHint": "install plugin from example.test",
            }
        },
    )


@pytest.mark.parametrize(
    "api_version", ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"]
)
async def test_an_exec_plugin_is_run_with_its_environment_and_cached_until_it_expires(
    tmp_path: Path, api_version: str
) -> None:
    path = exec_kubeconfig(tmp_path, api_version=api_version, EXPIRES="2030-01-01T00:00:00Z")
    credentials = await load_credentials(path, env=NO_ENV)
    assert await credentials.authorization() == "Bearer t1"
    seen = json.loads((tmp_path / "runs.info").read_text())
    assert seen["argv"] == ["--cluster", "c"]
    assert seen["info"]["apiVersion"] == api_version
    assert seen["info"]["spec"]["interactive"] is False
    assert seen["info"]["spec"]["cluster"]["server"] == "https://api.test:6443"
    # Cached until status.expirationTimestamp, then run again.
    expiry = 1893456000.0  # 2030-01-01T00:00:00Z
    clock = Clock()
    cached = Credentials(
        server="https://x",
        where="test",
        exec_plugin=credentials._exec,
        clock=clock,
        wall_clock=lambda: expiry - 100,
    )
    await cached.load()
    assert await cached.authorization() == "Bearer t2"
    clock.now = 99
    assert await cached.authorization() == "Bearer t2"
    clock.now = 100
    assert await cached.authorization() == "Bearer t3"
    await cached.reauthenticate()  # a 401
    assert await cached.authorization() == "Bearer t4"


async def test_exec_plugin_failures_name_the_command_and_the_fix(tmp_path: Path) -> None:
    v1 = "client.authentication.k8s.io/v1"
    failing = exec_kubeconfig(tmp_path / "fail", api_version=v1, FAIL="1")
    with pytest.raises(CredentialError, match=r"'.*bin/plugin' exited with status 3: login exp"):
        await load_credentials(failing, env=NO_ENV)
    other = exec_kubeconfig(
        tmp_path / "ver", api_version=v1, ANSWER_VERSION="client.authentication.k8s.io/v1beta1"
    )
    with pytest.raises(CredentialError, match=r"make user\.exec\.apiVersion match the plugin"):
        await load_credentials(other, env=NO_ENV)
    missing = one_context(
        tmp_path / "missing",
        {"exec": {"apiVersion": v1, "command": "no-such-plugin", "installHint": "brew it"}},
    )
    with pytest.raises(CredentialError, match=r"'no-such-plugin' cannot be run.*brew it"):
        await load_credentials(missing, env=NO_ENV)
    alpha = one_context(
        tmp_path / "alpha",
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}},
    )
    with pytest.raises(CredentialError, match="v1alpha1' is not supported"):
        await load_credentials(alpha, env=NO_ENV)


# --- in-cluster -----------------------------------------------------------------------------


async def test_in_cluster_credentials_from_the_service_account(tmp_path: Path) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    cert, _ = self_signed(tmp_path, "cluster-ca")
    (account / "ca.crt").write_bytes(cert.read_bytes())
    (account / "token").write_text("sa-token\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    credentials = await load_credentials(env=env, home=tmp_path, service_account=account)
    assert credentials.server == "https://10.96.0.1:443"
    assert await credentials.authorization() == "Bearer sa-token"
    context = credentials.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert len(context.get_ca_certs()) == 1
    (account / "token").write_text("rotated")
    await credentials.reauthenticate()
    assert await credentials.authorization() == "Bearer rotated"
    v6 = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    ipv6 = await load_credentials(env=v6, home=tmp_path, service_account=account)
    assert ipv6.server == "https://[fd00::1]:6443"
    with pytest.raises(CredentialError, match="KUBERNETES_SERVICE_HOST"):
        await load_credentials(env={}, home=tmp_path, service_account=account)
