"""The Job runner stand-in's statuses (docs/simulator.md, "Job runner stand-in"): a finished
Pod as a kubelet reports it, and a Job's status as the Job controller writes it."""

from __future__ import annotations

from typing import Any

from gpustack_sim.standins.jobrunner import (
    RUN_SECONDS_ANNOTATION,
    job_status,
    run_seconds_of,
    succeeded_status,
)

NOW = "2026-01-02T03:04:05Z"


def pod(phase: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "main", "image": "cuda"}]},
        "status": {"phase": phase, "startTime": "2026-01-02T03:00:00Z"},
    }


def test_a_finished_pod_reports_each_container_terminated_with_exit_0() -> None:
    status = succeeded_status(pod("Running"), NOW)
    assert status["phase"] == "Succeeded"
    (container,) = status["containerStatuses"]
    assert container["name"] == "main" and container["ready"] is False
    assert container["state"]["terminated"] == {
        "exitCode": 0,
        "reason": "Completed",
        "startedAt": "2026-01-02T03:00:00Z",
        "finishedAt": NOW,
    }
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodCompleted")


def test_a_job_counts_its_pods_and_completes_at_its_completions() -> None:
    job: dict[str, Any] = {"spec": {"completions": 2}, "status": {}}
    running = job_status(job, [pod("Running"), pod("Pending")], NOW)
    assert running == {"startTime": NOW, "active": 2, "ready": 1, "succeeded": 0}
    half = job_status({**job, "status": running}, [pod("Succeeded"), pod("Running")], "later")
    assert half["startTime"] == NOW and half["succeeded"] == 1 and "conditions" not in half
    done = job_status({**job, "status": half}, [pod("Succeeded"), pod("Succeeded")], "end")
    assert [c["type"] for c in done["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    assert all(c["status"] == "True" for c in done["conditions"])
    assert done["completionTime"] == "end" and "active" not in done
    # Complete once: a later look changes nothing.
    assert job_status({**job, "status": done}, [pod("Succeeded"), pod("Succeeded")], "x") == done


def test_a_pod_annotation_sets_its_own_run_time() -> None:
    """``sim.gpustack.ai/run-seconds`` overrides ``--job-run-time``; a value that is not a
    number >= 0 falls back to it."""

    def pod(value: str | None) -> dict[str, Any]:
        annotations = {} if value is None else {RUN_SECONDS_ANNOTATION: value}
        return {"metadata": {"name": "p", "annotations": annotations}}

    assert run_seconds_of(pod("600"), 10.0) == 600.0
    assert run_seconds_of(pod("0.5"), 10.0) == 0.5
    assert run_seconds_of(pod(None), 10.0) == 10.0
    assert run_seconds_of(pod("soon"), 10.0) == 10.0
    assert run_seconds_of(pod("-1"), 10.0) == 10.0
