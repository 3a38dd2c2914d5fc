"""The operator on the real control plane: deploy/'s objects, the worker and the device
managers as processes with their own ServiceAccount tokens, and the comparisons the tier makes.

The worker and each device manager run as ``python -m gpustack_operator`` processes, as the
image runs them, each with a kubeconfig holding a token of its deploy/ ServiceAccount (the
device manager's bound to its Node, as a Pod's token carries the node-name claim that
deploy/components/node-bound-agents checks). What they may do is what deploy/'s RBAC and
admission policies allow on a real API server.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.realcluster.controlplane import (
    REPO,
    LoopbackPlane,
    Process,
    RealClusterError,
    token_kubeconfig_text,
    wait_until,
)
from tests.realcluster.nodes import RUN_SECONDS_ANNOTATION

SYSTEM_NAMESPACE = "gpustack-system"
WORKER_SA = "gpustack-operator-worker"
DEVICE_MANAGER_SA = "gpustack-operator-device-manager"
MANAGED_BY = "app.kubernetes.io/managed-by"
KUEUE_GROUP = "kueue.x-k8s.io"
CHAIN_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")
_WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def release_objects(plane: LoopbackPlane) -> list[dict[str, Any]]:
    """``deploy/overlays/release`` as kustomize renders it, without the worker's Deployment
    (the tier runs the worker as a local process with the same ServiceAccount)."""
    rendered = _rendered_release(plane.kubectl)
    return [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") != "Deployment"]


@cache
def _rendered_release(kubectl: Path) -> str:
    """``kubectl kustomize deploy/overlays/release``, once per test process."""
    result = subprocess.run(
        [str(kubectl), "kustomize", str(REPO / "deploy" / "overlays" / "release")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RealClusterError(f"kubectl kustomize failed: {result.stderr.strip()}")
    return result.stdout


def load_nodes(path: Path) -> list[dict[str, Any]]:
    """The Nodes of a cluster file (a v1 List or multi-document YAML, as the examples are)."""
    nodes = []
    for document in yaml.safe_load_all(path.read_text()):
        if not document:
            continue
        items = document.get("items") if document.get("kind") == "List" else [document]
        nodes += [i for i in items or [] if i.get("kind") == "Node"]
    return nodes


class Operator:
    """deploy/'s objects applied to *plane*, and the operator's processes on it."""

    def __init__(self, plane: LoopbackPlane) -> None:
        self.plane = plane
        self.workdir = plane.workdir / "operator"
        self.workdir.mkdir(parents=True, exist_ok=True)
        plane.apply(release_objects(plane))
        self.worker_kubeconfig = self._token_kubeconfig(WORKER_SA, "worker")
        self.worker: Process | None = None
        self.metrics_port = 0
        self.agents: dict[str, Process] = {}

    def _token_kubeconfig(self, account: str, stem: str, bound_node: str | None = None) -> Path:
        token = self.plane.token(SYSTEM_NAMESPACE, account, 48 * 3600, bound_node=bound_node)
        path = self.workdir / f"{stem}.kubeconfig"
        path.write_text(token_kubeconfig_text(self.plane.server, self.plane.ca_file, token, stem))
        return path

    def _process(self, name: str, argv: Sequence[str], ports: tuple[int, ...]) -> Process:
        process = Process(
            name,
            [sys.executable, "-m", "gpustack_operator", *argv],
            self.plane.logs / f"{name}.log",
            ports,
            {"PYTHONUNBUFFERED": "1"},
        )
        self.plane.processes[name] = process
        process.start()
        return process

    def start_worker(self, *flags: str) -> Process:
        """``gpustack-operator worker`` with the worker's token, without leader election (a
        steady state then makes no writes at all) and without bootstrap (no kubelet runs the
        DaemonSets it would install)."""
        self.stop_worker()
        health = self.plane._port()
        self.metrics_port = self.plane._port()
        self.worker = self._process(
            "worker",
            [
                "--log-format=json",
                "worker",
                f"--kubeconfig={self.worker_kubeconfig}",
                "--no-leader-elect",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                "--disable-applications=*",
                *flags,
            ],
            (health, self.metrics_port),
        )
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{health}/readyz", timeout=2).status_code == 200,
            timeout=90,
            what="ready (/readyz)",
            process=self.worker,
        )
        return self.worker

    def stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.plane.processes.pop("worker", None)
            self.worker = None

    def start_device_managers(self, nodes: Iterable[str]) -> None:
        """The device managers of *nodes*: each node's agent as ``device-manager serve
        --sim-devices-annotation`` runs it, with a ServiceAccount token bound to that Node,
        all in one process (``agenthost.py``: one interpreter's start-up instead of one per
        node)."""
        argvs = []
        names = list(nodes)
        for node in names:
            kubeconfig = self._token_kubeconfig(
                DEVICE_MANAGER_SA, f"device-manager-{node}", bound_node=node
            )
            argvs.append(
                [
                    "--log-format=json",
                    "device-manager",
                    "serve",
                    f"--kubeconfig={kubeconfig}",
                    f"--node-name={node}",
                    "--sim-devices-annotation",
                    "--health-probe-bind-address=0",
                    "--metrics-bind-address=0",
                ]
            )
        if not argvs:
            return
        agents_file = self.workdir / "device-managers.json"
        agents_file.write_text(json.dumps({"agents": argvs}))
        process = Process(
            "device-managers",
            [sys.executable, "-m", "tests.realcluster.agenthost", str(agents_file)],
            self.plane.logs / "device-managers.log",
            (),
            {"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)},
        )
        self.plane.processes[process.name] = process
        process.start()
        for node in names:
            self.agents[node] = process

    def writes(self) -> int:
        """The worker's write requests so far (``rest_client_requests_total``)."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        total = 0.0
        for line in text.splitlines():
            if line.startswith("rest_client_requests_total{"):
                method = re.search(r'method="([A-Z]+)"', line)
                if method and method.group(1) in _WRITE_METHODS:
                    total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def plan(self, *flags: str) -> dict[str, Any]:
        """``gpustack-operator plan --kubeconfig`` on the live cluster, as JSON."""
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpustack_operator",
                "plan",
                f"--kubeconfig={self.plane.admin_kubeconfig}",
                "-o",
                "json",
                *flags,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RealClusterError(f"plan failed ({result.returncode}): {result.stderr.strip()}")
        return dict(json.loads(result.stdout))


