"""TLS and proxy settings from the kubeconfig reach the transport (docs/runtime.md,
"Transport"): the CA, client certificates, ``tls-server-name`` as the name checked,
``insecure-skip-tls-verify`` only when set, and ``proxy-url``."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpustack_operator.runtime.client import ApiUnavailable, Client
from gpustack_operator.runtime.resources import CONFIGMAPS

from ...certs import self_signed
from .hostile import HostileServer, answer, hostile_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def server_cert(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path, "api.test", dns_names=("api.test",), stem="server")


@pytest.fixture
async def tls_server(server_cert: tuple[Path, Path]) -> AsyncIterator[HostileServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*server_cert)
    async for started in hostile_server(context):
        yield started


def https(server: HostileServer) -> str:
    return f"https://127.0.0.1:{server.port}"


async def test_the_kubeconfig_ca_is_trusted_and_nothing_else(
    tls_server: HostileServer, server_cert: tuple[Path, Path], tmp_path: Path
) -> None:
    ca = str(server_cert[0])
    trusting = tls_server.write_kubeconfig(
        tmp_path / "ca", server=https(tls_server), **{"certificate-authority": ca}
    )
    async with await Client.connect(trusting, timeout=5.0) as client:
        assert (await client.get(CONFIGMAPS, "x", "default"))["kind"] == "ConfigMap"
    default_trust = tls_server.write_kubeconfig(tmp_path / "none", server=https(tls_server))
    with pytest.raises(ApiUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        await Client.connect(default_trust, timeout=5.0)


async def test_tls_server_name_is_the_name_checked(
    tls_server: HostileServer, server_cert: tuple[Path, Path], tmp_path: Path
) -> None:
    ca = str(server_cert[0])
    named = tls_server.write_kubeconfig(
        tmp_path / "named",
        server=https(tls_server),
        **{"certificate-authority": ca, "tls-server-name": "api.test"},
    )
    async with await Client.connect(named, timeout=5.0):
        pass
    # The certificate is valid for 127.0.0.1 too: only the named check can fail here.
    misnamed = tls_server.write_kubeconfig(
        tmp_path / "misnamed",
        server=https(tls_server),
        **{"certificate-authority": ca, "tls-server-name": "other.test"},
    )
    with pytest.raises(ApiUnavailable, match=r"other\.test"):
        await Client.connect(misnamed, timeout=5.0)


async def test_verification_is_skipped_only_when_the_kubeconfig_says_so(
    tls_server: HostileServer, tmp_path: Path
) -> None:
    skipping = tls_server.write_kubeconfig(
        tmp_path / "skip", server=https(tls_server), **{"insecure-skip-tls-verify": True}
    )
    async with await Client.connect(skipping, timeout=5.0):
        pass
    verifying = tls_server.write_kubeconfig(
        tmp_path / "verify", server=https(tls_server), **{"insecure-skip-tls-verify": False}
    )
    with pytest.raises(ApiUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        await Client.connect(verifying, timeout=5.0)


async def test_client_certificates_are_presented(
    server_cert: tuple[Path, Path], tmp_path: Path
) -> None:
    client_cert, client_key = self_signed(tmp_path, "operator", stem="client")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*server_cert)
    context.load_verify_locations(cafile=str(client_cert))
    context.verify_mode = ssl.CERT_REQUIRED
    async for server in hostile_server(context):
        ca = str(server_cert[0])
        with_cert = server.write_kubeconfig(
            tmp_path / "cert", server=https(server), **{"certificate-authority": ca}
        )
        text = with_cert.read_text().replace(
            "token: t0k",
            f"client-certificate: {client_cert}\n    client-key: {client_key}",
        )
        with_cert.write_text(text)
        async with await Client.connect(with_cert, timeout=5.0):
            pass
        without = server.write_kubeconfig(
            tmp_path / "nocert", server=https(server), **{"certificate-authority": ca}
        )
        with pytest.raises(ApiUnavailable):
            await Client.connect(without, timeout=5.0)


async def test_proxy_url_sends_requests_through_the_proxy(tmp_path: Path) -> None:
    async for proxy in hostile_server():
        proxy.replies += [answer(b'{"data":{"via":"proxy"}}')]
        kubeconfig = proxy.write_kubeconfig(
            tmp_path / "kc", server="http://api.invalid:6443", **{"proxy-url": proxy.url}
        )
        async with await Client.connect(kubeconfig, timeout=5.0) as client:
            got = await client.get(CONFIGMAPS, "x", "default")
        assert got["data"] == {"via": "proxy"}
        assert [r.request_line for r in proxy.received] == [
            "GET http://api.invalid:6443/version HTTP/1.1",
            "GET http://api.invalid:6443/api/v1/namespaces/default/configmaps/x HTTP/1.1",
        ]


async def test_a_socks_proxy_is_refused_with_what_to_do(tmp_path: Path) -> None:
    async for server in hostile_server():
        kubeconfig = server.write_kubeconfig(tmp_path / "kc", **{"proxy-url": "socks5://p:1080"})
        with pytest.raises(ValueError, match="only http:// and https:// proxies"):
            await Client.connect(kubeconfig, timeout=5.0)
