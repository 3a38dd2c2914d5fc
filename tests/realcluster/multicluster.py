"""Several real control planes at once, for MultiKueue: a manager and its member clusters.

Each plane is a whole :class:`~tests.realcluster.controlplane.ControlPlane` (its own etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and Kueue v0.19.2) on loopback; they
start in threads side by side, so three cost about what the slowest one does. The manager's
Kueue runs with MultiKueue's settings (:data:`MANAGER_KUEUE_CONFIGURATION`); each member
grants the manager what Kueue's MultiKueue needs in a worker cluster through a ServiceAccount
and a long-lived token (:func:`member_kubeconfig`), and its pools are read as the gateway
reads them (:func:`member_pools`).
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from gpustack_operator.gateway.pools import pool_entry
from tests.realcluster.cluster import MANAGED_BY, get_all
from tests.realcluster.controlplane import (
    DEFAULT_KUEUE_CONFIGURATION,
    KUEUE_NAMESPACE,
    Binaries,
    ControlPlane,
    wait_until,
)

MANAGER_KUEUE_CONFIGURATION: dict[str, Any] = {
    **DEFAULT_KUEUE_CONFIGURATION,
    # MultiKueue is beta and on in v0.19.2 (pkg/features/kube_features.go); named anyway so the
    # configuration says what it relies on. batch/Job dispatch needs the Job's spec.managedBy,
    # served by Kubernetes 1.36 (JobManagedBy) and defaulted by Kueue's Job webhook to
    # kueue.x-k8s.io/multikueue for a queue with a MultiKueue check
    # (pkg/controller/jobframework/defaults.go, ApplyDefaultForManagedBy).
    "featureGates": {"MultiKueue": True},
    "multiKueue": {
        "gcInterval": "30s",
        "origin": "gpustack-manager",
        "workerLostTimeout": "5m",
    },
}
"""The manager's Kueue: the tier's batch/job integration plus MultiKueue's settings
(``apis/config/v1beta2/configuration_types.go``, ``MultiKueue``)."""

MEMBER_ACCOUNT = "multikueue-manager"
MEMBER_ROLE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["create", "delete", "get", "list", "watch"],
    },
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads"],
        "verbs": ["create", "delete", "get", "list", "watch", "patch", "update"],
    },
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads/status"],
        "verbs": ["get", "patch", "update"],
    },
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["clusterqueues", "localqueues"],
        "verbs": ["get", "list", "watch"],
    },
]
"""What the manager's Kueue may do in a member for batch Jobs, after Kueue v0.19.2's
``site/static/examples/multikueue/create-multikueue-kubeconfig.sh``."""


@contextlib.contextmanager
def running_planes(
    binaries: Binaries,
    workdir: Path,
    shared: Path,
    configurations: Mapping[str, Mapping[str, Any]],
) -> Iterator[dict[str, ControlPlane]]:
    """One control plane per name of *configurations* (its Kueue configuration), started side
    by side; every one is stopped on the way out, and a failure to start stops the others."""
    planes: dict[str, ControlPlane] = {}
    for name, configuration in configurations.items():
        plane = ControlPlane(binaries, workdir / name, shared)
        plane.kueue_configuration = dict(configuration)
        planes[name] = plane
    extra = [shared / "crds" / "cluster-autoscaler-1.36.1"]
    with ThreadPoolExecutor(max_workers=len(planes)) as pool:
        futures = {n: pool.submit(p.start, extra_crds=extra) for n, p in planes.items()}
        failures = []
        for name, future in futures.items():
            try:
                future.result()
            except BaseException as exc:
                failures.append(f"{name}: {exc}")
    try:
        if failures:
            raise RuntimeError("a control plane did not start: " + "; ".join(failures))
        yield planes
    finally:
        problems = []
        for name, plane in planes.items():
            try:
                plane.stop()
            except Exception as exc:
                problems.append(f"{name}: {exc}")
        if problems:
            raise RuntimeError("stopping the control planes: " + "; ".join(problems))


def member_kubeconfig(plane: ControlPlane) -> str:
    """A kubeconfig Kueue's MultiKueue accepts for *plane*: its CA embedded (Kueue v0.19.2
    refuses CA file paths, token files and insecure TLS: ``validateKubeconfig`` in
    ``pkg/controller/admissionchecks/multikueue/multikueuecluster.go``) and the token of a
    ServiceAccount holding :data:`MEMBER_ROLE_RULES`, from a long-lived token Secret."""
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": MEMBER_ACCOUNT, "namespace": KUEUE_NAMESPACE},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": MEMBER_ACCOUNT},
                "rules": MEMBER_ROLE_RULES,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": MEMBER_ACCOUNT},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": MEMBER_ACCOUNT,
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": MEMBER_ACCOUNT,
                        "namespace": KUEUE_NAMESPACE,
                    }
                ],
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {
                    "name": MEMBER_ACCOUNT,
                    "namespace": KUEUE_NAMESPACE,
                    "annotations": {"kubernetes.io/service-account.name": MEMBER_ACCOUNT},
                },
            },
        ]
    )
    token = ""

    def filled() -> bool:
        nonlocal token
        secret = json.loads(
            plane.kubectl_run("get", "secret", MEMBER_ACCOUNT, "-n", KUEUE_NAMESPACE, "-o", "json")
        )
        token = base64.b64decode((secret.get("data") or {}).get("token", "")).decode()
        return bool(token)

    wait_until(filled, timeout=60, what="the member's token Secret filled in")
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "member",
                    "cluster": {
                        "server": plane.server,
                        "certificate-authority-data": base64.b64encode(plane.ca.pem).decode(),
                    },
                }
            ],
            "users": [{"name": MEMBER_ACCOUNT, "user": {"token": token}}],
            "contexts": [
                {"name": "member", "context": {"cluster": "member", "user": MEMBER_ACCOUNT}}
            ],
            "current-context": "member",
        }
    )


def member_pools(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    """The operator's pools on *plane* as the gateway reads them (one per ClusterQueue)."""
    return [
        pool_entry(name, queue)
        for queue in get_all(plane, "clusterqueues.kueue.x-k8s.io")
        if (queue["metadata"].get("labels") or {}).get(MANAGED_BY) == "gpustack-operator"
    ]


def namespaces(names: Sequence[str]) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in names]
