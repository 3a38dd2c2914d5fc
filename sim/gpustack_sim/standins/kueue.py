"""A stand-in for Kueue's controllers inside the simulated cluster (a test double, not Kueue).

It does what a workload needs from Kueue to go through the operator's chain, and no more:

* a ``batch/v1`` Job labelled ``kueue.x-k8s.io/queue-name`` gets a ``Workload`` owned by it
  (one pod set ``main``: the pod template, ``parallelism`` pods capped at ``completions``);
  an unsuspended Job is suspended until admitted, as Kueue's job reconciler does;
* pending Workloads are admitted in creation order by the rules of
  :mod:`gpustack_sim.standins.kueueadmission` (LocalQueue -> ClusterQueue, ``stopPolicy``,
  ``namespaceSelector``, resource transformations, flavors, quota, cohort borrowing);
* an admitted Workload gets ``status.admission`` and the QuotaReserved/Admitted conditions,
  and its Job is unsuspended with the flavors' ``nodeLabels`` as ``nodeSelector`` and their
  ``tolerations``; one that does not fit keeps ``QuotaReserved=False`` with Kueue's message;
* a finished Job's Workload gets ``Finished`` and stops counting; a deleted Job's Workload is
  deleted; ClusterQueue and LocalQueue ``status`` carry usage and workload counts (zero
  included, as Kueue writes them: ``kubectl get clusterqueues`` shows ``PENDING WORKLOADS``).

Preemption only to reclaim quota within a cohort (``reclaimWithinCohort``, with a Cohort's own
quota: :mod:`gpustack_sim.standins.kueuecohort`); no admission checks, no fair sharing, no
topology. docs/simulator.md, "Kueue admission stand-in", lists each rule with the Kueue
behaviour it follows. Like the NFD-master
stand-in it is part of the cluster: it writes through ``sim.store`` from one asyncio task.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_operator.domain.chain.kueueusage import STOPPED
from gpustack_operator.domain.quantities import parse_quantity
from gpustack_operator.domain.selectors import selector_matches
from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.store import now_rfc3339
from gpustack_sim.standins.crds import workload_crd
from gpustack_sim.standins.events import NORMAL, WARNING, EventRecorder
from gpustack_sim.standins.kueueadmission import (
    ClusterQueueView,
    FlavorCheck,
    PodSet,
    Transformation,
    assign,
    format_amount,
    podset_requests,
    transformations_from_config,
)
from gpustack_sim.standins.kueuecohort import (
    Admitted,
    borrows,
    cohort_quotas,
    eviction_conditions,
    preemption_message,
    reclaim_policy,
    reclaim_targets,
)
from gpustack_sim.standins.kueuetas import (
    Placement,
    TasPass,
    flavor_check,
    pin,
    topology_assignment,
)
from gpustack_sim.standins.standin import StoreLoop

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

__all__ = [
    "MULTIKUEUE_CONTROLLER",
    "PREBUILT_WORKLOAD_ANNOTATION",
    "QUEUE_NAME_LABEL",
    "KueueStandIn",
    "workload_name",
]

log = structlog.get_logger(__name__)

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
CLUSTER_QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/cluster-queue-name"
PREBUILT_WORKLOAD_ANNOTATION = "kueue.x-k8s.io/prebuilt-workload-name"
"""On a Job that runs a Workload made elsewhere (MultiKueue's copy in a member): an
annotation in Kueue v0.19.2 (``WorkloadIdentifierAnnotations``), read as a label too
(``jobframework.PrebuiltWorkloadNameFor``)."""
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
"""An AdmissionCheck's ``controllerName`` for MultiKueue, and the ``spec.managedBy`` Kueue
gives a Job dispatched by it (``apis/kueue/v1beta2/constants.go``)."""
KUEUE_GROUP = "kueue.x-k8s.io"
JOB_API = "batch/v1"
_WATCHED = frozenset(
    {"ClusterQueue", "LocalQueue", "ResourceFlavor", "Cohort", "Topology", "AdmissionCheck"}
)
SCHEDULER_COMPONENT: Final = "kueue-admission"
"""The reporting component of Kueue's scheduler Events (``constants.AdmissionName``)."""
JOB_COMPONENT: Final = "batch/job-kueue-controller"
"""The reporting component of Kueue's Job integration (``jobframework/setup.go``)."""


DEFERRED: Final[dict[str, Any]] = {}
"""What :meth:`KueueStandIn._admit_one` returns for a Workload tried again after the others."""


def _admitted(wl: Mapping[str, Any], admission: Mapping[str, Any]) -> Admitted:
    """An admitted Workload as preemption sees it (sim/kueuecohort.py)."""
    used: dict[tuple[str, str], Fraction] = {}
    for assignment in admission.get("podSetAssignments") or []:
        for resource, flavor in (assignment.get("flavors") or {}).items():
            amount = parse_quantity((assignment.get("resourceUsage") or {}).get(resource, 0))
            key = (flavor, resource)
            used[key] = used.get(key, Fraction(0)) + (amount or Fraction(0))
    reserved = _condition(wl, "QuotaReserved") or {}
    return Admitted(
        key=(wl["metadata"]["namespace"], wl["metadata"]["name"]),
        cluster_queue=str(admission.get("clusterQueue", "")),
        priority=int((wl.get("spec") or {}).get("priority") or 0),
        admitted_at=str(reserved.get("lastTransitionTime") or ""),
        usage=used,
    )


def workload_name(job_name: str, job_uid: str) -> str:
    """``job-<name>-<5 hex>``, the shape of Kueue's names for a Job's Workload."""
    digest = hashlib.sha1(f"{job_name}/{job_uid}/batch/v1, Kind=Job".encode()).hexdigest()
    return f"job-{job_name}"[:247] + "-" + digest[:5]


def _condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _set_condition(
    status: dict[str, Any], kind: str, value: str, reason: str, message: str
) -> None:
    """Set one condition, keeping ``lastTransitionTime`` when the status does not change."""
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != kind]
    old = next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)
    since = old["lastTransitionTime"] if old and old.get("status") == value else now_rfc3339()
    conditions.append(
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
        }
    )
    status["conditions"] = conditions


