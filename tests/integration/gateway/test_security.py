"""Bearer-token authentication and TLS."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from gpustack_operator.gateway.api import ApiOptions
from gpustack_operator.gateway.server import load_tokens, tls_context

from ...certs import self_signed
from .conftest import SimCluster
from .support import all_ready, running_gateway

pytestmark = pytest.mark.anyio


async def test_a_protected_gateway_needs_a_token(
    clusters: list[SimCluster], tmp_path: Path
) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text("# gateway clients\ns3cret-one\n\ns3cret-two\n")
    tokens = load_tokens(token_file)
    assert tokens == ["s3cret-one", "s3cret-two"]
    async with (
        running_gateway([clusters[0].spec], api=ApiOptions(tokens=tokens)) as server,
        httpx.AsyncClient(base_url=server.url) as anonymous,
        httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": "Bearer s3cret-two"}
        ) as client,
    ):
        for path in ("/apis/v1/clusters", "/apis/v1/pools", "/metrics"):
            denied = await anonymous.get(path)
            assert denied.status_code == 401, path
            assert denied.headers["WWW-Authenticate"].startswith("Bearer")
            assert "Bearer" in denied.json()["message"]
        wrong = await anonymous.get("/apis/v1/pools", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        basic = await anonymous.get("/apis/v1/pools", headers={"Authorization": "Basic s3cret-one"})
        assert basic.status_code == 401
        watch = await anonymous.get("/apis/v1/pools", params={"watch": "true"})
        assert watch.status_code == 401
        # Probes stay open for the kubelet.
        assert (await anonymous.get("/healthz")).status_code == 200
        await all_ready(client, 1)
        assert (await client.get("/apis/v1/pools")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200


def test_a_token_file_without_tokens_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n\n")
    with pytest.raises(ValueError, match="holds no token"):
        load_tokens(empty)
    with pytest.raises(ValueError, match="cannot read the token file"):
        load_tokens(tmp_path / "missing")


def _self_signed(tmp_path: Path, common_name: str = "worker-gateway-test") -> tuple[Path, Path]:
    return self_signed(tmp_path, common_name)


async def test_tls_serves_https(clusters: list[SimCluster], tmp_path: Path) -> None:
    cert_file, key_file = _self_signed(tmp_path)
    context = tls_context(cert_file, key_file)
    async with running_gateway([clusters[0].spec], tls=context) as server:
        assert server.url.startswith("https://")
        trust = ssl.create_default_context(cafile=str(cert_file))
        async with httpx.AsyncClient(base_url=server.url, verify=trust) as client:
            await all_ready(client, 1)
            assert (await client.get("/apis/v1/pools")).status_code == 200
        async with httpx.AsyncClient(base_url=server.url.replace("https", "http")) as plain:
            with pytest.raises(httpx.HTTPError):
                await plain.get("/apis/v1/clusters")


def test_a_bad_certificate_is_reported(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    with pytest.raises(ValueError, match="cannot load the TLS certificate"):
        tls_context(tmp_path / "tls.crt", tmp_path / "tls.key")
