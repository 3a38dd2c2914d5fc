"""The ServiceAccount stand-in: every namespace has a ``default`` ServiceAccount.

On a real cluster kube-controller-manager's ServiceAccount controller creates it in each
namespace, and creates it again when it is deleted; Pods, ``kubectl create token`` and
clients' tests assume it is there (docs/simulator.md, "ServiceAccount stand-in").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.standins.standin import KeyedStandIn

if TYPE_CHECKING:
    pass

log = structlog.get_logger(__name__)

DEFAULT_ACCOUNT = "default"


class ServiceAccountStandIn(KeyedStandIn[str]):
    """Creates the ``default`` ServiceAccount of every active namespace of a running
    :class:`SimServer`, at start and whenever a namespace appears or loses it."""

    name = "sim-serviceaccounts"
    noun = "namespace"

    def initial_keys(self) -> list[str]:
        return [ns["metadata"]["name"] for ns in self.sim.store.list("v1", "Namespace")]

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        if obj.get("apiVersion") != "v1":
            return
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "Namespace" and event_type == "ADDED":
            self.mark(meta.get("name", ""))
        elif (
            obj.get("kind") == "ServiceAccount"
            and event_type == "DELETED"
            and meta.get("name") == DEFAULT_ACCOUNT
        ):
            self.mark(meta.get("namespace", ""))

    def reconcile(self, key: str) -> None:
        self.ensure(key)

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