def _set_active(status: dict[str, Any], cluster_queue: Mapping[str, Any]) -> None:
    """The ``Active`` condition Kueue writes with each ClusterQueue status, stamped with the
    generation it was computed for (kubernetes-sigs/kueue v0.19.2,
    pkg/controller/core/clusterqueue_controller.go ``updateCqStatusIfChanged``; the reasons
    and messages of pkg/cache/scheduler/clusterqueue.go ``inactiveReason``)."""
    meta = cluster_queue.get("metadata") or {}
    stop = (cluster_queue.get("spec") or {}).get("stopPolicy")
    if meta.get("deletionTimestamp"):
        value, reason = "False", "Terminating"
        message = "Can't admit new workloads; clusterQueue is terminating"
    elif stop in STOPPED:
        value, reason, message = "False", "Stopped", "Can't admit new workloads: is stopped."
    else:
        value, reason, message = "True", "Ready", "Can admit new workloads"
    _set_condition(status, "Active", value, reason, message)
    status["conditions"][-1]["observedGeneration"] = int(meta.get("generation") or 1)


def check_names(cluster_queue: Mapping[str, Any]) -> list[str]:
    """The AdmissionChecks a ClusterQueue names (v1beta2 ``admissionChecksStrategy``, v1beta1
    ``admissionChecks``)."""
    spec = cluster_queue.get("spec") or {}
    strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    names = [str(c.get("name")) for c in strategy if c.get("name")]
    return names + [str(n) for n in spec.get("admissionChecks") or [] if n]


def _admitted_true(wl: Mapping[str, Any]) -> bool:
    return (_condition(wl, "Admitted") or {}).get("status") == "True"


def _priority(wl: Mapping[str, Any]) -> int:
    return int((wl.get("spec") or {}).get("priority") or 0)


def _seconds_since(stamp: Any) -> float:
    """Seconds since an RFC 3339 time (0 when it is missing or unreadable)."""
    try:
        then = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (datetime.now(UTC) - then).total_seconds())


def _job_finished(job: Mapping[str, Any]) -> str | None:
    """``Succeeded`` / ``Failed`` for a finished Job, else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return "Succeeded" if cond["type"] == "Complete" else "Failed"
    return None


def _pod_count(job: Mapping[str, Any]) -> int:
    spec = job.get("spec") or {}
    count = int(spec.get("parallelism", 1))
    if spec.get("completions") is not None:
        count = min(count, int(spec["completions"]))
    return count


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector against *labels*; a missing selector matches nothing (Kueue's rule)."""
    return selector is not None and selector_matches(selector, labels)


