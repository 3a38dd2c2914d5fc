"""What a MultiKueue dispatch looks like from the outside, checked the same way on real Kueue
(tests/realcluster/test_multikueue.py) and on the simulator's stand-in
(tests/integration/sim/test_multikueue_standin.py), so the stand-in is held to what real
Kueue v0.19.2 showed (docs/multikueue.md, "What Kueue does").

A view is the Job, its Workload and its Pods in one cluster, read through any lister (kubectl
on the real tier, the simulator's store); the checks return the problems found, [] when the
dispatch is as Kueue makes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MULTIKUEUE_MANAGED_BY = "kueue.x-k8s.io/multikueue"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
PREBUILT_ANNOTATION = "kueue.x-k8s.io/prebuilt-workload-name"
"""An annotation in Kueue v0.19.2 (``WorkloadIdentifierAnnotations``, beta and on since
0.18; a label before)."""
ORIGIN = "gpustack-manager"
"""The manager's ``multiKueue.origin`` in the tests (real: the Kueue configuration; simulator:
the stand-in's argument)."""

Lister = Callable[[str], Iterable[Mapping[str, Any]]]
"""Objects of one resource (``jobs``, ``workloads``, ``pods``) in the test's namespace."""


@dataclass
class DispatchView:
    job: dict[str, Any] | None
    workload: dict[str, Any] | None
    pods: list[dict[str, Any]] = field(default_factory=list)


def _owned_by_job(obj: Mapping[str, Any], job: str) -> bool:
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("kind") == "Job" and o.get("name") == job for o in owners)


def _pods(lister: Lister, job: str) -> list[dict[str, Any]]:
    return [
        dict(p)
        for p in lister("pods")
        if ((p.get("metadata") or {}).get("labels") or {}).get("batch.kubernetes.io/job-name")
        == job
    ]


def manager_view(lister: Lister, job: str) -> DispatchView:
    """The Job as submitted to the manager and the Workload Kueue made for it."""
    found = [dict(j) for j in lister("jobs") if j["metadata"]["name"] == job]
    workload = [dict(w) for w in lister("workloads") if _owned_by_job(w, job)]
    return DispatchView(
        found[0] if found else None, workload[0] if workload else None, _pods(lister, job)
    )


def member_view(lister: Lister, job: str, workload: str | None) -> DispatchView:
    """A member's copy of the Job and of the manager's Workload (same names), if any."""
    found = [dict(j) for j in lister("jobs") if j["metadata"]["name"] == job]
    copies = [dict(w) for w in lister("workloads") if w["metadata"]["name"] == workload]
    return DispatchView(
        found[0] if found else None, copies[0] if copies else None, _pods(lister, job)
    )


def condition(obj: Mapping[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found.get("type") == kind:
            return dict(found)
    return None


def _true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


def check_state(workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The manager Workload's one admission check (its queue has only the MultiKueue one)."""
    checks = ((workload or {}).get("status") or {}).get("admissionChecks") or []
    return dict(checks[0]) if len(checks) == 1 else None


def running_problems(
    manager: DispatchView,
    members: Mapping[str, DispatchView],
    expected: set[str],
    nodes: Mapping[str, set[str]],
) -> tuple[list[str], str]:
    """While the Job runs: the manager's Job is Kueue's to manage and runs nothing there; its
    Workload's check is Ready, naming the member that admitted it, one of *expected*; that
    member holds the Workload's copy (labelled with the manager's origin, admitted) and the
    Job's copy (the same label, the prebuilt Workload's name in an annotation) with a Pod
    bound to one of its *nodes*; no other member holds a copy.
    Returns the problems and the member."""
    problems: list[str] = []
    if manager.job is None or manager.workload is None:
        return ["the manager has no Job or no Workload for it yet"], ""
    managed_by = (manager.job.get("spec") or {}).get("managedBy")
    if managed_by != MULTIKUEUE_MANAGED_BY:
        problems.append(f"the manager's Job has spec.managedBy {managed_by!r}")
    if manager.pods:
        problems.append(f"the manager runs Pods of the Job: {[_name(p) for p in manager.pods]}")
    winner = str((manager.workload.get("status") or {}).get("clusterName") or "")
    if winner not in expected:
        problems.append(f"the manager's Workload has clusterName {winner!r}, not one of {expected}")
    state = check_state(manager.workload)
    want = {"state": "Ready", "message": f'The workload was admitted on "{winner}"'}
    if state is None or any(state.get(k) != v for k, v in want.items()):
        problems.append(f"the manager's admission check is {state}, not {want}")
    if not _true(manager.workload, "Admitted"):
        problems.append("the manager's Workload is not Admitted")
    for name, view in members.items():
        if name != winner:
            if view.workload is not None or view.job is not None:
                problems.append(f"{name} still holds a copy (Workload or Job)")
            continue
        copy = view.workload
        labels = ((copy or {}).get("metadata") or {}).get("labels") or {}
        if copy is None or labels.get(ORIGIN_LABEL) != ORIGIN:
            problems.append(f"{name}'s Workload copy is {_name(copy)} with labels {labels}")
        elif not _true(copy, "Admitted"):
            problems.append(f"{name}'s Workload copy is not Admitted")
        job_meta = (view.job or {}).get("metadata") or {}
        job_labels = job_meta.get("labels") or {}
        prebuilt = (job_meta.get("annotations") or {}).get(PREBUILT_ANNOTATION)
        if (
            view.job is None
            or prebuilt != _name(manager.workload)
            or job_labels.get(ORIGIN_LABEL) != ORIGIN
        ):
            problems.append(
                f"{name}'s Job copy is {_name(view.job)} with labels {job_labels} and "
                f"prebuilt Workload {prebuilt!r}"
            )
        bound = [
            p for p in view.pods if (p.get("spec") or {}).get("nodeName") in nodes.get(name, set())
        ]
        if not bound:
            problems.append(f"{name} has no Pod of the Job bound to one of {nodes.get(name)}")
    return problems, winner


def finished_problems(manager: DispatchView, members: Mapping[str, DispatchView]) -> list[str]:
    """Once the Job ran: the manager's Job shows the member's outcome (one Pod succeeded,
    ``Complete``), its Workload is Finished, and no member keeps a copy."""
    problems: list[str] = []
    status = (manager.job or {}).get("status") or {}
    if status.get("succeeded") != 1 or not _true(manager.job, "Complete"):
        problems.append(f"the manager's Job status is {status}")
    if not _true(manager.workload, "Finished"):
        problems.append("the manager's Workload is not Finished")
    for name, view in members.items():
        if view.workload is not None or view.job is not None:
            problems.append(f"{name} still holds a copy after the Job finished")
    return problems


def _name(obj: Mapping[str, Any] | None) -> str | None:
    return None if obj is None else str((obj.get("metadata") or {}).get("name"))
