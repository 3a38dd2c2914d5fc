"""Connection limits, reloads without restart and the registration allow-list
(docs/worker-gateway.md, "Security")."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography import x509

from gpustack_operator.gateway.api import ApiOptions
from gpustack_operator.gateway.guard import ConnectionLimits
from gpustack_operator.gateway.server import load_tokens, tls_context
from gpustack_operator.runtime.metrics import REGISTRY

from .conftest import SimCluster
from .support import all_ready, eventually, running_gateway, watching
from .test_security import _self_signed

pytestmark = pytest.mark.anyio

_PARTIAL_HEADERS = b"GET /apis/v1/clusters HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


async def test_slow_connections_are_closed_while_requests_are_served(
    clusters: list[SimCluster],
) -> None:
    limits = ConnectionLimits(header_timeout=0.5, idle_timeout=30.0, max_connections=200)
    async with (
        running_gateway([clusters[0].spec], limits=limits) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
        watching(client, "/apis/v1/pools") as watch,
    ):
        assert server.port is not None
        slow = []
        for index in range(60):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            if index % 2:  # half send part of their headers, half send nothing at all
                writer.write(_PARTIAL_HEADERS)
                await writer.drain()
            slow.append((reader, writer))
        # Normal requests are served while the slow connections are held.
        await all_ready(client, 1)
        assert (await client.get("/apis/v1/pools")).status_code == 200
        deadline = time.monotonic() + 30
        for reader, _ in slow:
            data = await asyncio.wait_for(reader.read(), max(deadline - time.monotonic(), 0.01))
            assert data == b"", data  # closed without an answer
        for _, writer in slow:
            writer.close()
        # A watch is a request in progress: no header or idle deadline ends it.
        assert not watch.ended
        assert (await client.get("/apis/v1/clusters")).status_code == 200


async def test_connections_over_the_limit_get_503(clusters: list[SimCluster]) -> None:
    limits = ConnectionLimits(header_timeout=30.0, max_connections=3)
    async with running_gateway([clusters[0].spec], limits=limits) as server:
        assert server.port is not None
        held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            refused = await client.get("/healthz")
            assert refused.status_code == 503
            assert "too many connections" in refused.text
        _, writer = held.pop()
        writer.close()

        async def served() -> bool:
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as fresh:
                return (await fresh.get("/healthz")).status_code == 200

        end = time.monotonic() + 30
        while not await served():
            assert time.monotonic() < end, "a freed connection slot was never reused"
            await asyncio.sleep(0.02)
        for _, writer in held:
            writer.close()


async def test_watchers_are_limited_per_token(clusters: list[SimCluster]) -> None:
    api = ApiOptions(tokens=["alpha", "beta"], max_watchers_per_token=1)
    async with (
        running_gateway([clusters[0].spec], api=api) as server,
        httpx.AsyncClient(
            base_url=server.url, timeout=10, headers={"Authorization": "Bearer alpha"}
        ) as alpha,
        httpx.AsyncClient(
            base_url=server.url, timeout=10, headers={"Authorization": "Bearer beta"}
        ) as beta,
        watching(alpha, "/apis/v1/pools"),
    ):
        second = await alpha.get("/apis/v1/clusters", params={"watch": "true"})
        assert second.status_code == 429
        assert "--max-watchers-per-token" in second.json()["message"]
        assert (await alpha.get("/apis/v1/clusters")).status_code == 200  # lists still work
        async with watching(beta, "/apis/v1/clusters") as other:
            assert other.synced()


async def _peer_common_name(url: str) -> str:
    """The subject of the certificate the gateway presents to a new connection."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only reads the certificate; trust is checked below
    host, port = url.removeprefix("https://").rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port), ssl=context)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    return str(x509.load_der_x509_certificate(der).subject.rfc4514_string())


