"""A stand-in for a kubelet running a Job's containers to completion and for the Job
controller counting them (a test double; docs/simulator.md, "Job runner stand-in").

The simulator runs no containers. Once a Pod of a Job (label ``batch.kubernetes.io/job-name``)
is ``Running``, its containers "run" for *run_seconds* and then exit 0: the Pod becomes
``Succeeded`` with each container ``terminated`` (reason ``Completed``), as a kubelet reports
it. The Job's status follows as the Job controller writes it (``startTime``, ``active``,
``ready``, ``succeeded``) and, once ``succeeded`` reaches ``spec.completions`` (default 1),
the conditions ``SuccessCriteriaMet`` and ``Complete`` and ``completionTime``
(<https://kubernetes.io/docs/concepts/workloads/controllers/job/#job-termination-and-cleanup>;
``SuccessCriteriaMet`` precedes ``Complete`` from Kubernetes 1.31). Kueue's stand-in then
finishes the Job's Workload and its quota is free again. Failures, retries, indexed
completions and ``activeDeadlineSeconds`` are not simulated.

A Pod annotated ``sim.gpustack.ai/run-seconds`` runs that long instead (a test that needs a
Job to keep running, or to end soon, says so on the pod template).

``sim --serve`` runs it (``--job-run-time``); ``sim --cluster`` without ``--serve`` does not,
so the demo's Jobs stay admitted while their outcome is printed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from gpustack_operator.domain.nodeview import labels_of, name_of
from gpustack_sim.apiserver.store import now_rfc3339
from gpustack_sim.standins.scheduler import JOB_API, JOB_CONTROLLER, JOB_NAME_LABEL
from gpustack_sim.standins.standin import KeyedStandIn

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

DEFAULT_RUN_SECONDS: Final = 10.0
RUN_SECONDS_ANNOTATION: Final = "sim.gpustack.ai/run-seconds"
"""A Pod's own run time in seconds, over the stand-in's default."""
_TERMINAL: Final = ("Succeeded", "Failed")

JobKey = tuple[str, str]


def run_seconds_of(pod: Mapping[str, Any], default: float) -> float:
    """How long *pod*'s containers run: its annotation when it is a number >= 0, else
    *default*."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(RUN_SECONDS_ANNOTATION)
    try:
        seconds = float(value) if value is not None else default
    except ValueError:
        return default
    return seconds if seconds >= 0 else default


def _finished(job: Mapping[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions
    )


def succeeded_status(pod: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The status a kubelet reports for *pod* once every container exited 0."""
    status = dict(pod.get("status") or {})
    started = str(status.get("startTime") or now)
    status["phase"] = "Succeeded"
    status["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
        {"type": "Initialized", "status": "True", "lastTransitionTime": started},
        {
            "type": "Ready",
            "status": "False",
            "reason": "PodCompleted",
            "lastTransitionTime": now,
        },
        {
            "type": "ContainersReady",
            "status": "False",
            "reason": "PodCompleted",
            "lastTransitionTime": now,
        },
    ]
    status["containerStatuses"] = [
        {
            "name": str(container.get("name") or ""),
            "image": str(container.get("image") or ""),
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": started,
                    "finishedAt": now,
                }
            },
        }
        for container in (pod.get("spec") or {}).get("containers") or []
    ]
    return status


def job_status(
    job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], now: str
) -> dict[str, Any]:
    """The Job controller's view of *job* given its *pods*."""
    status = dict(job.get("status") or {})
    phases = [str((p.get("status") or {}).get("phase") or "Pending") for p in pods]
    if phases and not status.get("startTime"):
        status["startTime"] = now
    status["active"] = sum(1 for phase in phases if phase not in _TERMINAL)
    status["ready"] = sum(1 for phase in phases if phase == "Running")
    status["succeeded"] = sum(1 for phase in phases if phase == "Succeeded")
    completions = int((job.get("spec") or {}).get("completions") or 1)
    if status["succeeded"] >= completions and not _finished({"status": status}):
        done = {"status": "True", "lastProbeTime": now, "lastTransitionTime": now}
        status["conditions"] = [
            *(status.get("conditions") or []),
            {"type": "SuccessCriteriaMet", "reason": "CompletionsReached", **done},
            {"type": "Complete", "reason": "CompletionsReached", **done},
        ]
        status["completionTime"] = now
    return {k: v for k, v in status.items() if v not in (0, None) or k == "succeeded"}


class JobRunnerStandIn(KeyedStandIn[JobKey]):
    """Runs started Jobs' Pods to completion and keeps the Jobs' status. See the module."""

    name = "sim-job-runner"
    noun = "job"

    def __init__(self, sim: SimServer, run_seconds: float = DEFAULT_RUN_SECONDS) -> None:
        super().__init__(sim)
        self.run_seconds = run_seconds
        self._running_since: dict[str, float] = {}
        """Pod uid -> when this stand-in first saw it Running (monotonic clock)."""

    def initial_keys(self) -> Iterable[JobKey]:
        return [
            (j["metadata"]["namespace"], name_of(j)) for j in self.sim.store.list(JOB_API, "Job")
        ]

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        kind, api = obj.get("kind"), obj.get("apiVersion")
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        if (kind, api) == ("Job", JOB_API):
            if event_type == "DELETED":
                self.forget((namespace, name_of(obj)))
            else:
                self.mark((namespace, name_of(obj)))
        elif (kind, api) == ("Pod", "v1"):
            job = labels_of(obj).get(JOB_NAME_LABEL)
            if job:
                self.mark((namespace, job))

    def reconcile(self, key: JobKey) -> None:
        namespace, name = key
        store = self.sim.store
        job = store.get(JOB_API, "Job", name, namespace)
        if job is None or (job.get("spec") or {}).get("suspend") or _finished(job):
            return
        if (job.get("spec") or {}).get("managedBy", JOB_CONTROLLER) != JOB_CONTROLLER:
            return  # its status is another controller's (MultiKueue copies a member's)
        pods = [
            p
            for p in store.list("v1", "Pod", namespace)
            if labels_of(p).get(JOB_NAME_LABEL) == name
        ]
        now = time.monotonic()
        for i, pod in enumerate(pods):
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            uid = str(pod["metadata"].get("uid") or name_of(pod))
            started = self._running_since.setdefault(uid, now)
            left = started + run_seconds_of(pod, self.run_seconds) - now
            if left > 0:
                asyncio.get_running_loop().call_later(left, self.mark, key)
                continue
            self._running_since.pop(uid, None)
            pods[i] = store.update_status({**pod, "status": succeeded_status(pod, now_rfc3339())})
        status = job_status(job, pods, now_rfc3339())
        if status != (job.get("status") or {}):
            store.update_status({**job, "status": status})
