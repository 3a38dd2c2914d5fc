"""A stand-in for the scheduler that places a started Job's pods (a test double).

Kueue's stand-in unsuspends an admitted Job (one labelled ``kueue.x-k8s.io/queue-name``)
with its flavors' ``nodeLabels`` as ``nodeSelector``; this one then creates the Job's pods
as Kubernetes' Job controller names and labels them (``<job>-<5 random characters>``, or
``<job>-<index>-<5 random characters>`` for ``completionMode: Indexed``; ``parallelism`` of
them capped at ``completions``) and binds each to the first Node by name that matches the
selector, tolerates its ``NoSchedule``/``NoExecute`` taints and has the requested resources
left in ``status.allocatable``; a pod no Node fits stays ``Pending`` with
``PodScheduled=False`` (``Unschedulable``) and is tried again when Nodes or pods change.

In a vCluster tenant on shared nodes (*host_labels_only*) the pods are placed as the host
scheduler places them: against the labels the host owns on each Node, since vCluster copies a
pod's ``nodeSelector`` unchanged to the host, where the tenant's own labels do not exist
(docs/tenants.md, "Shared host nodes"). Like the other stand-ins it writes through the store.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_operator.domain.chain.tenancy import scheduling_labels
from gpustack_operator.domain.nodeview import labels_of, name_of, status_field
from gpustack_operator.domain.quantities import parse_quantity
from gpustack_operator.domain.selectors import labels_match
from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.store import now_rfc3339
from gpustack_sim.standins.kueue import QUEUE_NAME_LABEL
from gpustack_sim.standins.kueuetas import HOSTNAME, pinned_node, tolerates
from gpustack_sim.standins.standin import StoreLoop

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

log = structlog.get_logger(__name__)

JOB_API: Final = "batch/v1"
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
JOB_CONTROLLER: Final = "kubernetes.io/job-controller"
"""The Job controller's own ``spec.managedBy`` (the default; Kubernetes 1.32+)."""
CONTROLLER_UID_LABEL: Final = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
"""The label and annotation of an Indexed Job's pod that carry its index."""
_TAINT_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """What a pod asks for: each container's requests, its limits where a request is
    missing (Kubernetes defaults a request to the limit), summed."""
    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or ():
        resources = container.get("resources") or {}
        amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, raw in amounts.items():
            value = parse_quantity(raw)
            if value is not None:
                total[name] = total.get(name, Fraction(0)) + value
    return total


def selector_and_taints_allow(
    pod_spec: Mapping[str, Any], node: Mapping[str, Any], labels: Mapping[str, str]
) -> bool:
    """Whether a Node with *labels* carries the pod's ``nodeSelector`` and has no
    ``NoSchedule``/``NoExecute`` taint the pod does not tolerate (both stand-ins' filter)."""
    if not labels_match(pod_spec.get("nodeSelector") or {}, labels):
        return False
    tolerations = list(pod_spec.get("tolerations") or [])
    taints = (node.get("spec") or {}).get("taints") or []
    return not any(
        t.get("effect") in _TAINT_EFFECTS and not tolerates(tolerations, t) for t in taints
    )