def get_all(plane: LoopbackPlane, kind: str, *, namespaced: bool = False) -> list[dict[str, Any]]:
    """Every object of *kind* (a plural resource name, ``plural.group`` beyond the core
    group), in every namespace, as the admin lists it."""
    return plane.list_objects(kind, namespaced=namespaced)


def _contains(have: object, want: object) -> bool:
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(
            k in have and _contains(have[k], v) for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(_contains(h, w) for h, w in zip(have, want, strict=True))
        )
    return have == want


def _flavors_by_name(spec: Any) -> Any:
    """A ClusterQueue spec with each group's flavors by name (the worker keeps creation order,
    plan has no creation times: docs/worker.md)."""
    if not isinstance(spec, Mapping) or "resourceGroups" not in spec:
        return spec
    groups = [
        {**g, "flavors": sorted(g.get("flavors", []), key=lambda f: f["name"])}
        for g in spec["resourceGroups"]
    ]
    return {**spec, "resourceGroups": groups}


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}"


def chain_differences(plane: LoopbackPlane, planned: Mapping[str, Any]) -> list[str]:
    """Where the cluster's chain (the worker's Kueue objects and NodeFeatures) differs from
    *planned* (``plan -o json``): [] when the worker converged to plan."""
    want = {
        _key(o): o
        for o in planned["items"]
        if o["kind"] in (*CHAIN_KINDS, "NodeFeature", "Topology")
    }
    have: dict[str, dict[str, Any]] = {}
    for kind in (*CHAIN_KINDS, "Topology"):
        resource = (
            f"{kind.lower()}s.{KUEUE_GROUP}" if kind != "Topology" else f"topologies.{KUEUE_GROUP}"
        )
        for obj in get_all(plane, resource, namespaced=kind == "LocalQueue"):
            if (obj["metadata"].get("labels") or {}).get(MANAGED_BY) == "gpustack-operator":
                have[_key(obj)] = obj
    for obj in get_all(plane, "nodefeatures.nfd.k8s-sigs.io", namespaced=True):
        if obj["metadata"]["namespace"] == SYSTEM_NAMESPACE:  # the worker's and the agents'
            have[_key(obj)] = obj
    problems = []
    for key in sorted(want.keys() - have.keys()):
        problems.append(f"missing {key}")
    for key in sorted(have.keys() - want.keys()):
        problems.append(f"extra {key}")
    for key in sorted(want.keys() & have.keys()):
        wanted, got = want[key], have[key]
        if not _contains(_flavors_by_name(got.get("spec")), _flavors_by_name(wanted.get("spec"))):
            problems.append(
                f"{key}: spec differs: want {wanted.get('spec')} have {got.get('spec')}"
            )
        if not _contains(
            got["metadata"].get("labels") or {}, wanted["metadata"].get("labels") or {}
        ):
            problems.append(f"{key}: labels differ")
    return problems


