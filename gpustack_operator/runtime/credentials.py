"""Who the client is and how it reaches the API server: kubeconfig or in-cluster credentials.

The kubeconfig is read as kubectl reads it (several files merged, the first to name an entry
wins; file paths relative to the file that names them), and so is the in-cluster service
account (docs/runtime.md, "Credentials"). Tokens that rotate are read again: a ``tokenFile``
and the service-account token once a minute, an exec plugin's credential when it expires, and
everything after a 401 (:meth:`Credentials.reauthenticate`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog

from .kubeconfigfiles import KubeconfigError, locate, read_kubeconfig_file

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "TOKEN_REREAD_SECONDS",
    "CredentialError",
    "Credentials",
    "ExecPlugin",
    "load_credentials",
]

log = structlog.get_logger(__name__)

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS: Final = 60.0
"""How often a token file is read again (client-go's cached file token source: one minute)."""
_EXEC_API_VERSIONS: Final = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
)


class CredentialError(KubeconfigError):
    """Credentials cannot be loaded or refreshed; ``str()`` names what and the fix."""


@dataclass(frozen=True, slots=True)
class ExecPlugin:
    """A kubeconfig ``user.exec`` entry: a command that prints an ``ExecCredential``."""

    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    api_version: str
    install_hint: str
    cluster: Mapping[str, Any] | None
    """``spec.cluster`` of ``KUBERNETES_EXEC_INFO`` (only with ``provideClusterInfo``)."""
    where: str


@dataclass(frozen=True, slots=True)
class _Issued:
    """What one run of an exec plugin handed out."""

    token: str | None
    cert_pem: bytes | None
    key_pem: bytes | None
    expires_at: float | None
    """Wall-clock time (``time.time()``) after which the plugin is run again; None: never."""


