"""The one-off checks of a cluster posted for registration, through kr8s's objects.

Before the gateway serves a registered cluster it reaches the cluster's API server once with
the posted kubeconfig and context (:func:`~gpustack_operator.kubeconfig.connect_kr8s`), reads
its version, finds the Kueue version it serves and lists each watched kind once (one page) with
the gateway's selector. A cluster that fails is refused with what to fix
(docs/worker-gateway.md, "Registering a cluster"), rather than served as ``Unreachable``. Only
these few requests go through kr8s; the long-running informers stay on the runtime's client
(:mod:`~gpustack_operator.gateway.cluster`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import anyio

from gpustack_operator.domain.chain.kueue import KUEUE_GROUP, KueueVersion
from gpustack_operator.gateway.kinds import MANAGED_SELECTOR, pick_version, watched_resources
from gpustack_operator.kr8sobjects import first_object, served_versions
from gpustack_operator.kubeconfig import KubeconfigError, close_kr8s, connect_kr8s

if TYPE_CHECKING:
    from kr8s.asyncio import Api

__all__ = ["MemberFacts", "MemberRefused", "check_member"]

POSTED: Final = "the posted kubeconfig"
"""How messages name the kubeconfig (the gateway's private copy of it means nothing to the
client that posted it)."""
KUEUE_INSTALL: Final = "https://kueue.sigs.k8s.io/docs/installation/"
CANNOT_CONNECT: Final = "CannotConnect"
"""The Status reason when the API server cannot be reached or refuses the credentials."""


@dataclass(frozen=True)
class MemberFacts:
    """What registration read from the cluster."""

    server: str
    server_version: str
    """The API server's ``gitVersion`` (``GET /version``)."""
    kueue_version: KueueVersion
    """The Kueue version the gateway will read (v1beta2 first)."""


class MemberRefused(Exception):
    """The cluster cannot be served; ``reason`` is the API's Status reason, ``str()`` says
    what is wrong and what to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


async def check_member(kubeconfig: Path, context: str | None, *, within: float) -> MemberFacts:
    """Reach the cluster of *kubeconfig* (*context*) and check that the gateway can serve it;
    raises :class:`MemberRefused`. All its requests together take at most *within* seconds."""
    try:
        with anyio.fail_after(within):
            api = await _connect(kubeconfig, context)
            try:
                return await _read(api)
            finally:
                with anyio.CancelScope(shield=True):
                    await close_kr8s(api)
    except TimeoutError:
        raise MemberRefused(
            CANNOT_CONNECT,
            f"{POSTED}: no answer from the API server within {within:g} s; check that the "
            "gateway can reach the cluster's server address (network, firewall) and that the "
            "API server is up",
        ) from None
    except MemberRefused:
        raise
    except Exception as exc:  # kr8s's ServerError (5xx), httpx's errors after connecting
        said = str(exc).strip().splitlines()
        raise MemberRefused(
            CANNOT_CONNECT,
            f"{POSTED}: reading the cluster failed ({type(exc).__name__}: "
            f"{said[0] if said else ''}); check the API server's health and register it again",
        ) from None


async def _connect(kubeconfig: Path, context: str | None) -> Api:
    try:
        return await connect_kr8s(kubeconfig, context)
    except KubeconfigError as exc:  # one line: what failed (network, TLS, credentials), the fix
        raise MemberRefused(
            CANNOT_CONNECT, str(exc).replace(f"kubeconfig {kubeconfig}", POSTED)
        ) from None


async def _read(api: Api) -> MemberFacts:
    from kr8s import ServerError

    server = str(api.auth.server)
    version = await api.version()
    served = await served_versions(api, KUEUE_GROUP)
    kueue = pick_version(served)
    if kueue is None:
        raise MemberRefused(
            "KueueNotServed",
            f"the cluster at {server} serves no Kueue API ({KUEUE_GROUP} v1beta2 or v1beta1; "
            f"served: {', '.join(served) or 'none'}): install Kueue there ({KUEUE_INSTALL}) "
            "and the operator's worker, then register it again",
        )
    for plural, resource in watched_resources(kueue).items():
        try:
            await first_object(api, resource, MANAGED_SELECTOR)
        except ServerError as exc:
            code = exc.response.status_code if exc.response is not None else None
            if code == 403:
                raise MemberRefused(
                    "Forbidden",
                    f"the credentials may not list {plural}.{KUEUE_GROUP} at {server} (403 "
                    f"Forbidden): grant get, list and watch on resourceflavors, cohorts, "
                    f"clusterqueues and localqueues of {KUEUE_GROUP} to the kubeconfig's user",
                ) from None
            if code == 404:
                raise MemberRefused(
                    "KueueNotServed",
                    f"the cluster at {server} does not serve {plural}.{KUEUE_GROUP}/"
                    f"{kueue.value} (404): install Kueue's CRDs there ({KUEUE_INSTALL}), then "
                    "register it again",
                ) from None
            raise
    return MemberFacts(server, str(version.get("gitVersion") or ""), kueue)
