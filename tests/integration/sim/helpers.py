"""Small helpers for the simulated-API-server tests: raw requests through kr8s, polling."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


async def call(
    api: Any,
    method: str,
    path: str,
    body: Any = None,
    *,
    params: dict[str, Any] | None = None,
    content_type: str = "application/json",
    raw: bytes | str | None = None,
) -> httpx.Response:
    """One request at an absolute API path, never raising on HTTP errors."""
    kwargs: dict[str, Any] = {"params": params or {}}
    if raw is not None:
        kwargs["content"] = raw
        kwargs["headers"] = {"Content-Type": content_type}
    elif body is not None:
        kwargs["content"] = json.dumps(body)
        kwargs["headers"] = {"Content-Type": content_type}
    async with api.call_api(
        method, version="", base=path, raise_for_status=False, **kwargs
    ) as resp:
        await resp.aread()
        return resp


async def watch_lines(
    api: Any,
    path: str,
    params: dict[str, Any],
    *,
    stop_after: int | None = None,
    on_ready: Callable[[], Awaitable[None]] | None = None,
    limit: float = 60.0,
) -> list[dict[str, Any]]:
    """Read a watch stream's events until it ends (or ``stop_after`` events arrived)."""
    events: list[dict[str, Any]] = []
    with anyio.fail_after(limit):
        async with api.call_api(
            "GET", version="", base=path, params={"watch": "true", **params}, stream=True
        ) as resp:
            if on_ready is not None:
                await on_ready()
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                events.append(json.loads(line))
                if stop_after is not None and len(events) >= stop_after:
                    break
    return events


async def eventually(
    check: Callable[[], Any], *, within: float = 60.0, interval: float = 0.01
) -> Any:
    """Poll ``check`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s (last: {result!r})")
        await anyio.sleep(interval)


def deployment(name: str, namespace: str | None = None, **spec: Any) -> dict[str, Any]:
    """A Deployment the API server accepts (selector, labelled template, one container),
    with *spec* merged over its spec."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
            **spec,
        },
    }


# --- Kubernetes protobuf bodies, as client-go encodes them (field numbers of generated.proto) -


def _varint(value: int) -> bytes:
    out = b""
    while True:
        byte, value = value & 0x7F, value >> 7
        if value:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def pb_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: a string, bytes, a nested message or a map entry."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def pb_number(number: int, value: int) -> bytes:
    """A varint field: an integer or a bool."""
    return _varint(number << 3) + _varint(value)


def pb_envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    """*raw* (the object's message) in the ``k8s\\0`` envelope with its TypeMeta."""
    type_meta = pb_field(1, api_version.encode()) + pb_field(2, kind.encode())
    return b"k8s\x00" + pb_field(1, type_meta) + pb_field(2, raw)


def certificate_signing_request(name: str) -> dict[str, Any]:
    """A CertificateSigningRequest for a client certificate, its request a real PKCS#10
    request (an EC P-256 key, signed) for the common name *name*."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    request = x509.CertificateSigningRequestBuilder().subject_name(subject)
    pem = request.sign(ec.generate_private_key(ec.SECP256R1()), hashes.SHA256()).public_bytes(
        serialization.Encoding.PEM
    )
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64.b64encode(pem).decode(),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["client auth"],
        },
    }
