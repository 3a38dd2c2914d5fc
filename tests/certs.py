"""Self-signed TLS certificates for tests that need an HTTPS listener on 127.0.0.1."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any

import pytest


def self_signed(
    directory: Path,
    common_name: str,
    *,
    dns_names: tuple[str, ...] = (),
    stem: str = "tls",
) -> tuple[Path, Path]:
    """A self-signed CA certificate for 127.0.0.1 (and *dns_names*) and its key, written as
    ``<stem>.crt`` and ``<stem>.key`` in *directory*. Skips the test without cryptography."""
    x509 = pytest.importorskip("cryptography.x509", reason="cryptography builds the test cert")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    alternative_names: list[Any] = [x509.DNSName(n) for n in dns_names]
    alternative_names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file