class Credentials:
    """The server, its TLS settings and the client's identity, refreshed when they rotate.

    :meth:`authorization` is called before every request and costs one comparison unless a
    token is due for a re-read; :attr:`tls_generation` changes when the client certificate
    does (an exec plugin's), so the client builds a new transport.
    """

    def __init__(
        self,
        *,
        server: str,
        where: str,
        ca_pem: bytes | None = None,
        ca_file: Path | None = None,
        insecure: bool = False,
        tls_server_name: str | None = None,
        proxy: str | None = None,
        cert_pem: bytes | None = None,
        key_pem: bytes | None = None,
        cert_file: Path | None = None,
        key_file: Path | None = None,
        token: str | None = None,
        token_file: Path | None = None,
        basic: tuple[str, str] | None = None,
        exec_plugin: ExecPlugin | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.server = server
        self.where = where
        self.tls_server_name = tls_server_name or None
        self.proxy = proxy or None
        self.token = token
        """The bearer token sent now (a static token, the last read of a file, an exec
        plugin's); None for none."""
        self.tls_generation = 0
        self._ca_pem = ca_pem
        self._ca_file = ca_file
        self._insecure = insecure
        self._cert = (cert_pem, key_pem)
        self._cert_files = (cert_file, key_file)
        self._token_file = token_file
        self._basic = basic
        self._exec = exec_plugin
        self._clock = clock
        self._wall_clock = wall_clock
        self._due: float | None = None
        """When (``clock()``) the token must be read again; None: only after a 401."""
        self._lock = asyncio.Lock()

    def ssl_context(self) -> ssl.SSLContext | bool:
        """The TLS context for an ``https`` server: ``True`` (the system's CAs) where the
        kubeconfig names no CA, no client certificate and no ``insecure-skip-tls-verify``."""
        has_cert = self._cert[0] is not None or self._cert_files[0] is not None
        if self._ca_pem is None and self._ca_file is None and not self._insecure and not has_cert:
            return True
        if self._ca_pem is None and self._ca_file is None:
            context = ssl.create_default_context()
        else:
            # The kubeconfig's CA and nothing else, as client-go trusts it.
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            try:
                if self._ca_pem is not None:
                    context.load_verify_locations(cadata=self._ca_pem.decode("ascii", "replace"))
                else:
                    context.load_verify_locations(cafile=str(self._ca_file))
            except (OSError, ssl.SSLError) as exc:
                raise CredentialError(
                    f"{self.where}: cannot load the certificate authority ({exc}); put the "
                    "cluster's CA (PEM) in certificate-authority-data or certificate-authority"
                ) from None
        if self._insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if has_cert:
            self._load_client_certificate(context)
        return context

    def _load_client_certificate(self, context: ssl.SSLContext) -> None:
        """Load the client certificate and key; ``ssl`` reads them from files only, so inline
        data goes through private temporary files for the duration of the load."""
        sources = (*self._cert, *self._cert_files)
        cert_pem, key_pem, cert_file, key_file = sources
        if (cert_pem is None and cert_file is None) or (key_pem is None and key_file is None):
            raise CredentialError(
                f"{self.where}: a client certificate needs both a certificate and a key; set "
                "client-certificate(-data) and client-key(-data)"
            )
        try:
            with contextlib.ExitStack() as stack:
                paths: list[str] = []
                for data, path in ((cert_pem, cert_file), (key_pem, key_file)):
                    if data is None:
                        paths.append(str(path))
                        continue
                    handle = stack.enter_context(tempfile.NamedTemporaryFile(suffix=".pem"))
                    handle.write(data)
                    handle.flush()
                    paths.append(handle.name)
                context.load_cert_chain(paths[0], paths[1])
        except (OSError, ssl.SSLError) as exc:
            raise CredentialError(
                f"{self.where}: cannot load the client certificate and key ({exc}); check "
                "client-certificate(-data) and client-key(-data)"
            ) from None

    async def authorization(self) -> str | None:
        """The ``Authorization`` header value for the next request (None: send none)."""
        if self._due is not None and self._clock() >= self._due:
            async with self._lock:
                if self._due is not None and self._clock() >= self._due:
                    await self._refresh()
        if self.token:
            return f"Bearer {self.token}"
        if self._basic is not None:
            pair = f"{self._basic[0]}:{self._basic[1]}".encode()
            return "Basic " + base64.b64encode(pair).decode("ascii")
        return None

    async def reauthenticate(self) -> None:
        """Read every rotating credential again (after a 401)."""
        async with self._lock:
            await self._refresh()

    async def load(self) -> None:
        """Read the token file or run the exec plugin for the first time."""
        await self.reauthenticate()

    async def _refresh(self) -> None:
        if self._token_file is not None:
            self.token = _read_token_file(self._token_file, self.where)
            self._due = self._clock() + TOKEN_REREAD_SECONDS
        elif self._exec is not None:
            issued = await _run_exec_plugin(self._exec)
            if issued.cert_pem is not None and (issued.cert_pem, issued.key_pem) != self._cert:
                self._cert = (issued.cert_pem, issued.key_pem)
                self.tls_generation += 1
            self.token = issued.token
            self._due = (
                None
                if issued.expires_at is None
                else self._clock() + max(0.0, issued.expires_at - self._wall_clock())
            )


def _read_token_file(path: Path, where: str) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialError(
            f"{where}: cannot read the token file {path} ({exc}); make it readable or fix tokenFile"
        ) from None


async def _run_exec_plugin(plugin: ExecPlugin) -> _Issued:
    """Run *plugin* once, non-interactively, and read the ``ExecCredential`` it prints."""
    spec: dict[str, Any] = {"interactive": False}
    if plugin.cluster is not None:
        spec["cluster"] = plugin.cluster
    info = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec}
    env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
    named = f"{plugin.where}: the exec credential plugin {plugin.command!r}"
    try:
        process = await asyncio.create_subprocess_exec(
            plugin.command,
            *plugin.args,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        hint = plugin.install_hint.strip() or "install it or fix user.exec.command"
        raise CredentialError(f"{named} cannot be run ({exc.strerror or exc}); {hint}") from None
    stdout, stderr = await process.communicate()
    if process.returncode != 0:
        said = stderr.decode(errors="replace").strip().splitlines()
        detail = f": {said[-1]}" if said else ""
        raise CredentialError(
            f"{named} exited with status {process.returncode}{detail}; run it by hand to see "
            "why (for example an expired login)"
        )
    try:
        document = json.loads(stdout)
    except ValueError:
        raise CredentialError(
            f"{named} printed no JSON ExecCredential; check the plugin and its arguments"
        ) from None
    if not isinstance(document, dict) or document.get("kind") != "ExecCredential":
        raise CredentialError(f"{named} printed something other than an ExecCredential")
    if document.get("apiVersion") != plugin.api_version:
        raise CredentialError(
            f"{named} answered apiVersion {document.get('apiVersion')!r}, but the kubeconfig "
            f"asks for {plugin.api_version!r}; make user.exec.apiVersion match the plugin"
        )
    status = document.get("status")
    if not isinstance(status, dict):
        raise CredentialError(f"{named} returned an ExecCredential without a status")
    token = status.get("token") or None
    cert = status.get("clientCertificateData") or None
    key = status.get("clientKeyData") or None
    if (cert is None) != (key is None):
        raise CredentialError(
            f"{named} returned only one of clientCertificateData and clientKeyData; it must "
            "return both or neither"
        )
    if token is None and cert is None:
        raise CredentialError(
            f"{named} returned neither a token nor a client certificate; check the plugin"
        )
    expires_at = None
    if status.get("expirationTimestamp"):
        stamp = str(status["expirationTimestamp"])
        try:
            expires_at = datetime.datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            raise CredentialError(
                f"{named} returned expirationTimestamp {stamp!r}, not an RFC 3339 time"
            ) from None
    log.debug("exec_credential_issued", command=plugin.command, expires_at=expires_at)
    return _Issued(
        token=str(token) if token is not None else None,
        cert_pem=str(cert).encode() if cert is not None else None,
        key_pem=str(key).encode() if key is not None else None,
        expires_at=expires_at,
    )


# --- reading a kubeconfig -------------------------------------------------------------------


def _merged(files: Sequence[Path]) -> tuple[dict[str, dict[str, tuple[Any, Path]]], str | None]:
    """The clusters, users and contexts of *files* by name, each with the file it came from;
    the first file to name an entry wins it whole, as does the first ``current-context``."""
    merged: dict[str, dict[str, tuple[Any, Path]]] = {"clusters": {}, "users": {}, "contexts": {}}
    current: str | None = None
    for path in files:
        config = read_kubeconfig_file(path)
        current = current or config.get("current-context") or None
        for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for item in config.get(section) or []:
                if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                    merged[section].setdefault(item["name"], (item.get(key) or {}, path))
    return merged, current


def _file(value: object, origin: Path) -> Path | None:
    """A path from a kubeconfig, relative to the file that names it."""
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else origin.parent / path


def _data(value: object, field: str, where: str) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise CredentialError(f"{where}: {field} is not base64; fix it in the file") from None


def _from_kubeconfig(files: Sequence[Path], context: str | None) -> Credentials:
    merged, current = _merged(files)
    name = context or current or ""
    where = "kubeconfig " + ":".join(str(f) for f in files) + f" (context {name})"
    entry, _ = merged["contexts"].get(name, ({}, files[0]))
    cluster_name = entry.get("cluster") if isinstance(entry, Mapping) else None
    if cluster_name not in merged["clusters"]:
        raise CredentialError(
            f"{where}: the context names cluster {cluster_name!r}, which no file defines; add "
            "it to clusters or fix the context"
        )
    cluster, cluster_file = merged["clusters"][cluster_name]
    server = str(cluster.get("server") or "")
    if not server:
        raise CredentialError(f"{where}: cluster {cluster_name!r} has no server; add its URL")
    user_name = entry.get("user")
    user: Mapping[str, Any] = {}
    user_file = cluster_file
    if user_name:
        if user_name not in merged["users"]:
            raise CredentialError(
                f"{where}: the context names user {user_name!r}, which no file defines; add it "
                "to users or fix the context"
            )
        user, user_file = merged["users"][user_name]
    if user.get("auth-provider"):
        provider = (user["auth-provider"] or {}).get("name", "?")
        raise CredentialError(
            f"{where}: user {user_name!r} uses auth-provider {provider!r}, which is not "
            "supported; switch it to an exec credential plugin (user.exec), as kubectl "
            "itself requires since Kubernetes 1.26"
        )
    return Credentials(
        server=server,
        where=where,
        ca_pem=_data(
            cluster.get("certificate-authority-data"), "certificate-authority-data", where
        ),
        ca_file=_file(cluster.get("certificate-authority"), cluster_file),
        insecure=cluster.get("insecure-skip-tls-verify") is True,
        tls_server_name=cluster.get("tls-server-name"),
        proxy=cluster.get("proxy-url"),
        cert_pem=_data(user.get("client-certificate-data"), "client-certificate-data", where),
        key_pem=_data(user.get("client-key-data"), "client-key-data", where),
        cert_file=_file(user.get("client-certificate"), user_file),
        key_file=_file(user.get("client-key"), user_file),
        token=str(user["token"]) if user.get("token") else None,
        token_file=_file(user.get("tokenFile"), user_file),
        basic=(
            (str(user["username"]), str(user.get("password") or ""))
            if user.get("username")
            else None
        ),
        exec_plugin=_exec_plugin(user.get("exec"), user_file, cluster, server, where),
    )


def _exec_plugin(
    entry: object, origin: Path, cluster: Mapping[str, Any], server: str, where: str
) -> ExecPlugin | None:
    if not entry:
        return None
    if not isinstance(entry, Mapping) or not entry.get("command"):
        raise CredentialError(f"{where}: user.exec has no command; name the plugin to run")
    api_version = str(entry.get("apiVersion") or "")
    if api_version not in _EXEC_API_VERSIONS:
        raise CredentialError(
            f"{where}: user.exec.apiVersion {api_version!r} is not supported; use "
            + " or ".join(_EXEC_API_VERSIONS)
        )
    if entry.get("interactiveMode") == "Always":
        raise CredentialError(
            f"{where}: user.exec.interactiveMode is Always, but the operator runs without a "
            "terminal; use a plugin that logs in without one (interactiveMode IfAvailable/Never)"
        )
    command = str(entry["command"])
    if os.sep in command and not Path(command).is_absolute():
        command = str(origin.parent / command)  # relative to the kubeconfig, as kubectl does
    env = tuple(
        (str(item.get("name")), str(item.get("value") or ""))
        for item in entry.get("env") or []
        if isinstance(item, Mapping) and item.get("name")
    )
    info = None
    if entry.get("provideClusterInfo"):
        info = {
            "server": server,
            **{
                key: cluster[key]
                for key in ("tls-server-name", "insecure-skip-tls-verify", "proxy-url")
                if key in cluster
            },
        }
        if cluster.get("certificate-authority-data"):
            info["certificate-authority-data"] = cluster["certificate-authority-data"]
        if isinstance(cluster.get("extensions"), list):
            for extension in cluster["extensions"]:
                if (
                    isinstance(extension, Mapping)
                    and extension.get("name") == "client.authentication.k8s.io/exec"
                ):
                    info["config"] = extension.get("extension")
    return ExecPlugin(
        command=command,
        args=tuple(str(a) for a in entry.get("args") or []),
        env=env,
        api_version=api_version,
        install_hint=str(entry.get("installHint") or ""),
        cluster=info,
        where=where,
    )


def _in_cluster(env: Mapping[str, str], directory: Path) -> Credentials:
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    where = "in-cluster service account"
    if not host or not port:
        raise CredentialError(
            f"{where}: KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set; run in a "
            "Pod, or pass --kubeconfig FILE or set KUBECONFIG"
        )
    ca = directory / "ca.crt"
    return Credentials(
        server=f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}",
        where=where,
        ca_file=ca if ca.exists() else None,
        token_file=directory / "token",
    )


async def load_credentials(
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
    service_account: Path = SERVICE_ACCOUNT_DIR,
) -> Credentials:
    """Credentials from *kubeconfig* (``a:b`` for several files), else ``KUBECONFIG``, else
    ``~/.kube/config``, else the in-cluster service account; *context* picks a kubeconfig
    context. Token files are read and an exec plugin run once here. Raises
    :class:`KubeconfigError` (and its :class:`CredentialError`)."""
    env = os.environ if env is None else env
    located = locate(
        kubeconfig, context, env=env, home=home, in_cluster_token=service_account / "token"
    )
    if located.files:
        credentials = _from_kubeconfig(located.files, located.context)
    else:
        credentials = _in_cluster(env, service_account)
    await credentials.load()
    return credentials