PLAN_REFRESH = 10.0
"""Seconds a ``plan`` answer is compared against before it is asked again while the worker
converges: each ``plan`` is a Python process of its own, seconds of CPU on a busy machine."""


def wait_converged(plane: LoopbackPlane, operator: Operator, *plan_flags: str) -> None:
    """Wait until the worker's chain equals ``plan`` (with *plan_flags*) on the cluster; the
    failure lists the last differences. The chain is compared every second with a ``plan``
    at most :data:`PLAN_REFRESH` s old, and a match is confirmed with a fresh ``plan``."""
    last: list[str] = []
    planned: dict[str, Any] | None = None
    asked = 0.0

    def check() -> bool:
        nonlocal last, planned, asked
        fresh = planned is None or time.monotonic() - asked > PLAN_REFRESH
        if fresh:
            planned, asked = operator.plan(*plan_flags), time.monotonic()
        assert planned is not None
        last = chain_differences(plane, planned)
        if not last and not fresh:
            planned, asked = operator.plan(*plan_flags), time.monotonic()
            last = chain_differences(plane, planned)
        return not last

    try:
        wait_until(check, timeout=120, what="converged to plan", every=1.0)
    except RealClusterError:
        raise AssertionError("the worker did not converge to plan:\n" + "\n".join(last)) from None


def device_job(
    name: str, namespace: str, queue: str, *, run_seconds: float | None = 600, cards: int = 1
) -> dict[str, Any]:
    """A suspended Job of one Pod asking for *cards* ``nvidia.com/gpu`` (limit = request) in
    LocalQueue *queue*; its Pod runs *run_seconds* (None: the node agents' default)."""
    template: dict[str, Any] = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(cards)},
                        "limits": {"nvidia.com/gpu": str(cards)},
                    },
                }
            ],
        }
    }
    if run_seconds is not None:
        template["metadata"] = {"annotations": {RUN_SECONDS_ANNOTATION: str(run_seconds)}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": queue},
        },
        "spec": {"suspend": True, "template": template},
    }


def workloads(plane: LoopbackPlane, namespace: str | None = None) -> list[dict[str, Any]]:
    """Every Workload (of *namespace*)."""
    return [
        w
        for w in get_all(plane, "workloads.kueue.x-k8s.io", namespaced=True)
        if namespace is None or w["metadata"]["namespace"] == namespace
    ]


def workload_of(
    plane: LoopbackPlane, job: str, namespace: str | None = None
) -> dict[str, Any] | None:
    """The Workload Kueue made for Job *job*, if any yet."""
    for item in workloads(plane, namespace):
        owners = item["metadata"].get("ownerReferences") or []
        if any(o["kind"] == "Job" and o["name"] == job for o in owners):
            return item
    return None


def condition(workload: Mapping[str, Any] | None, kind: str) -> dict[str, Any] | None:
    """The condition *kind* of a Workload (None: absent)."""
    for found in ((workload or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == kind:
            return dict(found)
    return None


def is_admitted(workload: Mapping[str, Any] | None) -> bool:
    found = condition(workload, "Admitted")
    return found is not None and found["status"] == "True"
