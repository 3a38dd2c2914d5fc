"""The simulated cluster's own certificate authority: HTTPS and client-certificate users.

A real cluster's kubeconfig names the API server's CA and, for many users, a client
certificate whose subject is the user: the common name is the user name and every
organization a group, as kube-apiserver's x509 authenticator maps it (docs/simulator.md,
"TLS and client certificates"). Keys and certificates live in memory and in the kubeconfigs
the simulator writes; nothing here is meant to protect anything.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpustack_sim.apiserver.authn import UserInfo, with_implied_groups

__all__ = ["ClusterCA", "user_from_peer"]

VALIDITY = datetime.timedelta(days=365)
SERVER_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class ClusterCA:
    """A CA that signs the server's certificate and client certificates for users."""

    def __init__(self, name: str = "gpustack-operator-sim-ca") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._name = subject
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        """The CA certificate (what a kubeconfig's ``certificate-authority-data`` holds)."""
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def _issue(
        self, subject: x509.Name, usage: x509.ObjectIdentifier, names: Iterable[Any] = ()
    ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        alternative = list(names)
        if alternative:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(alternative), critical=False
            )
        cert = builder.sign(self._key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    def issue_client(self, user: str, groups: Sequence[str] = ()) -> tuple[bytes, bytes]:
        """A client certificate and key for *user* in *groups* (CN = user, O = each group)."""
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        return self._issue(x509.Name(attributes), ExtendedKeyUsageOID.CLIENT_AUTH)

    def server_context(self, host: str) -> ssl.SSLContext:
        """A server TLS context for *host* that also asks for (and checks) client certs."""
        names: list[Any] = [x509.DNSName(n) for n in SERVER_NAMES]
        for address in {host, "127.0.0.1"}:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(address)))
            except ValueError:
                names.append(x509.DNSName(address))
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
        cert, key = self._issue(subject, ExtendedKeyUsageOID.SERVER_AUTH, names)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as folder:  # ssl loads chains from files only
            cert_file, key_file = Path(folder) / "tls.crt", Path(folder) / "tls.key"
            cert_file.write_bytes(cert)
            key_file.write_bytes(key)
            context.load_cert_chain(cert_file, key_file)
        context.load_verify_locations(cadata=self.pem.decode())
        context.verify_mode = ssl.CERT_OPTIONAL
        return context


def user_from_peer(peer: Any) -> UserInfo | None:
    """The user a verified client certificate names (``ssl.SSLObject.getpeercert()``)."""
    if not isinstance(peer, dict) or not peer.get("subject"):
        return None
    name, groups = "", []
    for rdn in peer["subject"]:
        for key, value in rdn:
            if key == "commonName":
                name = value
            elif key == "organizationName":
                groups.append(value)
    if not name:
        return None
    return UserInfo(name, "", with_implied_groups(name, groups))