class SchedulerStandIn(StoreLoop):
    """Creates a started Job's pods and binds them. See the module docstring."""

    name = "sim-scheduler"

    def __init__(self, sim: SimServer, *, host_labels_only: bool = False) -> None:
        super().__init__(sim)
        self.host_labels_only = host_labels_only
        self._pending = True

    def idle(self) -> bool:
        return not self._pending

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        kind, api = obj.get("kind"), obj.get("apiVersion")
        if (kind, api) in (("Job", JOB_API), ("Node", "v1")) or (
            kind == "Pod" and api == "v1" and event_type == "DELETED"
        ):
            self._pending = True
            self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._pending = False
            try:
                self._schedule()
            except ApiError as exc:  # changed meanwhile: try again
                log.warning("scheduler stand-in: write refused", error=str(exc))
                self._pending = True
                await asyncio.sleep(0.1)
                self._wake.set()
            except Exception:  # a bug must not stop the stand-in
                log.exception("scheduler stand-in failed")

    def _schedule(self) -> None:
        store = self.sim.store
        pods = store.list("v1", "Pod")
        by_name = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        for job in store.list(JOB_API, "Job"):
            spec = job.get("spec") or {}
            if spec.get("suspend") or QUEUE_NAME_LABEL not in labels_of(job):
                continue  # only Jobs Kueue's stand-in started
            if spec.get("managedBy", JOB_CONTROLLER) != JOB_CONTROLLER:
                continue  # another controller's (MultiKueue's on a manager): no Pods here
            count = min(int(spec.get("parallelism", 1)), int(spec.get("completions", 1) or 1))
            uid = job["metadata"].get("uid", "")
            mine = [
                p
                for p in by_name.values()
                if any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or [])
            ]
            indexed = spec.get("completionMode") == "Indexed"
            if indexed:
                taken = {
                    (p["metadata"].get("annotations") or {}).get(COMPLETION_INDEX) for p in mine
                }
                wanted = [i for i in range(count) if str(i) not in taken]
            else:
                wanted = list(range(len(mine), count))
            for i in wanted:
                pod = store.create(self._pod(job, i, indexed=indexed))
                by_name[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
        if all((pod.get("spec") or {}).get("nodeName") for pod in by_name.values()):
            # Nothing to place: Node events (thousands while a fleet is profiled) cost no
            # scan of every Node.
            return
        nodes = sorted(store.list("v1", "Node"), key=name_of)
        used: dict[str, dict[str, Fraction]] = {}
        for pod in by_name.values():
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                # A finished pod's containers are gone: it holds no node resources.
                for r, v in pod_requests(pod["spec"]).items():
                    used.setdefault(node, {})[r] = used.get(node, {}).get(r, Fraction(0)) + v
        for key in sorted(by_name):
            pod = by_name[key]
            if (pod.get("spec") or {}).get("nodeName"):
                continue
            node = self._place(pod, nodes, used)
            if node is not None:
                for r, v in pod_requests(pod["spec"]).items():
                    used.setdefault(node, {})[r] = used.get(node, {}).get(r, Fraction(0)) + v
            self._bind(pod, node)

    def _pod(self, job: Mapping[str, Any], index: int, *, indexed: bool) -> dict[str, Any]:
        """Pod *index* of *job*, named (``generateName``) and labelled as the Job controller
        does (kubernetes/kubernetes ``pkg/controller/job``: ``<job>-`` or, Indexed,
        ``<job>-<index>-``; ``batch.kubernetes.io/job-name`` and ``controller-uid``, with the
        legacy ``job-name`` and ``controller-uid`` beside them)."""
        template = (job.get("spec") or {}).get("template") or {}
        meta = template.get("metadata") or {}
        spec = copy.deepcopy(template.get("spec") or {})
        node = pinned_node(template, index)
        if node is not None:  # the node TAS chose for this pod (kueuetas.py)
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), HOSTNAME: node}
        uid = str(job["metadata"].get("uid", ""))
        labels = {
            **(meta.get("labels") or {}),
            CONTROLLER_UID_LABEL: uid,
            JOB_NAME_LABEL: name_of(job),
            "controller-uid": uid,
            "job-name": name_of(job),
        }
        annotations = dict(meta.get("annotations") or {})
        if indexed:
            labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{name_of(job)}-{index}-" if indexed else f"{name_of(job)}-",
                "namespace": job["metadata"]["namespace"],
                "labels": labels,
                **({"annotations": annotations} if annotations else {}),
                "ownerReferences": [
                    {
                        "apiVersion": JOB_API,
                        "kind": "Job",
                        "name": name_of(job),
                        "uid": job["metadata"].get("uid", ""),
                        "controller": True,
                    }
                ],
            },
            "spec": spec,
        }

    def _labels(self, node: Mapping[str, Any]) -> dict[str, str]:
        return scheduling_labels(node) if self.host_labels_only else labels_of(node)

    def _place(
        self,
        pod: Mapping[str, Any],
        nodes: list[dict[str, Any]],
        used: Mapping[str, Mapping[str, Fraction]],
    ) -> str | None:
        spec = pod.get("spec") or {}
        wanted = pod_requests(spec)
        for node in nodes:
            if not selector_and_taints_allow(spec, node, self._labels(node)):
                continue
            free = status_field(node, "allocatable")
            taken = used.get(name_of(node), {})
            if all(
                (parse_quantity(free.get(r)) or Fraction(0)) - taken.get(r, Fraction(0)) >= amount
                for r, amount in wanted.items()
            ):
                return name_of(node)
        return None

    def _bind(self, pod: dict[str, Any], node: str | None) -> None:
        if node is not None:
            pod["spec"]["nodeName"] = node
            pod = self.sim.store.update(pod)
            condition = {"type": "PodScheduled", "status": "True"}
            phase = "Running"
        else:
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "no node matches the pod's node selector, tolerates its taints "
                "and has the resources it requests",
            }
            phase = "Pending"
        status = pod.get("status") or {}
        if status.get("phase") == phase and any(
            c.get("type") == "PodScheduled" and c.get("status") == condition["status"]
            for c in status.get("conditions") or []
        ):
            return
        condition["lastTransitionTime"] = now_rfc3339()
        self.sim.store.update_status({**pod, "status": {"phase": phase, "conditions": [condition]}})
