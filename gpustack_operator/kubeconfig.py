"""Connect with a kubeconfig; every failure is one line naming the file and the fix.

Every command that talks to a cluster (``worker``, ``device-manager serve``,
``worker-gateway``, ``plan --kubeconfig``, ``queues``) goes through :func:`connect` or
:func:`connect_kr8s`: the files are checked first (``runtime.kubeconfigfiles``), kr8s reads
the credentials (``runtime.credentials``), and a failed first request becomes the same
one-line form (docs/configuration.md, "Kubeconfig errors").
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from gpustack_operator.runtime.errors import ApiError, ApiUnavailable
from gpustack_operator.runtime.kubeconfigfiles import (
    KubeconfigError,
    Located,
    choose_context,
    locate,
    parse_kubeconfig_text,
    read_kubeconfig_file,
)

if TYPE_CHECKING:
    from kr8s.asyncio import Api

    from gpustack_operator.runtime.client import Client
    from gpustack_operator.runtime.credentials import Credentials

__all__ = [
    "KubeconfigError",
    "Located",
    "choose_context",
    "close_kr8s",
    "connect",
    "connect_kr8s",
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
    unreachable = _kr8s_unreachable(exc)
    if unreachable is not None:
        return f"{where}: cannot reach the API server {server} ({unreachable}); {fix_server}"
    refused = _refused_status(exc)
    if refused is not None:
        return (
            f"{where}: the API server {server} refused the credentials ({refused}); renew the "
            "token or client certificate in the file"
        )
    return (
        f"{where}: cannot use these credentials ({type(exc).__name__}: {_first_line(exc)}); "
        "check the cluster, user and context entries in the file"
    )


def _kr8s_unreachable(exc: BaseException) -> str | None:
    """What kr8s's HTTP client (httpx) said when no answer came: a refused or reset
    connection, a timeout; None for anything else."""
    import httpx
    from kr8s import APITimeoutError

    transport = _find_in_chain(exc, httpx.TransportError)
    if transport is not None:
        return f"{type(transport).__name__}: {_first_line(transport)}"
    if _find_in_chain(exc, APITimeoutError) is not None:
        return "no answer in time"
    return None


def _refused_status(exc: BaseException) -> str | None:
    """``"401 Unauthorized"`` or ``"403 Forbidden"`` when the server refused the credentials
    (the runtime's :class:`ApiError` or kr8s's ``ServerError``); None otherwise."""
    if isinstance(exc, ApiError) and exc.status in (401, 403):
        return f"{exc.status} {exc.reason}"
    from kr8s import ServerError

    if isinstance(exc, ServerError) and exc.response is not None:
        code = exc.response.status_code
        if code in (401, 403):
            return f"{code} {exc.response.reason_phrase}"
    return None


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


async def _credentials(kubeconfig: str | Path | None, context: str | None) -> Credentials:
    from gpustack_operator.runtime.credentials import load_credentials

    return await load_credentials(kubeconfig, context)


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

    credentials = await _credentials(kubeconfig, context)
    try:
        return await runtime_client.Client.connect(credentials=credentials, **options)
    except KubeconfigError:
        raise  # already one line naming the file and the fix (runtime.credentials)
    except Exception as exc:
        located = locate(kubeconfig, context)
        raise KubeconfigError(describe_connect_error(exc, located, credentials.server)) from exc


async def connect_kr8s(kubeconfig: str | Path | None, context: str | None) -> Api:
    """A kr8s ``Api`` with the same credentials as :func:`connect` (a token file re-read, the
    one-line errors), for commands that read or write a few objects through kr8s's objects.
    Raises :class:`KubeconfigError`."""
    import kr8s.asyncio

    credentials = await _credentials(kubeconfig, context)
    # kr8s.asyncio.api() would read the credentials again with its own KubeAuth (no token
    # file, bare errors); its Api takes ours instead, the kr8s object it expects.
    api = kr8s.asyncio.Api(bypass_factory=True, kubeconfig=kubeconfig, context=context)
    api.auth = credentials
    try:
        await api.version()
    except BaseException as exc:  # a failure, or the caller's deadline: close the session
        with anyio.CancelScope(shield=True):
            await close_kr8s(api)
        if isinstance(exc, KubeconfigError) or not isinstance(exc, Exception):
            raise
        located = locate(kubeconfig, context)
        raise KubeconfigError(describe_connect_error(exc, located, credentials.server)) from exc
    return api


async def close_kr8s(api: Api) -> None:
    """Close the HTTP session of an ``Api`` from :func:`connect_kr8s` (kr8s 0.20 has no public
    close; its session otherwise lingers until the process ends)."""
    session = getattr(api, "_session", None)
    if session is not None:
        await session.aclose()
