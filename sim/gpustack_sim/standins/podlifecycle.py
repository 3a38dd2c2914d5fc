"""Pods that start: a scheduler and kubelet stand-in for ``sim --serve`` (docs/simulator.md,
"Pod lifecycle stand-in").

On a kind cluster a created Pod is bound to a Node by kube-scheduler and started by that
Node's kubelet, and clients wait for that (``kubectl wait --for=condition=Ready``, kr8s's
``pod.ready()``). The simulator runs no containers; this stand-in does the API side of both:

- **scheduling**: a Pod without ``spec.nodeName`` whose ``schedulerName`` is
  ``default-scheduler`` is bound to the first Node by name that is Ready, not cordoned,
  carries the Pod's ``nodeSelector`` labels and has no ``NoSchedule``/``NoExecute`` taint the
  Pod does not tolerate; capacity and affinity are not considered. With none, the Pod keeps
  ``PodScheduled=False`` (``Unschedulable``) and is tried again when a Node changes;
- **starting**: a Pending Pod bound to an existing Node becomes ``Running`` with every
  container running and ready, the conditions a kubelet reports (``PodReadyToStartContainers``,
  ``Initialized``, ``Ready``, ``ContainersReady``, ``PodScheduled``), the Node's address as
  ``hostIP`` and an address of the Node's ``podCIDR`` as ``podIP``.

Probes are not run (a Pod is Ready at once), and nothing moves a Pod to ``Succeeded`` or
``Failed``. Like the other stand-ins it writes through the store.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_operator.domain.nodeview import labels_of, name_of
from gpustack_sim.apiserver.store import Key, key_of, now_rfc3339
from gpustack_sim.standins.scheduler import selector_and_taints_allow
from gpustack_sim.standins.standin import KeyedStandIn

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

log = structlog.get_logger(__name__)

DEFAULT_SCHEDULER: Final = "default-scheduler"
_STARTED_CONDITIONS: Final = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)


class PodLifecycleStandIn(KeyedStandIn[Key]):
    """Binds unscheduled Pods and starts bound ones. See the module docstring."""

    name = "sim-pod-lifecycle"
    noun = "pod"

    def __init__(self, sim: SimServer) -> None:
        super().__init__(sim)
        self._unschedulable: set[Key] = set()
        self._addresses = 0

    def initial_keys(self) -> list[Key]:
        return [key_of(pod) for pod in self.sim.store.list("v1", "Pod") if _waits(pod)]

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        if obj.get("apiVersion") != "v1":
            return
        if obj.get("kind") == "Node" and event_type != "DELETED":
            for key in self._unschedulable:  # a Node came or changed: try them again
                self.mark(key)
            self._unschedulable.clear()
        elif obj.get("kind") == "Pod":
            if event_type == "DELETED":
                self._unschedulable.discard(key_of(obj))
            elif _waits(obj):
                self.mark(key_of(obj))

    def reconcile(self, key: Key) -> None:
        """Bind the Pod at *key* if it is unscheduled, then start it if its Node exists."""
        pod = self.sim.store.get("v1", "Pod", key[1], key[0])
        if pod is None or not _waits(pod):
            return
        spec = pod.get("spec") or {}
        node_name = spec.get("nodeName")
        if not node_name:
            if (spec.get("schedulerName") or DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER:
                return  # another scheduler's Pod
            nodes = sorted(self.sim.store.list("v1", "Node"), key=name_of)
            node_name = next((name_of(n) for n in nodes if fits(spec, n)), None)
            if node_name is None:
                self._unschedulable.add(key)
                self._mark_unschedulable(pod, len(nodes))
                return
            pod = self.sim.store.update({**pod, "spec": {**spec, "nodeName": node_name}})
        node = self.sim.store.get("v1", "Node", node_name)
        if node is not None:
            self.sim.store.update_status({**pod, "status": self._running(pod, node)})

    def _mark_unschedulable(self, pod: Mapping[str, Any], nodes: int) -> None:
        status = dict(pod.get("status") or {})
        if any(c.get("type") == "PodScheduled" for c in status.get("conditions") or []):
            return
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": f"0/{nodes} nodes are available: no Node is Ready, schedulable, "
                "carries the pod's nodeSelector and has only taints the pod tolerates.",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
            }
        ]
        self.sim.store.update_status({**pod, "status": status})

    def _running(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
        now = now_rfc3339()
        spec = pod.get("spec") or {}
        status = dict(pod.get("status") or {})
        condition = {"status": "True", "lastProbeTime": None, "lastTransitionTime": now}
        host_ip = _node_address(node)
        status.update(
            phase="Running",
            startTime=now,
            conditions=[{**condition, "type": kind} for kind in _STARTED_CONDITIONS],
            hostIP=host_ip,
            hostIPs=[{"ip": host_ip}],
            podIP=self._pod_ip(node),
            containerStatuses=[
                {
                    "name": c.get("name", ""),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "containerID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
                for c in spec.get("containers") or []
            ],
        )
        status["podIPs"] = [{"ip": status["podIP"]}]
        return status

    def _pod_ip(self, node: Mapping[str, Any]) -> str:
        """The next address of the Node's ``podCIDR`` (``10.244.0.0/24`` without one)."""
        cidr = (node.get("spec") or {}).get("podCIDR") or "10.244.0.0/24"
        network = ipaddress.ip_network(cidr, strict=False)
        self._addresses += 1
        offset = 2 + self._addresses % max(network.num_addresses - 3, 1)
        return str(network.network_address + offset)


def _waits(pod: Mapping[str, Any]) -> bool:
    """Whether a Pod is Pending and not being deleted (what the stand-in acts on)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return bool((pod.get("status") or {}).get("phase", "Pending") == "Pending")


def fits(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether the scheduler stand-in may bind a Pod with *pod_spec* to *node*."""
    node_spec = node.get("spec") or {}
    if node_spec.get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return False
    return selector_and_taints_allow(pod_spec, node, labels_of(node))


def _node_address(node: Mapping[str, Any]) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return "172.18.0.2"
