"""A simulated cluster as a fresh single-node kind cluster is at start, for clients nobody
here wrote (docs/simulator.md, "Measured with outside clients").

``hack/kr8s_suite.py`` (through its conftest) and ``hack/official_client_checks.py`` start
``gpustack-operator sim --serve`` with :func:`simulator` and :func:`seed` it from
``kind-seed.yaml`` beside this file: kind's namespaces, its Ready control-plane Node, the
kube-system workloads and their running Pods. The objects go in with kubectl, their status
through the status subresource, as the kubelet and controllers would write it. Standard
library and PyYAML only, so kr8s's own environment can import it too.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol

import yaml

SEED_FILE = Path(__file__).with_name("kind-seed.yaml")
STARTUP_SECONDS = 60.0


class Kubectl(Protocol):
    def __call__(self, *args: str, input: str | None = None) -> str: ...


def kubectl_runner(kubectl_path: Path, kubeconfig: Path) -> Kubectl:
    """kubectl against *kubeconfig*: its standard output (raises on failure)."""

    def run(*args: str, input: str | None = None) -> str:
        return subprocess.check_output(
            [str(kubectl_path), "--kubeconfig", str(kubeconfig), *args],
            encoding="utf-8",
            input=input,
        )

    return run


@contextlib.contextmanager
def simulator(command: list[str], kubeconfig: Path, log: IO[str] | None = None) -> Iterator[None]:
    """``gpustack-operator sim --serve`` (*command*) in a child process writing *kubeconfig*,
    until the block ends; SystemExit when it prints no kubeconfig line within a minute."""
    child = subprocess.Popen(
        [*command, "--kubeconfig-out", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + STARTUP_SECONDS
        for line in child.stdout:
            if line.strip().startswith("kubeconfig:"):
                break
            if time.monotonic() > deadline:
                raise SystemExit("the simulator printed no kubeconfig line in time")
        else:
            raise SystemExit(f"the simulator exited: {command}")
        yield
    finally:
        child.terminate()
        child.wait(timeout=30)


# The static Pods and the Pods of kube-system's controllers on a fresh kind node, all Running.
KIND_PODS = [
    # (namespace, name, container, labels)
    (
        "kube-system",
        "etcd-kind-control-plane",
        "etcd",
        {"component": "etcd", "tier": "control-plane"},
    ),
    (
        "kube-system",
        "kube-apiserver-kind-control-plane",
        "kube-apiserver",
        {"component": "kube-apiserver", "tier": "control-plane"},
    ),
    (
        "kube-system",
        "kube-controller-manager-kind-control-plane",
        "kube-controller-manager",
        {"component": "kube-controller-manager", "tier": "control-plane"},
    ),
    (
        "kube-system",
        "kube-scheduler-kind-control-plane",
        "kube-scheduler",
        {"component": "kube-scheduler", "tier": "control-plane"},
    ),
    (
        "kube-system",
        "coredns-66bc5c9577-8xk2p",
        "coredns",
        {"k8s-app": "kube-dns", "pod-template-hash": "66bc5c9577"},
    ),
    (
        "kube-system",
        "coredns-66bc5c9577-tq4wd",
        "coredns",
        {"k8s-app": "kube-dns", "pod-template-hash": "66bc5c9577"},
    ),
    ("kube-system", "kube-proxy-7m2lx", "kube-proxy", {"k8s-app": "kube-proxy"}),
    ("kube-system", "kindnet-5bn8h", "kindnet-cni", {"app": "kindnet", "k8s-app": "kindnet"}),
    (
        "local-path-storage",
        "local-path-provisioner-7b8c8ddbd6-jx9fz",
        "local-path-provisioner",
        {"app": "local-path-provisioner"},
    ),
]
NODE = "kind-control-plane"
STARTED = "2026-01-01T00:00:00Z"


def _running_pod(
    namespace: str, name: str, container: str, labels: dict[str, str]
) -> tuple[dict, dict]:
    """A kind Pod (spec) and the status its kubelet reports once it runs."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": container, "image": f"registry.k8s.io/{container}:v1.34.0"}],
        },
    }
    ready = {"lastProbeTime": None, "lastTransitionTime": STARTED, "status": "True"}
    status = {
        "phase": "Running",
        "hostIP": "172.18.0.2",
        "podIP": "10.244.0.2",
        "startTime": STARTED,
        "conditions": [
            {**ready, "type": kind}
            for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "containerStatuses": [
            {
                "name": container,
                "image": pod["spec"]["containers"][0]["image"],
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": STARTED}},
            }
        ],
    }
    return pod, status


def _write_status(kubectl: Kubectl, obj: dict, status: dict[str, Any]) -> None:
    meta = obj["metadata"]
    args = ["-n", meta["namespace"]] if "namespace" in meta else []
    kubectl(
        "patch",
        obj["kind"].lower(),
        meta["name"],
        *args,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def seed(kubectl: Kubectl) -> None:
    """Apply the kind seed, then write each object's status as its controller would."""
    kubectl("apply", "-f", str(SEED_FILE))
    for obj in yaml.safe_load(SEED_FILE.read_text())["items"]:
        if "status" in obj:
            _write_status(kubectl, obj, obj["status"])
    for namespace, name, container, labels in KIND_PODS:
        pod, status = _running_pod(namespace, name, container, labels)
        kubectl("apply", "-f", "-", input=json.dumps(pod))
        _write_status(kubectl, pod, status)
