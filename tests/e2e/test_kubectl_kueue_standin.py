"""kubectl against the Kueue stand-in, as a new user reads a held and an admitted Job:
``kubectl describe`` lists Kueue's Events, ``kubectl get`` prints the Job, Pod and queue
columns a real cluster prints (docs/simulator.md, "Where the simulator differs from a real
cluster")."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.crds import stand_in_crds
from gpustack_sim.standins.kueue import KueueStandIn
from gpustack_sim.standins.scheduler import SchedulerStandIn
from tests.e2e.conftest import Kubectl, started_sim

pytestmark = pytest.mark.anyio

KUEUE = "kueue.x-k8s.io/v1beta2"


def _queues() -> list[dict[str, Any]]:
    """A T4 flavor with one card, its ClusterQueue and LocalQueue, and an unused queue."""
    return [
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": "t4"},
            "spec": {"nodeLabels": {"pool": "t4"}},
        },
        *(
            {
                "apiVersion": KUEUE,
                "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": "t4",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "8"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": "1"},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            }
            for name in ("cq-t4", "cq-idle")
        ),
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": "default"},
            "spec": {"clusterQueue": "cq-t4"},
        },
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-1", "labels": {"pool": "t4"}},
            "status": {
                "allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    ]


def _job(name: str, cards: int) -> str:
    return f"""apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: default
  labels:
    kueue.x-k8s.io/queue-name: team
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: main
          image: busybox
          resources:
            requests:
              cpu: "1"
              nvidia.com/gpu: "{cards}"
            limits:
              nvidia.com/gpu: "{cards}"
"""


@pytest.fixture
async def kueue_sim() -> AsyncIterator[SimServer]:
    sim = await started_sim(stand_in_crds())
    try:
        async with KueueStandIn(sim), SchedulerStandIn(sim):
            for obj in _queues():
                sim.store.create(obj)
            yield sim
    finally:
        await sim.stop()


@pytest.fixture
def kk(kubectl_bin: Path, kueue_sim: SimServer, tmp_path: Path) -> Kubectl:
    config = kueue_sim.write_kubeconfig(tmp_path / "kubeconfig.yaml", context="sim")
    return Kubectl(kubectl_bin, config, tmp_path / "kube-cache")


async def _until(kk: Kubectl, what: str, *args: str) -> str:
    """kubectl's output once it contains *what*, polled."""
    deadline = time.monotonic() + 30
    while True:
        out = await kk.out(*args)
        if what in out:
            return out
        assert time.monotonic() < deadline, f"kubectl {' '.join(args)}: no {what!r} in\n{out}"
        await anyio.sleep(0.1)


def _events(described: str) -> list[list[str]]:
    """The rows of the Events table of ``kubectl describe``: type, reason, age, from, message."""
    rows = described.split("\nEvents:\n", 1)[1].splitlines()[2:]
    return [row.split(None, 4) for row in rows if row.strip()]


async def test_a_held_and_an_admitted_job_show_kueues_events_and_columns(
    kk: Kubectl, kueue_sim: SimServer
) -> None:
    await kk("apply", "-f", "-", stdin=_job("too-big", 2))
    held = await _until(kk, "Warning", "describe", "workloads", "-n", "default")
    pending = [e for e in _events(held) if e[1] == "Pending"]
    assert pending == [
        [
            "Warning",
            "Pending",
            pending[0][2],
            "kueue-admission",
            "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
            "flavor t4, previously considered podsets requests (0) + current podset request (2) "
            "> maximum capacity (1)",
        ]
    ], held
    job = await kk.out("describe", "job", "too-big", "-n", "default")
    assert [e[1] for e in _events(job)] == ["CreatedWorkload"], job
    assert _events(job)[0][3] == "batch/job-kueue-controller"
    assert _events(job)[0][4].startswith("Created Workload: default/job-too-big-"), job

    # PENDING WORKLOADS: 1 where it waits, 0 (not empty) on a queue no Workload used.
    queues = await _until(kk, "cq-t4", "get", "clusterqueues")
    rows = {r.split()[0]: r.split() for r in queues.splitlines()[1:]}
    assert queues.split()[:3] == ["NAME", "COHORT", "PENDING"], queues
    assert rows["cq-t4"][-1] == "1" and rows["cq-idle"][-1] == "0", queues

    await kk("apply", "-f", "-", stdin=_job("fits", 1))
    (name,) = [
        w["metadata"]["name"]
        for w in kueue_sim.store.list(KUEUE, "Workload", "default")
        if w["metadata"]["ownerReferences"][0]["name"] == "fits"
    ]
    fits = await _until(
        kk, "Admitted by ClusterQueue", "describe", "workload", name, "-n", "default"
    )
    assert [(e[0], e[1], e[3]) for e in _events(fits)] == [
        ("Normal", "QuotaReserved", "kueue-admission"),
        ("Normal", "Admitted", "kueue-admission"),
    ], fits
    assert _events(fits)[0][4].startswith("Quota reserved in ClusterQueue cq-t4, wait time")
    assert _events(fits)[1][4] == (
        "Admitted by ClusterQueue cq-t4, wait time since reservation was 0s"
    )
    started = await _until(kk, "Started", "describe", "job", "fits", "-n", "default")
    assert [e[1] for e in _events(started)] == ["CreatedWorkload", "Started"], started
    assert _events(started)[1][4] == "Admitted by clusterQueue cq-t4"

    # kubectl get jobs,pods: the columns a real cluster prints.
    pods = await _until(kk, "Running", "get", "pods", "-n", "default")
    assert pods.split()[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], pods
    jobs = await kk.out("get", "jobs", "-n", "default")
    assert jobs.split()[:5] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"], jobs
