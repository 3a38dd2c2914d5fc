"""The scheduler stand-in creates a started Job's Pods as Kubernetes' Job controller names
and labels them (docs/simulator.md, "Scheduler stand-in")."""

from __future__ import annotations

import re
import time
from typing import Any

import anyio
import pytest

from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.jobrunner import JobRunnerStandIn
from gpustack_sim.standins.scheduler import SchedulerStandIn

pytestmark = pytest.mark.anyio


def _job(name: str, indexed: bool) -> dict[str, Any]:
    """A started (unsuspended) Job of two pods, as Kueue's stand-in leaves an admitted one."""
    spec: dict[str, Any] = {
        "parallelism": 2,
        "completions": 2,
        "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
        },
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
        },
        "spec": spec,
    }


async def _pods(sim: SimServer, job: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    while True:
        pods = [
            p
            for p in sim.store.list("v1", "Pod", "default")
            if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == job
        ]
        if len(pods) == 2:
            return sorted(pods, key=lambda p: str(p["metadata"]["name"]))
        assert time.monotonic() < deadline, pods
        await anyio.sleep(0.05)


async def test_job_pods_are_named_and_labelled_as_the_job_controller_does(
    sim: SimServer,
) -> None:
    async with SchedulerStandIn(sim):
        plain = sim.store.create(_job("plain", indexed=False))
        indexed = sim.store.create(_job("ix", indexed=True))
        pods = await _pods(sim, "plain")
        assert all(re.fullmatch(r"plain-[a-z0-9]{5}", p["metadata"]["name"]) for p in pods), pods
        uid = plain["metadata"]["uid"]
        assert pods[0]["metadata"]["labels"] == {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": "plain",
            "controller-uid": uid,
            "job-name": "plain",
        }
        ix = await _pods(sim, "ix")
        assert [p["metadata"]["name"][: len("ix-0-")] for p in ix] == ["ix-0-", "ix-1-"], ix
        assert all(re.fullmatch(r"ix-[01]-[a-z0-9]{5}", p["metadata"]["name"]) for p in ix)
        assert [
            p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in ix
        ] == ["0", "1"]
        assert ix[1]["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1"
        assert ix[1]["metadata"]["ownerReferences"][0]["uid"] == indexed["metadata"]["uid"]
        # The passes that made the Indexed Job's Pods created no more of the first Job's.
        assert len(await _pods(sim, "plain")) == 2


async def test_a_job_another_controller_manages_gets_no_pods(sim: SimServer) -> None:
    """``spec.managedBy`` other than the Job controller's (MultiKueue's on a manager): the Job
    controller, and so the stand-in, leaves it alone (docs/multikueue.md, "Dispatch")."""
    async with SchedulerStandIn(sim):
        managed = _job("dispatched", indexed=False)
        managed["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
        sim.store.create(managed)
        sim.store.create(_job("plain", indexed=False))
        await _pods(sim, "plain")  # the stand-in has made a pass after both Jobs existed
        assert [
            p
            for p in sim.store.list("v1", "Pod", "default")
            if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name")
            == "dispatched"
        ] == []


async def test_the_job_runner_leaves_a_job_another_controller_manages_alone(
    sim: SimServer,
) -> None:
    """A Job MultiKueue manages on a manager keeps the status MultiKueue copies to it: the
    Job runner (the Job controller's stand-in) does not rewrite it."""
    managed = _job("dispatched", indexed=False)
    managed["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    job = sim.store.create(managed)
    copied = {"active": 1, "startTime": "2026-01-01T00:00:00Z"}
    sim.store.update_status({**job, "status": copied})
    plain = sim.store.create(_job("plain", indexed=False))
    async with JobRunnerStandIn(sim, run_seconds=0.0) as runner:
        deadline = time.monotonic() + 20
        while (sim.store.get("batch/v1", "Job", "plain", "default") or {}).get("status") is None:
            assert time.monotonic() < deadline, "the runner never wrote the plain Job's status"
            await anyio.sleep(0.05)
        runner.mark(("default", "dispatched"))
        while not runner.idle():
            assert time.monotonic() < deadline
            await anyio.sleep(0.05)
    assert plain is not None
    dispatched = sim.store.get("batch/v1", "Job", "dispatched", "default")
    assert dispatched is not None and dispatched["status"] == copied
