"""Several real control planes at once, for MultiKueue: a manager and its member clusters.

Each plane is a whole :class:`~tests.realcluster.controlplane.ControlPlane` (its own etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and Kueue v0.19.2) on loopback; they
start in threads side by side, so three cost about what the slowest one does. The manager's
Kueue runs with MultiKueue's settings (:data:`MANAGER_KUEUE_CONFIGURATION`); each member
holds the shipped deploy/components/multikueue-member, whose ServiceAccount token Kueue uses
(:func:`member_kubeconfig`); the product's ``worker-gateway --multikueue-manager``
(:func:`multikueue_gateway`) writes the manager's objects; the members' pools are read as the
gateway reads them (:func:`member_pools`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from gpustack_operator.gateway.pools import pool_entry
from tests.realcluster.cluster import MANAGED_BY, get_all
from tests.realcluster.controlplane import (
    DEFAULT_KUEUE_CONFIGURATION,
    REPO,
    Binaries,
    ControlPlane,
    Process,
    free_port,
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

MEMBER_COMPONENT = REPO / "deploy" / "components" / "multikueue-member"
"""The member side the product ships: a ServiceAccount, its ClusterRole and a long-lived token."""
MEMBER_ACCOUNT = "gpustack-multikueue-member"
MEMBER_NAMESPACE = "gpustack-system"
MEMBER_TOKEN_SECRET = f"{MEMBER_ACCOUNT}-token"


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
                notes = "".join(f" ({note})" for note in getattr(exc, "__notes__", ()))
                failures.append(f"{name}: {exc}{notes}")
    try:
        if failures:
            raise RuntimeError("a control plane did not start: " + "; ".join(failures))
        yield planes
    except BaseException as failure:
        # What failed first is the error to read; a failed stop after it is added to it.
        for problem in _stop_each(planes):
            failure.add_note(f"stopping the control planes: {problem}")
        raise
    problems = _stop_each(planes)
    if problems:
        raise RuntimeError("stopping the control planes: " + "; ".join(problems))


def _stop_each(planes: Mapping[str, ControlPlane]) -> list[str]:
    """Stop every plane, even after one fails to stop; what failed, by plane."""
    problems = []
    for name, plane in planes.items():
        try:
            plane.stop()
        except Exception as exc:
            problems.append(f"{name}: {exc}")
    return problems


def member_kubeconfig(plane: ControlPlane) -> str:
    """A kubeconfig Kueue's MultiKueue accepts for *plane*, from the shipped
    deploy/components/multikueue-member: the component applied as a member's overlay applies
    it, then its ServiceAccount's long-lived token with the plane's CA embedded (Kueue v0.19.2
    refuses CA file paths, token files and insecure TLS: ``validateKubeconfig`` in
    ``pkg/controller/admissionchecks/multikueue/multikueuecluster.go``)."""
    documents = [d for d in yaml.safe_load_all((MEMBER_COMPONENT / "member.yaml").read_text()) if d]
    plane.apply(namespaces([MEMBER_NAMESPACE]))
    plane.apply(documents)
    token = ""

    def filled() -> bool:
        nonlocal token
        secret = json.loads(
            plane.kubectl_run(
                "get", "secret", MEMBER_TOKEN_SECRET, "-n", MEMBER_NAMESPACE, "-o", "json"
            )
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


def multikueue_gateway(
    manager: ControlPlane,
    members: Mapping[str, ControlPlane],
    member_kubeconfigs: Mapping[str, Path],
    log: Path,
) -> Process:
    """The product's ``gpustack-operator worker-gateway --multikueue-manager``, reading each
    member with the plane's administrator kubeconfig and handing Kueue *member_kubeconfigs*
    (the component's token); one pass a second, so the tier waits little."""
    argv = [sys.executable, "-m", "gpustack_operator", "worker-gateway"]
    argv += ["--bind-address", "127.0.0.1", "--port", str(free_port())]
    argv += ["--probe-interval", "1"]
    for name, plane in members.items():
        argv += ["--cluster", f"{name}={plane.admin_kubeconfig}"]
        argv += ["--multikueue-member-kubeconfig", f"{name}={member_kubeconfigs[name]}"]
    argv += ["--multikueue-manager", str(manager.admin_kubeconfig)]
    argv += ["--multikueue-sync-interval", "1"]
    process = Process("worker-gateway", argv, log, ())
    process.start()
    return process


def member_pools(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    """The operator's pools on *plane* as the gateway reads them (one per ClusterQueue)."""
    return [
        pool_entry(name, queue)
        for queue in get_all(plane, "clusterqueues.kueue.x-k8s.io")
        if (queue["metadata"].get("labels") or {}).get(MANAGED_BY) == "gpustack-operator"
    ]


def namespaces(names: Sequence[str]) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in names]
