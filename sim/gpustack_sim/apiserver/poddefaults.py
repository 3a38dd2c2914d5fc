"""What a real API server fills in on a new Pod: the API's defaults and three admission plugins
(docs/simulator.md, "Pod defaults").

Clients read these back and rely on them (kr8s appends to ``spec.tolerations``, which a real
server has always filled in), so the simulator sets them on create as kube-apiserver does:

- the defaulting of ``core/v1`` (``pkg/apis/core/v1/defaults.go``): the pod's restart and DNS
  policy, grace period, scheduler, security context and service links; each container's
  termination message path and policy, image pull policy and port protocol;
- ``ServiceAccount`` admission: ``serviceAccountName: default`` (mirrored to the deprecated
  ``serviceAccount``) and, unless ``automountServiceAccountToken`` is false, the projected
  ``kube-api-access-<suffix>`` volume mounted read-only in every container at
  ``/var/run/secrets/kubernetes.io/serviceaccount``;
- ``Priority`` admission: ``priority`` from the two built-in priority classes (0 without one)
  and ``preemptionPolicy: PreemptLowerPriority``;
- ``DefaultTolerationSeconds`` admission: tolerations of ``node.kubernetes.io/not-ready`` and
  ``node.kubernetes.io/unreachable`` (``NoExecute``, 300 s) unless the pod has its own.
"""

from __future__ import annotations

import secrets
from collections.abc import MutableMapping
from typing import Any, Final

__all__ = ["SERVICE_ACCOUNT_MOUNT", "default_new_pod"]

SERVICE_ACCOUNT_MOUNT: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_TOLERATION_SECONDS: Final = 300
_TOLERATED_TAINTS: Final = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# The priority classes every cluster has (scheduling.k8s.io, "system-*-critical").
_SYSTEM_PRIORITIES: Final = {
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}
_POD_SPEC_DEFAULTS: Final = {
    "restartPolicy": "Always",
    "dnsPolicy": "ClusterFirst",
    "terminationGracePeriodSeconds": 30,
    "schedulerName": "default-scheduler",
    "enableServiceLinks": True,
}
_CONTAINER_DEFAULTS: Final = {
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
}
_ROOT_CA: Final = "kube-root-ca.crt"


def default_new_pod(pod: dict[str, Any]) -> None:
    """Fill in *pod* (in place) as the API server's defaulting and admission do on create."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for key, value in _POD_SPEC_DEFAULTS.items():
        spec.setdefault(key, value)
    spec.setdefault("securityContext", {})
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            if isinstance(container, dict):
                _default_container(container)
    _admit_service_account(spec)
    _admit_priority(spec)
    _admit_default_tolerations(spec)


def _default_container(container: MutableMapping[str, Any]) -> None:
    for key, value in _CONTAINER_DEFAULTS.items():
        container.setdefault(key, value)
    container.setdefault("imagePullPolicy", image_pull_policy(str(container.get("image") or "")))
    container.setdefault("resources", {})
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def image_pull_policy(image: str) -> str:
    """``Always`` for an image without a tag or tagged ``latest``, else ``IfNotPresent``."""
    if "@" in image:
        return "IfNotPresent"
    name = image.rsplit("/", 1)[-1]
    tag = name.partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _admit_service_account(spec: dict[str, Any]) -> None:
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = spec["serviceAccount"] = account
    if spec.get("automountServiceAccountToken") is False:
        return
    containers = [
        c
        for field in ("initContainers", "containers")
        for c in spec.get(field) or []
        if isinstance(c, dict)
    ]
    if any(
        m.get("mountPath") == SERVICE_ACCOUNT_MOUNT
        for c in containers
        for m in c.get("volumeMounts") or []
        if isinstance(m, dict)
    ):
        return
    volume = f"kube-api-access-{secrets.token_hex(3)[:5]}"
    spec.setdefault("volumes", []).append(_token_volume(volume))
    for container in containers:
        container.setdefault("volumeMounts", []).append(
            {"name": volume, "readOnly": True, "mountPath": SERVICE_ACCOUNT_MOUNT}
        )


def _token_volume(name: str) -> dict[str, Any]:
    """The projected volume: a bound token, the cluster's CA and the pod's namespace."""
    return {
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": _ROOT_CA, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": "metadata.namespace",
                                },
                            }
                        ]
                    }
                },
            ],
        },
    }


def _admit_priority(spec: dict[str, Any]) -> None:
    if "priority" not in spec:
        spec["priority"] = _SYSTEM_PRIORITIES.get(str(spec.get("priorityClassName") or ""), 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


def _admit_default_tolerations(spec: dict[str, Any]) -> None:
    tolerations = spec.setdefault("tolerations", [])
    for taint in _TOLERATED_TAINTS:
        if any(_tolerates(t, taint) for t in tolerations if isinstance(t, dict)):
            continue
        tolerations.append(
            {
                "key": taint,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
            }
        )


def _tolerates(toleration: dict[str, Any], taint: str) -> bool:
    """True when *toleration* already covers the NoExecute *taint* (as the plugin checks)."""
    if toleration.get("effect") not in (None, "", "NoExecute"):
        return False
    key = toleration.get("key")
    return key == taint or (not key and toleration.get("operator") == "Exists")
