"""Connect with a kubeconfig; every failure is one line naming the file and the fix.

Every command that talks to a cluster (``worker``, ``device-manager serve``,
``worker-gateway``, ``plan --kubeconfig``) goes through :func:`connect`, which checks the
files first (``runtime.kubeconfigfiles``) and turns connection failures into the same
one-line form (docs/configuration.md, "Kubeconfig errors").
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpustack_operator.runtime.errors import ApiError, ApiUnavailable
from gpustack_operator.runtime.kubeconfigfiles import (
    IN_CLUSTER_TOKEN,
    KubeconfigError,
    Located,
    choose_context,
    locate,
    parse_kubeconfig_text,
    read_kubeconfig_file,
)

if TYPE_CHECKING:
    from gpustack_operator.runtime.client import Client

__all__ = [
    "IN_CLUSTER_TOKEN",
    "KubeconfigError",
    "Located",
    "choose_context",
    "connect",
    "describe_connect_error",
    "locate",
    "parse_kubeconfig_text",
    "read_kubeconfig_file",
]

_E = TypeVar("_E", bound=BaseException)


def describe_connect_error(exc: BaseException, located: Located, server: str) -> str:
    """One line for a failed first request to *server* with the credentials of *located*."""
    where = located.where + (f" (context {located.context})" if located.context else "")
    fix_server = (
        "check the cluster's server address in the file and that the API server is up"
        if located.files
        else "check the Pod's network and the API server"
    )
    cert = _find_in_chain(exc, ssl.SSLCertVerificationError)
    if cert is not None:
        reason = getattr(cert, "verify_message", None) or "verification failed"
        return (
            f"{where}: the API server {server} presented a certificate that does not verify "
            f"({reason}); put the cluster's CA in certificate-authority-data (or "
            "certificate-authority) of the file, or fix the server address"
        )
    tls = _find_in_chain(exc, ssl.SSLError)
    if tls is not None:
        return (
            f"{where}: TLS with the API server {server} failed ({tls.reason or tls}); check the "
            "certificate-authority and client certificate data in the file"
        )
    if isinstance(exc, ApiUnavailable):
        cause = exc.__cause__ or exc.__context__
        detail = _first_line(cause) if cause is not None else _first_line(exc)
        return f"{where}: cannot reach the API server {server} ({detail}); {fix_server}"
    if isinstance(exc, ApiError) and exc.status in (401, 403):
        return (
            f"{where}: the API server {server} refused the credentials ({exc.status} "
            f"{exc.reason}); renew the token or client certificate in the file"
        )
    return (
        f"{where}: cannot use these credentials ({type(exc).__name__}: {_first_line(exc)}); "
        "check the cluster, user and context entries in the file"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _find_in_chain(exc: BaseException, kind: type[_E]) -> _E | None:
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return current
        stack += [e for e in (current.__cause__, current.__context__) if e is not None]
        stack += list(getattr(current, "exceptions", ()))
    return None


def _server_of(configs_where: Located) -> str:
    """The server URL the chosen context points at ("" when it cannot be told)."""
    for file in configs_where.files:
        try:
            config = read_kubeconfig_file(file)
        except KubeconfigError:
            continue
        context_name = configs_where.context or config.get("current-context")
        contexts = {
            c.get("name"): c.get("context") or {}
            for c in config.get("contexts") or []
            if isinstance(c, Mapping)
        }
        cluster_name = (contexts.get(context_name) or {}).get("cluster")
        for cluster in config.get("clusters") or []:
            if isinstance(cluster, Mapping) and cluster.get("name") == cluster_name:
                return str((cluster.get("cluster") or {}).get("server") or "")
    return ""


async def connect(
    kubeconfig: str | Path | None,
    context: str | None,
    **options: Any,
) -> Client:
    """A connected :class:`~gpustack_operator.runtime.client.Client`; raises
    :class:`KubeconfigError` with one line for every way the credentials can fail.

    *options* go to ``Client.connect`` (qps, burst, timeout).
    """
    from gpustack_operator.runtime import client as runtime_client

    located = locate(kubeconfig, context)
    try:
        return await runtime_client.Client.connect(located.kubeconfig, located.context, **options)
    except KubeconfigError:
        raise  # already one line naming the file and the fix (runtime.credentials)
    except Exception as exc:
        server = _server_of(located) or "(in-cluster)"
        raise KubeconfigError(describe_connect_error(exc, located, server)) from exc