class KueueStandIn(StoreLoop):
    """Runs Kueue's admission for Jobs in a :class:`SimServer`. See the module docstring.

    *config* is a Kueue ``Configuration`` object (only ``resources.transformations`` is
    read); ``None`` is Kueue's default, with no transformations.
    """

    name = "sim-kueue"

    def __init__(self, sim: SimServer, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(sim)
        self.transformations: dict[str, Transformation] = transformations_from_config(config)
        self._jobs: set[tuple[str, str]] = set()
        self._schedule = False
        self._generations: dict[tuple[str, str, str], Any] = {}
        self._cohorts: dict[str, dict[tuple[str, str], Fraction]] = {}
        self._reclaim: dict[str, str] = {}
        self._admitted: list[Admitted] = []
        self._tas = TasPass([], {}, {})
        """TAS state of the admission pass under way (``gpustack_sim/standins/kueuetas.py``)."""
        self._tas_held = False
        """A workload waits for TAS capacity: Node and Pod changes start a new pass."""
        self._views: dict[str, ClusterQueueView] = {}
        self._events = EventRecorder(sim.store, SCHEDULER_COMPONENT)
        self._job_events = EventRecorder(sim.store, JOB_COMPONENT)

    def configure(self, config: Mapping[str, Any] | None) -> None:
        """Use another Kueue Configuration from now on and re-evaluate pending Workloads."""
        self.transformations = transformations_from_config(config)
        self._schedule = True
        self._wake.set()

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve the Workload kind if nothing does, subscribe, and start the loop."""
        if self._task is not None:
            return
        if self._api("Workload") is None:
            self.sim.load_crds([workload_crd()])
        self._subscribe()
        for job in self.sim.store.list(JOB_API, "Job"):
            self._jobs.add((job["metadata"]["namespace"], job["metadata"]["name"]))
        self._schedule = True
        self._launch()

    def idle(self) -> bool:
        """True when nothing waits to be synced or scheduled (tests poll this)."""
        return not self._jobs and not self._schedule

    # --- events (inside store writes: only mark work) -------------------------------------

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        kind, api = obj.get("kind"), str(obj.get("apiVersion", ""))
        meta = obj.get("metadata") or {}
        if kind == "Job" and api == JOB_API:
            self._jobs.add((meta.get("namespace", ""), meta.get("name", "")))
        elif kind == "Workload" and api.startswith(KUEUE_GROUP + "/"):
            status = obj.get("status") or {}
            waiting = status.get("admission") is not None and status.get("admissionChecks")
            admitted = (_condition(obj, "Admitted") or {}).get("status") == "True"
            if event_type != "MODIFIED" or (waiting and not admitted):
                self._schedule = True  # new, gone, or its checks moved (MultiKueue's)
        elif kind in _WATCHED and api.startswith(KUEUE_GROUP + "/"):
            key = (kind, meta.get("namespace", ""), meta.get("name", ""))
            generation = (meta.get("generation"), meta.get("labels"))
            if event_type == "MODIFIED" and self._generations.get(key) == generation:
                return  # a status write: quotas did not change
            self._generations[key] = generation
            self._schedule = True
        elif api == "v1" and (kind == "Namespace" or (kind in ("Node", "Pod") and self._tas_held)):
            self._schedule = True  # a Node or Pod change may make room for a held TAS pod set
        else:
            return
        self._wake.set()

    # --- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            ok = True
            while self._jobs:
                namespace, name = self._jobs.pop()
                ok = self._guarded(self._sync_job, namespace, name) and ok
                await asyncio.sleep(0)
            if self._schedule:
                self._schedule = False
                ok = self._guarded(self._admit_pending) and ok
            if not ok:
                await asyncio.sleep(0.1)  # a refused write is retried, but not in a busy loop

    def _guarded(self, step: Any, *args: Any) -> bool:
        """Run one step; False when it failed (a pass is then retried)."""
        try:
            step(*args)
        except ApiError as exc:  # changed meanwhile, or refused: try the pass again
            log.warning("kueue stand-in: write refused", error=str(exc))
            self._schedule = True
            self._wake.set()
            return False
        except Exception:  # a bug must not stop admission for every other Job
            log.exception("kueue stand-in failed")
            return False
        return True

    def _api(self, kind: str) -> str | None:
        for version in ("v1beta2", "v1beta1"):
            api = f"{KUEUE_GROUP}/{version}"
            if self.sim.registry.by_kind(api, kind) is not None:
                return api
        return None

    def _list(self, kind: str) -> list[dict[str, Any]]:
        api = self._api(kind)
        return self.sim.store.list(api, kind) if api is not None else []

    # --- Jobs -> Workloads ----------------------------------------------------------------

    def _sync_job(self, namespace: str, name: str) -> None:
        store, wl_api = self.sim.store, self._api("Workload")
        assert wl_api is not None
        job = store.get(JOB_API, "Job", name, namespace)
        if job is None:
            for owned in store.list(wl_api, "Workload", namespace=namespace):
                owners = owned["metadata"].get("ownerReferences") or []
                if any(o.get("kind") == "Job" and o.get("name") == name for o in owners):
                    store.delete(wl_api, "Workload", owned["metadata"]["name"], namespace)
            return
        labels = job["metadata"].get("labels") or {}
        queue = labels.get(QUEUE_NAME_LABEL)
        if not queue:
            return  # Kueue leaves Jobs without a queue name alone (manageJobsWithoutQueueName)
        prebuilt = (job["metadata"].get("annotations") or {}).get(
            PREBUILT_WORKLOAD_ANNOTATION
        ) or labels.get(PREBUILT_WORKLOAD_ANNOTATION)
        wl_name = prebuilt or workload_name(name, job["metadata"]["uid"])
        wl = store.get(wl_api, "Workload", wl_name, namespace)
        finished = _job_finished(job)
        if prebuilt:
            # A Workload made elsewhere (MultiKueue's copy): adopted, never created
            # (pkg/controller/jobframework/reconciler.go, prebuilt workloads).
            if wl is None:
                return
            wl = self._adopt(wl, job)
        if wl is None:
            if finished:
                return
            wl = store.create(self._new_workload(job, wl_name, queue, wl_api))
            self._job_events.record(
                job, NORMAL, "CreatedWorkload", f"Created Workload: {namespace}/{wl_name}"
            )
            self._schedule = True
        if finished:
            cond = _condition(wl, "Finished")
            if cond is None or cond.get("status") != "True":
                status = copy.deepcopy(wl.get("status") or {})
                _set_condition(status, "Finished", "True", finished, f"Job {finished.lower()}")
                store.update_status({**wl, "status": status})
                self._job_events.record(
                    job,
                    NORMAL,
                    "FinishedWorkload",
                    f"Workload '{namespace}/{wl_name}' is declared finished",
                )
                self._schedule = True
            return
        admitted = (wl.get("status") or {}).get("admission") is not None
        spec = job.get("spec") or {}
        dispatched = not admitted and not spec.get("managedBy") and self._dispatched(job, queue)
        if dispatched or (not admitted and not spec.get("suspend")):
            # Kueue's webhook suspends a Job as it is created (no Event), and gives one whose
            # queue has a MultiKueue check to MultiKueue (spec.managedBy; jobframework
            # defaults.go, ApplyDefaultForManagedBy); its reconciler stops one unsuspended
            # later, with the Event "Stopped" (jobframework/reconciler.go).
            as_created = int(job["metadata"].get("generation") or 1) <= 1
            stopping = not spec.get("suspend")
            job = copy.deepcopy(job)
            job["spec"]["suspend"] = True
            if dispatched:
                job["spec"]["managedBy"] = MULTIKUEUE_CONTROLLER
            job = store.update(job, field_manager="kueue")
            if stopping and not as_created:
                self._job_events.record(job, NORMAL, "Stopped", "Not admitted by cluster queue")
        elif prebuilt and spec.get("suspend") and _admitted_true(wl):
            # The copy's Workload was admitted before its Job arrived: start the Job now.
            assigned = {
                str(p.get("name", "main")): dict(p.get("flavors") or {})
                for p in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments")
                or []
            }
            flavors = {f["metadata"]["name"]: f for f in self._list("ResourceFlavor")}
            self._start_job(wl, assigned, flavors)

    def _adopt(self, wl: dict[str, Any], job: Mapping[str, Any]) -> dict[str, Any]:
        """Make *job* the controller owner of its prebuilt Workload, as Kueue adopts one."""
        owners = wl["metadata"].get("ownerReferences") or []
        if any(o.get("uid") == job["metadata"]["uid"] for o in owners):
            return wl
        adopted = copy.deepcopy(wl)
        adopted["metadata"]["ownerReferences"] = [
            *owners,
            {
                "apiVersion": JOB_API,
                "kind": "Job",
                "name": job["metadata"]["name"],
                "uid": job["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            },
        ]
        return self.sim.store.update(adopted, field_manager="kueue")

    def _dispatched(self, job: Mapping[str, Any], queue: str) -> bool:
        """Whether *job*'s LocalQueue leads to a ClusterQueue with a MultiKueue check."""
        local = self.sim.store.get(
            str(self._api("LocalQueue")), "LocalQueue", queue, job["metadata"]["namespace"]
        )
        cq_name = ((local or {}).get("spec") or {}).get("clusterQueue")
        cq = self.sim.store.get(str(self._api("ClusterQueue")), "ClusterQueue", str(cq_name))
        return cq is not None and bool(self._multikueue_checks(cq))

    def _multikueue_checks(self, cluster_queue: Mapping[str, Any]) -> list[str]:
        """The checks of *cluster_queue* that MultiKueue decides (others: not waited for)."""
        api = self._api("AdmissionCheck")
        if api is None:
            return []
        found = []
        for name in check_names(cluster_queue):
            check = self.sim.store.get(api, "AdmissionCheck", name)
            if ((check or {}).get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER:
                found.append(name)
        return found

    @staticmethod
    def _new_workload(
        job: Mapping[str, Any], name: str, queue: str, api_version: str
    ) -> dict[str, Any]:
        meta = job["metadata"]
        return {
            "apiVersion": api_version,
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": JOB_API,
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "queueName": queue,
                "active": True,
                "podSets": [
                    {
                        "name": "main",
                        "count": _pod_count(job),
                        "template": copy.deepcopy((job.get("spec") or {}).get("template") or {}),
                    }
                ],
            },
        }

    # --- admission ------------------------------------------------------------------------

    def _admit_pending(self) -> None:
        store = self.sim.store
        queues = {q["metadata"]["name"]: q for q in self._list("ClusterQueue")}
        views = {name: ClusterQueueView.from_object(q) for name, q in queues.items()}
        self._views = views
        local = {
            (q["metadata"]["namespace"], q["metadata"]["name"]): q for q in self._list("LocalQueue")
        }
        flavors = {f["metadata"]["name"]: f for f in self._list("ResourceFlavor")}
        namespaces = {
            n["metadata"]["name"]: n["metadata"].get("labels") or {}
            for n in store.list("v1", "Namespace")
        }
        usage: dict[str, dict[tuple[str, str], Fraction]] = {}  # ClusterQueue -> usage
        local_usage: dict[str, dict[tuple[str, str], Fraction]] = {}  # "ns/queue" -> usage
        counts: dict[tuple[str, str], dict[str, int]] = {}  # (kind, key) -> counters
        pending: list[dict[str, Any]] = []
        self._cohorts = cohort_quotas(self._list("Cohort"))  # sim/kueuecohort.py
        self._reclaim = {name: reclaim_policy(q) for name, q in queues.items()}
        self._admitted = []
        running: list[dict[str, Any]] = []
        for wl in self._list("Workload"):
            finished = (_condition(wl, "Finished") or {}).get("status") == "True"
            if finished:
                continue
            admission = (wl.get("status") or {}).get("admission")
            if admission is None:
                pending.append(wl)
                continue
            self._charge(usage, local_usage, wl, admission)
            if not _admitted_true(wl):
                self._admit_after_checks(wl, queues.get(str(admission.get("clusterQueue"))))
            self._admitted.append(_admitted(wl, admission))
            self._count(counts, wl, admission.get("clusterQueue"), local, "admittedWorkloads")
            running.append(wl)
        if pending:
            self._tas = TasPass.of(
                store.list("v1", "Node"), self._list("Topology"), store.list("v1", "Pod"), running
            )
        self._tas_held = False
        pending.sort(key=lambda w: (w["metadata"]["creationTimestamp"], w["metadata"]["name"]))
        # Kueue tries the Workloads that fit without borrowing first, then the others
        # (pkg/scheduler/scheduler.go, entry ordering; docs/simulator.md).
        borrowing: list[dict[str, Any]] = []
        for round_, defer in ((pending, borrowing), (borrowing, None)):
            for wl in round_:
                cq_name, admission = self._admit_one(
                    wl, views, local, flavors, namespaces, usage, defer=defer
                )
                if admission is DEFERRED:
                    continue
                if admission is not None:
                    self._charge(usage, local_usage, wl, admission)
                field = "admittedWorkloads" if admission is not None else "pendingWorkloads"
                self._count(counts, wl, cq_name, local, field)
        self._write_queue_status(queues, views, local, usage, local_usage, counts)

    @staticmethod
    def _charge(
        usage: dict[str, dict[tuple[str, str], Fraction]],
        local_usage: dict[str, dict[tuple[str, str], Fraction]],
        wl: Mapping[str, Any],
        admission: Mapping[str, Any],
    ) -> None:
        """Add an admitted Workload's usage to its ClusterQueue's and its LocalQueue's."""
        queue = f"{wl['metadata']['namespace']}/{(wl.get('spec') or {}).get('queueName', '')}"
        targets = (
            usage.setdefault(str(admission.get("clusterQueue")), {}),
            local_usage.setdefault(queue, {}),
        )
        for assignment in admission.get("podSetAssignments") or []:
            for resource, flavor in (assignment.get("flavors") or {}).items():
                amount = parse_quantity((assignment.get("resourceUsage") or {}).get(resource, 0))
                for target in targets:
                    key = (flavor, resource)
                    target[key] = target.get(key, Fraction(0)) + (amount or Fraction(0))

    @staticmethod
    def _count(
        counts: dict[tuple[str, str], dict[str, int]],
        wl: Mapping[str, Any],
        cq_name: str | None,
        local: Mapping[tuple[str, str], Any],
        field: str,
    ) -> None:
        ns, queue = wl["metadata"]["namespace"], (wl.get("spec") or {}).get("queueName", "")
        if (ns, queue) in local:
            lq = counts.setdefault(("LocalQueue", f"{ns}/{queue}"), {})
            lq[field] = lq.get(field, 0) + 1
        if cq_name:
            cq = counts.setdefault(("ClusterQueue", cq_name), {})
            cq[field] = cq.get(field, 0) + 1

    def _admit_one(
        self,
        wl: dict[str, Any],
        views: Mapping[str, ClusterQueueView],
        local: Mapping[tuple[str, str], Any],
        flavors: Mapping[str, Any],
        namespaces: Mapping[str, Mapping[str, str]],
        usage: dict[str, dict[tuple[str, str], Fraction]],
        defer: list[dict[str, Any]] | None = None,
    ) -> tuple[str | None, dict[str, Any] | None]:
        """Try to admit one pending Workload: (its ClusterQueue when known, the admission
        written, None while it waits). One that fits only by borrowing is appended to
        *defer* (when given) and :data:`DEFERRED` returned, to be tried after the others."""
        ns, queue = wl["metadata"]["namespace"], (wl.get("spec") or {}).get("queueName", "")
        lq = local.get((ns, queue))
        if lq is None:
            self._pending(wl, "Inadmissible", f"LocalQueue {queue} doesn't exist")
            return None, None
        cq_name = str((lq.get("spec") or {}).get("clusterQueue", ""))
        cq = views.get(cq_name)
        if cq is None:
            self._pending(wl, "Inadmissible", f"ClusterQueue {cq_name} doesn't exist")
            return None, None
        if cq.stopped:
            self._pending(wl, "Inadmissible", f"ClusterQueue {cq_name} is inactive")
            return cq_name, None
        if not _selector_matches(cq.namespace_selector, namespaces.get(ns, {})):
            self._pending(wl, "Pending", "workload namespace doesn't match ClusterQueue selector")
            return cq_name, None
        podsets = [
            PodSet(
                str(p.get("name", "main")),
                int(p.get("count", 1)),
                (p.get("template") or {}).get("spec") or {},
            )
            for p in (wl.get("spec") or {}).get("podSets") or []
        ]
        requests = [
            (p.name, podset_requests(p, self.transformations, cq.covers("pods"))) for p in podsets
        ]
        members = [v for v in views.values() if cq.cohort and v.cohort == cq.cohort]
        own = self._cohorts.get(cq.cohort or "")
        check = self._tas_check(wl, cq, flavors)
        result = assign(cq, members, usage, requests, own, check)
        if result.fits and defer is not None and borrows(cq, usage, result):
            defer.append(wl)
            return cq_name, DEFERRED
        if not result.fits:
            victims = reclaim_targets(
                cq,
                self._reclaim.get(cq_name, "Never"),
                int((wl.get("spec") or {}).get("priority") or 0),
                requests,
                {m.name: m for m in members},
                usage,
                self._admitted,
                lambda u: assign(cq, members, u, requests, own, check).fits,
            )
            if victims:
                for victim in victims:
                    self._evict(victim, wl, usage, cq_name)
                self._schedule = True  # the quota is free: admit on the next pass
                self._pending(
                    wl,
                    "Pending",
                    f"{result.message}. Pending the preemption of {len(victims)} workload(s)",
                )
                return cq_name, None
            self._pending(wl, "Pending", result.message)
            return cq_name, None
        placements = self._tas.place(wl, podsets, result.flavors, flavors)  # standins/kueuetas.py
        if isinstance(placements, str):
            self._tas_held = True  # a Node or Pod change may make room: look again then
            self._pending(wl, "Pending", placements)
            return cq_name, None
        admission = {
            "clusterQueue": cq_name,
            "podSetAssignments": [
                {
                    "name": p.name,
                    "count": p.count,
                    "flavors": result.flavors[p.name],
                    "resourceUsage": {
                        r: format_amount(r, a) for r, a in result.usage[p.name].items()
                    },
                    **(
                        {
                            "topologyAssignment": topology_assignment(
                                placements[p.name], str(wl.get("apiVersion", ""))
                            )
                        }
                        if p.name in placements
                        else {}
                    ),
                }
                for p in podsets
            ],
        }
        self._tas.admitted(podsets, placements)
        status = copy.deepcopy(wl.get("status") or {})
        status["admission"] = admission
        _set_condition(
            status,
            "QuotaReserved",
            "True",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq_name}",
        )
        checks = self._multikueue_checks(self._cluster_queue(cq_name))
        if checks:
            # Quota reserved; admitted once every check is Ready (pkg/workload/admissionchecks.go).
            now = now_rfc3339()
            status["admissionChecks"] = [
                {"name": c, "state": "Pending", "message": "", "lastTransitionTime": now}
                for c in checks
            ]
        else:
            _set_condition(status, "Admitted", "True", "Admitted", "The workload is admitted")
        wl = self.sim.store.update_status({**wl, "status": status})
        waited = _seconds_since(wl["metadata"].get("creationTimestamp"))
        self._events.record(
            wl,
            NORMAL,
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq_name}, wait time since queued was {waited:.0f}s",
        )
        if checks:
            return cq_name, admission
        self._events.record(
            wl,
            NORMAL,
            "Admitted",
            f"Admitted by ClusterQueue {cq_name}, wait time since reservation was 0s",
        )
        self._start_job(wl, result.flavors, flavors, placements)
        log.debug("kueue stand-in admitted", workload=wl["metadata"]["name"], cluster_queue=cq_name)
        return cq_name, admission

    def _cluster_queue(self, name: str) -> dict[str, Any]:
        api = self._api("ClusterQueue")
        return (self.sim.store.get(api, "ClusterQueue", name) if api else None) or {}

    def _admit_after_checks(
        self, wl: dict[str, Any], cluster_queue: Mapping[str, Any] | None
    ) -> None:
        """A Workload holding quota is admitted, and its Job started, once every MultiKueue
        check of its queue is ``Ready`` (MultiKueue's stand-in moves them)."""
        checks = self._multikueue_checks(cluster_queue or {})
        states = {
            c.get("name"): c.get("state")
            for c in (wl.get("status") or {}).get("admissionChecks") or []
        }
        if not checks or any(states.get(c) != "Ready" for c in checks):
            return
        status = copy.deepcopy(wl.get("status") or {})
        _set_condition(status, "Admitted", "True", "Admitted", "The workload is admitted")
        wl = self.sim.store.update_status({**wl, "status": status})
        cq_name = str(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue"))
        reserved = (_condition(wl, "QuotaReserved") or {}).get("lastTransitionTime")
        self._events.record(
            wl,
            NORMAL,
            "Admitted",
            f"Admitted by ClusterQueue {cq_name}, wait time since reservation was "
            f"{_seconds_since(reserved):.0f}s",
        )
        # The manager's Job is started but runs nothing: its spec.managedBy leaves it to
        # MultiKueue, which copies the member's Job status to it.
        self._start_job(wl, {}, {})

    def _tas_check(
        self, wl: Mapping[str, Any], cq: ClusterQueueView, flavors: Mapping[str, Any]
    ) -> FlavorCheck:
        """The TAS judgement of each flavor for *wl*'s pod sets, made before quota as Kueue
        makes it (``kueuetas.flavor_check``)."""
        templates = {
            str(p.get("name", "main")): p.get("template") or {}
            for p in (wl.get("spec") or {}).get("podSets") or []
        }
        tas_only = all(
            ((flavors.get(name) or {}).get("spec") or {}).get("topologyName")
            for group in cq.groups
            for name, _quotas in group.flavors
        )
        topologies = self._tas.topologies

        def check(podset: str, flavor: str, covered: tuple[str, ...]) -> str | None:
            template = templates.get(podset) or {}
            return flavor_check(
                (template.get("metadata") or {}).get("annotations") or {},
                template.get("spec") or {},
                flavors.get(flavor),
                flavor,
                covered,
                topologies,
                tas_only,
            )

        return check

    def _evict(
        self,
        victim: Admitted,
        preemptor: Mapping[str, Any],
        usage: dict[str, dict[tuple[str, str], Fraction]],
        preemptor_cq: str,
    ) -> None:
        """Preempt *victim* to reclaim quota within the cohort: its admission goes, with
        Kueue's conditions, and its Job is suspended; the Job's pods are deleted, as the Job
        controller does for a suspended Job (docs/simulator.md, "Kueue admission stand-in")."""
        store, wl_api = self.sim.store, self._api("Workload")
        assert wl_api is not None
        namespace, name = victim.key
        wl = store.get(wl_api, "Workload", name, namespace)
        if wl is None:
            return
        message = preemption_message(
            preemptor["metadata"]["uid"],
            (preemptor["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid", ""),
            self._cq_path(preemptor_cq),
            self._cq_path(victim.cluster_queue),
        )
        status = copy.deepcopy(wl.get("status") or {})
        status.pop("admission", None)
        for kind, value, reason, cond_message in eviction_conditions(message):
            _set_condition(status, kind, value, reason, cond_message)
        wl = store.update_status({**wl, "status": status})
        # Kueue's preemption: Evict's Event, then "Preempted" on the target and
        # "PreemptedWorkload" on the preemptor (pkg/scheduler/preemption/preemption.go,
        # pkg/workload/evict/evict.go); every priority is the Workload's spec.priority.
        priorities = (
            f"; preemptor effective priority: {_priority(preemptor)} (base: "
            f"{_priority(preemptor)}, boost: 0); preemptee effective priority: "
            f"{victim.priority} (base: {victim.priority}, boost: 0)"
        )
        self._events.record(wl, NORMAL, "EvictedDueToPreempted", message)
        self._events.record(wl, NORMAL, "Preempted", message + priorities)
        self._events.record(
            preemptor,
            NORMAL,
            "PreemptedWorkload",
            f"Preempted workload {namespace}/{name} (UID: {wl['metadata']['uid']}) in "
            f"ClusterQueue {victim.cluster_queue}" + priorities,
        )
        per = usage.setdefault(victim.cluster_queue, {})
        for key, amount in victim.usage.items():
            per[key] = per.get(key, Fraction(0)) - amount
        self._admitted = [a for a in self._admitted if a.key != victim.key]
        owner = next(
            (o for o in wl["metadata"].get("ownerReferences") or [] if o.get("kind") == "Job"), None
        )
        job = store.get(JOB_API, "Job", owner["name"], namespace) if owner else None
        if job is None:
            return
        if not (job.get("spec") or {}).get("suspend"):
            job = copy.deepcopy(job)
            job["spec"]["suspend"] = True
            job = store.update(job, field_manager="kueue")
            self._job_events.record(job, NORMAL, "Stopped", message)
        for pod in store.list("v1", "Pod", namespace=namespace):
            owners = pod["metadata"].get("ownerReferences") or []
            if any(
                o.get("kind") == "Job" and o.get("uid") == job["metadata"]["uid"] for o in owners
            ):
                store.delete("v1", "Pod", pod["metadata"]["name"], namespace)
        log.info(
            "kueue stand-in preempted",
            workload=name,
            cluster_queue=victim.cluster_queue,
            preemptor=preemptor["metadata"]["name"],
        )

    def _pending(self, wl: dict[str, Any], reason: str, message: str) -> None:
        """Keep *wl* waiting: ``QuotaReserved=False`` with *reason* and *message*. Kueue's
        scheduler records a Warning Event with the same reason and message each time it
        finds a Workload inadmissible (``scheduler.go``, ``requeueAndUpdate``); the stand-in
        records one when the reason or message changes, not on every pass."""
        old = _condition(wl, "QuotaReserved") or {}
        status = copy.deepcopy(wl.get("status") or {})
        _set_condition(status, "QuotaReserved", "False", reason, message)
        wl = self.sim.store.update_status({**wl, "status": status})
        changed = (old.get("status"), old.get("reason"), old.get("message")) != (
            "False",
            reason,
            message,
        )
        if changed and reason == "Pending":
            self._events.record(wl, WARNING, reason, message)

    def _cq_path(self, cq_name: str) -> str:
        """``/<cohort>/<ClusterQueue>`` (``/<ClusterQueue>`` without one), as Kueue's
        preemption messages name a queue."""
        views = self._views
        cohort = views[cq_name].cohort if cq_name in views else None
        return f"/{cohort}/{cq_name}" if cohort else f"/{cq_name}"

    def _start_job(
        self,
        wl: Mapping[str, Any],
        assigned: Mapping[str, Mapping[str, str]],
        flavors: Mapping[str, Any],
        placements: Mapping[str, Placement] | None = None,
    ) -> None:
        """Unsuspend the owning Job, pinned to the flavors' nodes with their tolerations."""
        owner = next(
            (o for o in wl["metadata"].get("ownerReferences") or [] if o.get("kind") == "Job"), None
        )
        if owner is None:
            return
        job = self.sim.store.get(JOB_API, "Job", owner["name"], wl["metadata"]["namespace"])
        if job is None:
            return
        job = copy.deepcopy(job)
        pod = job["spec"].setdefault("template", {}).setdefault("spec", {})
        selector = dict(pod.get("nodeSelector") or {})
        tolerations = list(pod.get("tolerations") or [])
        for flavor_name in sorted({f for per in assigned.values() for f in per.values()}):
            spec = (flavors.get(flavor_name) or {}).get("spec") or {}
            selector.update(spec.get("nodeLabels") or {})
            tolerations += [t for t in spec.get("tolerations") or [] if t not in tolerations]
        if selector:
            pod["nodeSelector"] = selector
        if tolerations:
            pod["tolerations"] = tolerations
        for placement in (placements or {}).values():  # one pod set: a Job's
            pin(job["spec"]["template"], placement)
        cq_name = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
        template_meta = job["spec"]["template"].setdefault("metadata", {})
        template_meta["labels"] = {
            **(template_meta.get("labels") or {}),
            **queue_labels(str((wl.get("spec") or {}).get("queueName", "")), str(cq_name)),
        }
        job["spec"]["suspend"] = False
        job = self.sim.store.update(job, field_manager="kueue")
        self._job_events.record(job, NORMAL, "Started", f"Admitted by clusterQueue {cq_name}")

    # --- queue status ---------------------------------------------------------------------

    def _write_queue_status(
        self,
        queues: Mapping[str, dict[str, Any]],
        views: Mapping[str, ClusterQueueView],
        local: Mapping[tuple[str, str], dict[str, Any]],
        usage: Mapping[str, Mapping[tuple[str, str], Fraction]],
        local_usage: Mapping[str, Mapping[tuple[str, str], Fraction]],
        counts: Mapping[tuple[str, str], Mapping[str, int]],
    ) -> None:
        for name, cq in queues.items():
            view, used = views[name], usage.get(name, {})
            flavors = []
            for group in view.groups:
                for flavor, quotas in group.flavors:
                    resources = []
                    for resource in group.covered:
                        total = used.get((flavor, resource), Fraction(0))
                        nominal = quotas[resource].nominal if resource in quotas else Fraction(0)
                        resources.append(
                            {
                                "name": resource,
                                "total": format_amount(resource, total),
                                "borrowed": format_amount(
                                    resource, max(Fraction(0), total - nominal)
                                ),
                            }
                        )
                    flavors.append({"name": flavor, "resources": resources})
            self._put_status(cq, flavors, counts.get(("ClusterQueue", name), {}))
        for (ns, lq_name), lq in local.items():
            cq_name = str((lq.get("spec") or {}).get("clusterQueue", ""))
            lq_flavors = []
            own = local_usage.get(f"{ns}/{lq_name}", {})  # its own Workloads' usage
            lq_view = views.get(cq_name)
            if lq_view is not None:
                for group in lq_view.groups:
                    for flavor, _quotas in group.flavors:
                        lq_flavors.append(
                            {
                                "name": flavor,
                                "resources": [
                                    {
                                        "name": r,
                                        "total": format_amount(
                                            r, own.get((flavor, r), Fraction(0))
                                        ),
                                    }
                                    for r in group.covered
                                ],
                            }
                        )
            self._put_status(lq, lq_flavors, counts.get(("LocalQueue", f"{ns}/{lq_name}"), {}))

    def _put_status(
        self, obj: dict[str, Any], flavors: list[dict[str, Any]], counts: Mapping[str, int]
    ) -> None:
        status = copy.deepcopy(obj.get("status") or {})
        status["flavorsReservation"] = flavors
        status["flavorsUsage"] = copy.deepcopy(flavors)
        admitted = counts.get("admittedWorkloads", 0)
        status["pendingWorkloads"] = counts.get("pendingWorkloads", 0)
        status["reservingWorkloads"] = admitted
        status["admittedWorkloads"] = admitted
        if obj.get("kind") == "ClusterQueue":
            _set_active(status, obj)
        if status != (obj.get("status") or {}):
            self.sim.store.update_status({**obj, "status": status})


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def queue_labels(local_queue: str, cluster_queue: str) -> dict[str, str]:
    """The labels Kueue gives a started Job's Pods: its LocalQueue always, its ClusterQueue
    only when that name is a DNS label (kubernetes-sigs/kueue v0.19.2,
    pkg/controller/jobframework/reconciler.go ``assignQueueLabels``)."""
    labels = {QUEUE_NAME_LABEL: local_queue}
    if _DNS_LABEL.fullmatch(cluster_queue):
        labels[CLUSTER_QUEUE_NAME_LABEL] = cluster_queue
    return labels
