"""Credentials as kr8s reads them, and the pieces this project adds where kr8s 0.20 falls short
(docs/runtime.md, "Credentials"): a kubeconfig's ``tokenFile`` and the service-account token
read again once a minute, the system's CAs beside a client certificate without a CA, errors
that name the kubeconfig and the fix."""

from __future__ import annotations

import base64
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.runtime import kubeconfigfiles
from gpustack_operator.runtime.credentials import (
    TOKEN_REREAD_SECONDS,
    CredentialError,
    Credentials,
    load_credentials,
)

from ...certs import self_signed

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither this machine's kubeconfig nor a service account of a Pod the tests run in."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(kubeconfigfiles, "SERVICE_ACCOUNT_DIR", tmp_path / "no-account")


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


# --- what kr8s reads ------------------------------------------------------------------------


async def test_kubeconfig_env_lists_files_and_context_picks_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = one_context(tmp_path / "a", {"token": "t"})
    second = kubeconfig(
        tmp_path / "b",
        clusters=[{"name": "d", "cluster": {"server": "https://other.test"}}],
        users=[{"name": "v", "user": {}}],
        contexts=[{"name": "other", "context": {"cluster": "d", "user": "v"}}],
    )
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{first}:{second}")
    credentials = await load_credentials()
    assert credentials.server == "https://api.test:6443"
    assert await credentials.authorization() == "Bearer t"
    other = await load_credentials(context="other")
    assert other.server == "https://other.test"
    assert await other.authorization() is None


async def test_tls_settings_and_relative_certificate_paths(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    self_signed(tmp_path / "certs", "client")
    path = one_context(
        tmp_path / "kc",
        {"client-certificate": "certs/tls.crt", "client-key": "certs/tls.key"},
        **{
            "certificate-authority": "certs/tls.crt",
            "tls-server-name": "api.internal",
            "proxy-url": "http://proxy.test:3128",
        },
    )
    credentials = await load_credentials(path)
    context = await credentials.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    # Only the kubeconfig's CA is trusted, not the system's.
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "client"),),)]
    assert credentials.tls_server_name == "api.internal"
    assert credentials.proxy == "http://proxy.test:3128"


async def test_inline_data_and_insecure_skip_tls_verify(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "inline")
    path = one_context(
        tmp_path / "kc",
        {
            "client-certificate-data": base64.b64encode(cert.read_bytes()).decode(),
            "client-key-data": base64.b64encode(key.read_bytes()).decode(),
        },
        **{"insecure-skip-tls-verify": True},
    )
    context = await (await load_credentials(path)).ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname
    plain = await load_credentials(one_context(tmp_path / "plain", {}))
    assert await plain.ssl_context() is True


EXEC_PLUGIN = """#!{python}
import json, os
from pathlib import Path
counter = Path(os.environ["COUNTER"])
runs = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(runs))
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": f"t{{runs}}"}}}}))
"""


def exec_kubeconfig(tmp_path: Path, server: str = "https://api.test:6443", **cluster: Any) -> Path:
    """A kubeconfig whose user is an exec plugin that hands out t1, t2, ... (runs counted in
    ``runs``)."""
    plugin = tmp_path / "plugin"
    plugin.parent.mkdir(parents=True, exist_ok=True)
    plugin.write_text(EXEC_PLUGIN.format(python=sys.executable))
    plugin.chmod(0o755)
    path = one_context(
        tmp_path / "kc",
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": str(plugin),
                "env": [{"name": "COUNTER", "value": str(tmp_path / "runs")}],
                "interactiveMode": "Never",
            }
        },
        **cluster,
    )
    path.write_text(path.read_text().replace("https://api.test:6443", server))
    return path


async def test_an_exec_plugin_is_run_and_run_again_when_authenticating_again(
    tmp_path: Path,
) -> None:
    credentials = await load_credentials(exec_kubeconfig(tmp_path))
    assert await credentials.authorization() == "Bearer t1"
    await credentials.reauthenticate()  # what a 401 does
    assert await credentials.authorization() == "Bearer t2"


# --- what this project adds -----------------------------------------------------------------


async def test_a_token_file_is_read_again_once_a_minute_and_after_a_401(tmp_path: Path) -> None:
    """kr8s 0.20 ignores ``user.tokenFile``."""
    token = tmp_path / "token"
    token.write_text("one\n")
    path = one_context(tmp_path / "kc", {"tokenFile": "token"})  # relative to the kubeconfig
    clock = Clock()
    credentials = Credentials(
        str(path), None, where="test", service_account=tmp_path / "none", clock=clock
    )
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
    with pytest.raises(CredentialError, match=r"test: cannot read the token file .*token"):
        await credentials.reauthenticate()


def service_account(tmp_path: Path) -> Path:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    cert, _ = self_signed(tmp_path, "cluster-ca")
    (account / "ca.crt").write_bytes(cert.read_bytes())
    (account / "token").write_text("sa-token\n")
    (account / "namespace").write_text("ops")
    return account


async def test_in_cluster_credentials_and_the_token_read_again_once_a_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kr8s reads the service-account token only when it authenticates again; client-go
    reads it again every minute, and so does this."""
    account = service_account(tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    clock = Clock()
    credentials = Credentials(None, None, where="sa", service_account=account, clock=clock)
    await credentials.load()
    assert credentials.server == "https://10.96.0.1:443"
    assert await credentials.authorization() == "Bearer sa-token"
    context = await credentials.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert len(context.get_ca_certs()) == 1
    (account / "token").write_text("rotated")
    clock.now = TOKEN_REREAD_SECONDS
    assert await credentials.authorization() == "Bearer rotated"
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    ipv6 = await load_credentials(service_account=account)
    assert ipv6.server == "https://[fd00::1]:443"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(CredentialError, match=r"in-cluster service account: .*--kubeconfig"):
        await load_credentials(service_account=account)


async def test_a_client_certificate_without_a_ca_trusts_the_system_cas(tmp_path: Path) -> None:
    """kr8s then builds a TLS context that trusts no CA at all; client-go uses the system's."""
    cert, key = self_signed(tmp_path, "client")
    path = one_context(tmp_path / "kc", {"client-certificate": str(cert), "client-key": str(key)})
    context = await (await load_credentials(path)).ssl_context()
    assert isinstance(context, ssl.SSLContext)
    system = ssl.create_default_context()
    assert len(context.get_ca_certs()) == len(system.get_ca_certs())
    assert context.verify_mode == ssl.CERT_REQUIRED


async def test_what_kr8s_refuses_is_one_line_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    provider = one_context(tmp_path / "p", {"auth-provider": {"name": "gcp"}})
    with pytest.raises(
        CredentialError, match=r"kubeconfig .*/p: .*auth-provider 'gcp'.*user\.exec"
    ):
        await load_credentials(provider)
    failing = one_context(
        tmp_path / "f",
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "false"}},
    )
    with pytest.raises(CredentialError, match=r"kubeconfig .*/f: .*plugin 'false' failed"):
        await load_credentials(failing)
    missing = one_context(
        tmp_path / "m",
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": "no-such-plugin",
                "installHint": "brew it",
            }
        },
    )
    with pytest.raises(CredentialError, match=r"'no-such-plugin' failed .*brew it"):
        await load_credentials(missing)
    bad_ca = one_context(tmp_path / "b", {}, **{"certificate-authority-data": "bm90IGEgY2VydA=="})
    with pytest.raises(CredentialError, match=r"cannot load the CA"):
        await (await load_credentials(bad_ca)).ssl_context()
