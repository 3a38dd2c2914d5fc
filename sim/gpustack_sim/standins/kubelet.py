"""A kubelet stand-in: simulated cards appear in ``status.allocatable`` (docs/simulator.md).

On a real node the vendor's device plugin advertises ``nvidia.com/gpu: 2`` through the
kubelet; the ClusterQueue's credits are summed from it (docs/workloads.md). Here, for every Node
with a ``sim.gpustack.ai/devices`` annotation, ``status.allocatable[<resource name>]`` is set to the
card count of each manufacturer, unless the Node already carried that resource when it was
first seen (a manifest's own value wins and is never touched). Values it set follow later
edits of the annotation and are removed when a manufacturer's cards are gone.

It also reports a registered Node as a kubelet does: a Node without ``status.conditions``
gets ``Ready=True`` (reason ``KubeletReady``) and ``MemoryPressure``/``DiskPressure``/
``PIDPressure=False``, and each of cpu, memory, ephemeral-storage and pods found in
``status.capacity`` but missing from ``status.allocatable`` gets the capacity's value (no
reservations configured). Both only fill what is absent: conditions a test or a person wrote
(``Ready=False``, ``Unknown``) and allocatable values of a manifest are never changed, so node
lifecycle stays theirs to drive (docs/simulator.md, item 3 of the ``sim --cluster`` run).

It writes through the store, like the NFD-master stand-in: it is part of the cluster, not a
client, so injected faults and request counters leave it alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.simdevices import (
    SIM_DEVICES_ANNOTATION,
    parse_sim_devices,
    sim_card_counts,
)
from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.apiserver.store import now_rfc3339
from gpustack_sim.standins.standin import NodeStandIn

log = structlog.get_logger(__name__)

HOST_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")
_PRESSURES = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


def kubelet_defaults(status: dict[str, Any], now: str) -> bool:
    """Fill what a kubelet reports of a registered, healthy Node where *status* lacks it:
    the conditions (Ready and no pressure) and the host resources' allocatable (= capacity).
    Returns whether anything was added; nothing present is changed."""
    changed = False
    if not status.get("conditions"):
        conditions = [
            _condition(kind, "False", reason, message, now) for kind, reason, message in _PRESSURES
        ]
        conditions.append(
            _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", now)
        )
        status["conditions"] = conditions
        changed = True
    capacity = status.get("capacity") or {}
    allocatable = status.setdefault("allocatable", {})
    for resource in HOST_RESOURCES:
        if resource in capacity and resource not in allocatable:
            allocatable[resource] = capacity[resource]
            changed = True
    return changed


def _condition(kind: str, state: str, reason: str, message: str, now: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": state,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def card_resources(
    annotation: str | None, manufacturers: Mapping[str, Manufacturer], *, with_memory: bool
) -> dict[str, str]:
    """``{resource name: card count}`` for a devices annotation; ``{}`` when absent.

    Raises ``ValueError`` for an invalid annotation.
    """
    if annotation is None:
        return {}
    groups = parse_sim_devices(annotation, manufacturers, with_memory=with_memory)
    return {
        manufacturers[mfr].resource_name: str(count)
        for mfr, count in sim_card_counts(groups).items()
    }


class SimKubelet(NodeStandIn):
    """Keeps simulated cards in Nodes' ``status.allocatable`` while it runs."""

    name = "sim-kubelet"

    def __init__(
        self,
        sim: SimServer,
        manufacturers: Mapping[str, Manufacturer],
        *,
        with_memory: bool = False,
    ) -> None:
        super().__init__(sim)
        self.manufacturers = manufacturers
        self.with_memory = with_memory
        self._owned: dict[str, set[str]] = {}
        """node -> the allocatable resources this stand-in set (and so may change)."""

    def initial_nodes(self) -> list[str]:
        """Every Node the store holds."""
        return [node["metadata"]["name"] for node in self.sim.store.list("v1", "Node")]

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        """Marks a changed Node; a deleted one is forgotten."""
        if obj.get("kind") != "Node" or obj.get("apiVersion") != "v1":
            return
        name = (obj.get("metadata") or {}).get("name")
        if not isinstance(name, str):
            return
        if event_type == "DELETED":
            self._owned.pop(name, None)
            self.forget(name)
            return
        self.mark(name)

    def reconcile(self, name: str) -> None:
        """Bring one Node's allocatable in line with its annotation (synchronous: no races)."""
        node = self.sim.store.get("v1", "Node", name)
        if node is None:
            return
        annotation = ((node.get("metadata") or {}).get("annotations") or {}).get(
            SIM_DEVICES_ANNOTATION
        )
        try:
            wanted = card_resources(annotation, self.manufacturers, with_memory=self.with_memory)
        except ValueError as exc:
            log.warning(
                "sim kubelet: invalid devices annotation; no cards", node=name, error=str(exc)
            )
            wanted = {}
        status = node.setdefault("status", {})
        changed = kubelet_defaults(status, now_rfc3339())
        allocatable = status.setdefault("allocatable", {})
        owned = self._owned.setdefault(name, set())
        for resource, count in wanted.items():
            if resource in allocatable and resource not in owned:
                continue  # the manifest (or a person) set it: never touched
            owned.add(resource)
            if allocatable.get(resource) != count:
                allocatable[resource] = count
                changed = True
        for resource in sorted(owned - set(wanted)):
            owned.discard(resource)
            if allocatable.pop(resource, None) is not None:
                changed = True
        if not changed:
            return
        try:
            self.sim.store.update_status(node)
        except ApiError as exc:  # deleted or changed meanwhile: the next event retries
            log.debug("sim kubelet: status update skipped", node=name, error=str(exc))