async def test_a_rotated_certificate_is_served_without_restart(
    clusters: list[SimCluster], tmp_path: Path
) -> None:
    first = tmp_path / "first"
    first.mkdir()
    cert_file, key_file = _self_signed(first, "gateway-one")
    async with running_gateway(
        [clusters[0].spec],
        tls=tls_context(cert_file, key_file),
        tls_files=(cert_file, key_file),
        reload_interval=0.05,
    ) as server:
        assert await _peer_common_name(server.url) == "CN=gateway-one"
        second = tmp_path / "second"
        second.mkdir()
        new_cert, new_key = _self_signed(second, "gateway-two")
        # Written in place, certificate first: the mismatched pair in between is not taken.
        cert_file.write_bytes(new_cert.read_bytes())
        key_file.write_bytes(new_key.read_bytes())
        end = time.monotonic() + 30
        while await _peer_common_name(server.url) != "CN=gateway-two":
            assert time.monotonic() < end, "the rotated certificate was never served"
            await asyncio.sleep(0.02)
        trust = ssl.create_default_context(cafile=str(new_cert))
        async with httpx.AsyncClient(base_url=server.url, verify=trust) as client:
            assert (await client.get("/healthz")).status_code == 200


async def test_a_changed_token_file_applies_without_restart(
    clusters: list[SimCluster], tmp_path: Path
) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text("old-token\n")
    api = ApiOptions(tokens=load_tokens(token_file))
    async with (
        running_gateway(
            [clusters[0].spec], api=api, token_file=token_file, reload_interval=0.05
        ) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        old = {"Authorization": "Bearer old-token"}
        new = {"Authorization": "Bearer new-token"}
        assert (await client.get("/apis/v1/clusters", headers=old)).status_code == 200
        token_file.write_text("# rotated\nnew-token\n")

        async def rotated() -> bool:
            got_new = await client.get("/apis/v1/clusters", headers=new)
            got_old = await client.get("/apis/v1/clusters", headers=old)
            return got_new.status_code == 200 and got_old.status_code == 401

        end = time.monotonic() + 30
        while not await rotated():
            assert time.monotonic() < end, "the new token file was never applied"
            await asyncio.sleep(0.02)
        failed = {"file": "tokens", "result": "failed"}
        before = REGISTRY.get_sample_value("gpustack_gateway_reloads_total", failed) or 0.0
        token_file.write_text("# emptied by mistake\n")
        await eventually(
            lambda: (
                (REGISTRY.get_sample_value("gpustack_gateway_reloads_total", failed) or 0) > before
            ),
            "the emptied token file being refused",
        )
        assert (await client.get("/apis/v1/clusters", headers=new)).status_code == 200


async def test_registration_refuses_proxies_and_unlisted_servers(
    clusters: list[SimCluster],
) -> None:
    east, west, _ = clusters
    api = ApiOptions(allow_registration=True)
    async with (
        running_gateway([east.spec], api=api) as server,
        httpx.AsyncClient(base_url=server.url, timeout=10) as client,
    ):
        await all_ready(client, 1)
        outside = await client.post("/apis/v1/clusters/west", content=west.kubeconfig.read_text())
        assert outside.status_code == 400
        message = outside.json()["message"]
        assert "not allowed for registration" in message
        assert "--allowed-registration-server" in message
        proxied = yaml.safe_load(east.kubeconfig.read_text())
        proxied["clusters"][0]["cluster"]["proxy-url"] = "http://127.0.0.1:3128"
        refused = await client.post("/apis/v1/clusters/proxied", json=proxied)
        assert refused.status_code == 400
        assert "proxy-url" in refused.json()["message"]
        # The server of a cluster given at start-up may be registered again under a new name.
        again = await client.post(
            "/apis/v1/clusters/east-again", content=east.kubeconfig.read_text()
        )
        assert again.status_code == 201, again.text
        names = [c["name"] for c in (await client.get("/apis/v1/clusters")).json()["items"]]
        assert names == ["east", "east-again"]
