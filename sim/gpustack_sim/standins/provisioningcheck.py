"""A stand-in for Kueue's ProvisioningRequest admission check controller (a test double).

docs/simulator.md, "The provisioning stand-in": Kueue sets its provisioning controller up only
when ``autoscaling.x-k8s.io/v1`` ProvisioningRequests are served at its start, and that
controller marks each AdmissionCheck of ``controllerName: kueue.x-k8s.io/provisioning-request``
``Active``. This stand-in does the same: started while the kind is served, it marks such
checks ``Active=True``; started without it, it marks none (the CRD installed after Kueue's
start). It writes no ProvisioningRequest: the Kueue stand-in admits against quota alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_operator.domain.chain.poolchain import PROVISIONING_CONTROLLER
from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.store import now_rfc3339
from gpustack_sim.standins.standin import StoreLoop

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

log = structlog.get_logger(__name__)

PROVISIONING_REQUESTS: Final = ("autoscaling.x-k8s.io/v1", "ProvisioningRequest")


class ProvisioningCheckStandIn(StoreLoop):
    """Marks provisioning AdmissionChecks Active when ProvisioningRequests were served at
    its start. See the module docstring."""

    name = "sim-provisioning-check"

    def __init__(self, sim: SimServer) -> None:
        super().__init__(sim)
        self.serving = False
        """ProvisioningRequests were served when it started (its controller is set up)."""
        self._pending = True

    def _before_start(self) -> None:
        self.serving = self.sim.store.registry.by_kind(*PROVISIONING_REQUESTS) is not None

    def idle(self) -> bool:
        return not self._pending

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        if obj.get("kind") == "AdmissionCheck" and event_type != "DELETED":
            self._pending = True
            self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._pending = False
            if not self.serving:
                continue
            try:
                self._activate()
            except ApiError as exc:  # changed meanwhile: the next event brings it back
                log.warning("provisioning check stand-in: write refused", error=str(exc))
            except Exception:  # a bug must not stop the stand-in
                log.exception("provisioning check stand-in failed")

    def _activate(self) -> None:
        store = self.sim.store
        for info in store.registry:
            if info.kind != "AdmissionCheck" or not info.storage:
                continue
            for check in store.list(info.api_version, info.kind):
                if (check.get("spec") or {}).get("controllerName") != PROVISIONING_CONTROLLER:
                    continue
                conditions = (check.get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions):
                    continue
                active = {
                    "type": "Active",
                    "status": "True",
                    "reason": "Active",
                    "message": "The admission check is active",
                    "lastTransitionTime": now_rfc3339(),
                }
                others = [c for c in conditions if c.get("type") != "Active"]
                store.update_status({**check, "status": {"conditions": [*others, active]}})
