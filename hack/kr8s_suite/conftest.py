"""Root conftest for kr8s's own test suite run against ``gpustack-operator sim --serve``.

``hack/kr8s_suite.py`` copies this file over the root ``conftest.py`` of kr8s's source
distribution, whose ``k8s_cluster`` fixture would start a kind cluster. This one starts the
simulator instead, seeds it as a fresh kind cluster is at start (``kind-seed.yaml`` beside
this file) and offers the three things kr8s's fixtures use of a kind cluster: ``kubectl()``,
``kubectl_path`` and ``kubeconfig_path`` (docs/simulator.md, "Measured with outside clients").

The simulator's command line, the kubectl binary and the seed come from the environment that
``hack/kr8s_suite.py`` sets: ``SIM_COMMAND`` (JSON list), ``SIM_KUBECTL``, ``SIM_SEED``.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

READY_WITHIN_S = 60.0


def pytest_addoption(parser: pytest.Parser) -> None:
    """kr8s's pyproject passes ``--keep-cluster`` (a pytest-kind option): accept it."""
    parser.addoption("--keep-cluster", action="store_true", default=False)


class SimulatedCluster:
    """What kr8s's fixtures use of pytest-kind's ``KindCluster``, for the simulator."""

    def __init__(self, kubectl_path: Path, kubeconfig_path: Path) -> None:
        self.kubectl_path = kubectl_path
        self.kubeconfig_path = kubeconfig_path

    def kubectl(self, *args: str, input: str | None = None) -> str:
        """Run kubectl against the simulator; its standard output (raises on failure)."""
        return subprocess.check_output(
            [str(self.kubectl_path), *args],
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig_path)},
            encoding="utf-8",
            input=input,
        )


def _start_simulator(kubeconfig: Path) -> subprocess.Popen[str]:
    command = [*json.loads(os.environ["SIM_COMMAND"]), "--kubeconfig-out", str(kubeconfig)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + READY_WITHIN_S
    assert process.stdout is not None
    for line in process.stdout:
        if "kubeconfig:" in line and kubeconfig.exists():
            return process
        if time.monotonic() > deadline:
            break
    process.kill()
    raise RuntimeError(f"the simulator did not start: {command}")


# The static Pods and the Pods of kube-system's controllers on a fresh kind node, all Running.
KIND_PODS = [
    # (namespace, name, container, labels)
    (
        "kube-system",
        "etcd-pytest-kind-control-plane",
        "etcd",
        {"component": "etcd", "tier": "control-plane"},
    ),
    (
        "kube-system",
        "kube-apiserver-pytest-kind-control-plane",
        "kube-apiserver",
        {"component": "kube-apiserver", "tier": "control-plane"},
    ),
    (
        "kube-system",
        "kube-controller-manager-pytest-kind-control-plane",
        "kube-controller-manager",
        {"component": "kube-controller-manager", "tier": "control-plane"},
    ),
    (
        "kube-system",
        "kube-scheduler-pytest-kind-control-plane",
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
NODE = "pytest-kind-control-plane"
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


def _write_status(cluster: SimulatedCluster, obj: dict, status: dict) -> None:
    meta = obj["metadata"]
    args = ["-n", meta["namespace"]] if "namespace" in meta else []
    cluster.kubectl(
        "patch",
        obj["kind"].lower(),
        meta["name"],
        *args,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def _seed(cluster: SimulatedCluster, seed: Path) -> None:
    """Apply the kind seed, then write each object's status as its controller would."""
    import yaml

    cluster.kubectl("apply", "-f", str(seed))
    for obj in yaml.safe_load(seed.read_text())["items"]:
        if "status" in obj:
            _write_status(cluster, obj, obj["status"])
    for namespace, name, container, labels in KIND_PODS:
        pod, status = _running_pod(namespace, name, container, labels)
        cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
        _write_status(cluster, pod, status)


@pytest.fixture
def ensure_gc() -> Iterator[None]:
    """Garbage collection before and after the test (as kr8s's own conftest)."""
    gc.collect()
    yield
    gc.collect()


@pytest.fixture(scope="session", autouse=True)
def k8s_cluster() -> Iterator[SimulatedCluster]:
    with tempfile.TemporaryDirectory(prefix="kr8s-sim-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig.yaml"
        process = _start_simulator(kubeconfig)
        try:
            cluster = SimulatedCluster(Path(os.environ["SIM_KUBECTL"]), kubeconfig)
            seed = os.environ.get("SIM_SEED")
            if seed:
                _seed(cluster, Path(seed))
            os.environ["KUBECONFIG"] = str(kubeconfig)
            yield cluster
            del os.environ["KUBECONFIG"]
        finally:
            process.terminate()
            process.wait(timeout=30)
