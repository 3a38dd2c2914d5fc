"""The ServiceAccount stand-in: every namespace has a ``default`` ServiceAccount.

On a real cluster kube-controller-manager's ServiceAccount controller creates it in each
namespace, and creates it again when it is deleted; Pods, ``kubectl create token`` and
clients' tests assume it is there (docs/simulator.md, "ServiceAccount stand-in").
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import structlog

from gpustack_operator.sim.errors import ApiError
from gpustack_operator.sim.standin import StoreLoop

if TYPE_CHECKING:
    from gpustack_operator.sim.server import SimServer

log = structlog.get_logger(__name__)

DEFAULT_ACCOUNT = "default"


class ServiceAccountStandIn(StoreLoop):
    """Creates the ``default`` ServiceAccount of every active namespace of a running
    :class:`SimServer`, at start and whenever a namespace appears or loses it."""

    name = "sim-serviceaccounts"

    def __init__(self, sim: SimServer) -> None:
        super().__init__(sim)
        self._pending: set[str] = set()

    async def start(self) -> None:
        """Subscribe, note every namespace there is, and start the loop; idempotent."""
        if self._task is not None:
            return
        self._subscribe()
        for namespace in self.sim.store.list("v1", "Namespace"):
            self._pending.add(namespace["metadata"]["name"])
        self._launch()

    def idle(self) -> bool:
        """True when no namespace waits for its ServiceAccount (tests poll this)."""
        return not self._pending

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        if obj.get("apiVersion") != "v1":
            return
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "Namespace" and event_type == "ADDED":
            self._pending.add(meta.get("name", ""))
        elif (
            obj.get("kind") == "ServiceAccount"
            and event_type == "DELETED"
            and meta.get("name") == DEFAULT_ACCOUNT
        ):
            self._pending.add(meta.get("namespace", ""))
        else:
            return
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                self.ensure(self._pending.pop())
                await asyncio.sleep(0)  # let the server answer requests between namespaces

    def ensure(self, namespace: str) -> None:
        """Create ``default`` in *namespace* unless it is there or the namespace is gone or
        terminating (synchronous, so no other write interleaves)."""
        ns = self.sim.store.get("v1", "Namespace", namespace)
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return
        if self.sim.store.get("v1", "ServiceAccount", DEFAULT_ACCOUNT, namespace) is not None:
            return
        body = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DEFAULT_ACCOUNT, "namespace": namespace},
        }
        try:
            self.sim.store.create(body)
        except ApiError as exc:  # created or terminated meanwhile: the next event retries
            log.warning("sim-serviceaccounts could not create", namespace=namespace, error=str(exc))
