"""The device-manager DaemonSets the worker installs, one per manufacturer (docs/device-manager.md).

Deliberate choices, for least privilege (docs/security.md):

- the agent's ServiceAccount is bound to its own roles, not ``cluster-admin``: read Nodes
  (RBAC cannot restrict a DaemonSet's pods to "their own" Node), and write NodeFeatures and
  Events in the system namespace only;
- the agent has no device plugin, so the kubelet device-plugin and CDI host paths are not
  mounted; ``/sys`` and the vendor library directories are mounted read-only;
- vendors with a container runtime of their own (NVIDIA, MThreads) get their device nodes and
  management library from it through their RuntimeClass: no ``/dev`` mount, not privileged,
  every capability dropped, no privilege escalation, uid 0 only to own root-owned device
  nodes whose mode the node chooses. The other vendors' agents stay privileged (the only way
  into the device cgroup without a device plugin) with the host's ``/dev`` mounted
  read-only: device nodes still open read-write on a read-only mount (docs/security.md,
  "The device manager's DaemonSets");
- every container keeps a read-only root filesystem and ``RuntimeDefault`` seccomp;
- no Service: the pods carry ``prometheus.io/scrape`` annotations for metrics discovery.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from gpustack_operator.domain.bootstrap.common import (
    DEVICE_MANAGER,
    INSTANCE_LABEL,
    JSON,
    BootstrapSettings,
    labels,
    metadata,
    role,
    role_binding,
    rule,
    service_account,
)
from gpustack_operator.domain.bootstrap.crds import NFD_GROUP
from gpustack_operator.domain.manufacturers import Manufacturer

NAME: Final = "gpustack-operator-device-manager"
ACCOUNT: Final = NAME
PRIORITY_CLASS: Final = "system-cluster-critical"
HEALTH_PORT: Final = 8081
METRICS_PORT: Final = 8080
# Vendors whose container runtime injects the management library and device nodes through a
# RuntimeClass of their own (docs/device-manager.md).
RUNTIME_CLASS_VENDORS: Final = ("mthreads", "nvidia")
# Read-only host directories holding each vendor's management library (docs/device-manager.md).
VENDOR_HOST_PATHS: Final[Mapping[str, tuple[str, ...]]] = {
    "amd": ("/opt/rocm",),
    "ascend": ("/usr/local/dcmi", "/usr/local/Ascend"),
    "cambricon": ("/usr/local/neuware",),
    "hygon": ("/opt/hyhal", "/opt/dtk"),
    "iluvatar": ("/usr/local/corex",),
    "metax": ("/opt/mxdriver", "/opt/maca"),
    "thead": ("/usr/local/PPU_SDK",),
}
# Environment the NVIDIA and MThreads runtimes read to expose every device to the agent.
_RUNTIME_ENV: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    "nvidia": (("NVIDIA_VISIBLE_DEVICES", "all"), ("NVIDIA_DRIVER_CAPABILITIES", "utility")),
    "mthreads": (("MTHREADS_VISIBLE_DEVICES", "all"), ("MTHREADS_DRIVER_CAPABILITIES", "utility")),
}
PCI_LABEL_TEMPLATE: Final = "feature.node.kubernetes.io/pci-{vendor}.present"
# docs/devices.md, "Coexistence": Node labels that show another stack already describes a
# vendor's devices; with coexistence on, the vendor's agent is not scheduled where any is set.
DESCRIBED_BY_OTHERS: Final[Mapping[str, tuple[str, ...]]] = {
    "nvidia": ("nvidia.com/gpu.product", "nvidia.com/mig.strategy"),
    "amd": ("amd.com/gpu.product-name",),
}


def coexistence_affinity(manufacturer: str) -> JSON | None:
    """Node affinity keeping the agent of *manufacturer* off nodes another source describes
    (GPU Feature Discovery, the AMD node labeller); ``None`` for vendors without one."""
    keys = DESCRIBED_BY_OTHERS.get(manufacturer)
    if not keys:
        return None
    expressions = [{"key": key, "operator": "DoesNotExist"} for key in keys]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def daemonset_name(manufacturer: str) -> str:
    return f"{NAME}-{manufacturer}"


def _labels(instance: str | None = None) -> dict[str, str]:
    return labels(NAME, DEVICE_MANAGER, instance=instance)


def render_device_manager_rbac(settings: BootstrapSettings) -> list[JSON]:
    """ServiceAccount and the agent's roles: exactly the requests ``serve`` makes. Shipped
    statically in deploy/base: the worker checks they exist, never writes them."""
    ns = settings.namespace
    meta = _labels()
    node_rules = [rule([""], ["nodes"], ["list", "watch"])]
    namespaced_rules = [
        rule([NFD_GROUP], ["nodefeatures"], ["list", "watch", "create", "patch"]),
        rule([""], ["events"], ["create", "patch"]),
    ]
    return [
        service_account(ACCOUNT, meta, ns),
        role("ClusterRole", NAME, meta, node_rules, ns),
        role_binding("ClusterRoleBinding", NAME, meta, "ClusterRole", NAME, ACCOUNT, ns),
        role("Role", NAME, meta, namespaced_rules, ns),
        role_binding("RoleBinding", NAME, meta, "Role", NAME, ACCOUNT, ns),
    ]


def runtime_class_name(manufacturer: Manufacturer) -> str | None:
    """The RuntimeClass the agent of *manufacturer* runs with, if its vendor needs one."""
    if manufacturer.name not in RUNTIME_CLASS_VENDORS:
        return None
    return manufacturer.runtime_class


def render_runtime_classes(manufacturers: Iterable[Manufacturer]) -> list[JSON]:
    """RuntimeClasses (``handler`` = name) the agents need; created only when missing."""
    out: list[JSON] = []
    for name in sorted({n for m in manufacturers if (n := runtime_class_name(m))}):
        out.append(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": metadata(name, _labels()),
                "handler": name,
            }
        )
    return out


def _field_env(name: str, path: str) -> JSON:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def _env(manufacturer: Manufacturer, propagated: Mapping[str, str]) -> list[JSON]:
    env = [
        _field_env("KUBERNETES_NODE_NAME", "spec.nodeName"),
        _field_env("KUBERNETES_POD_NAME", "metadata.name"),
        _field_env("KUBERNETES_POD_NAMESPACE", "metadata.namespace"),
        _field_env("KUBERNETES_POD_IP", "status.podIP"),
        {"name": "KUBERNETES_SERVICE_NAME", "value": NAME},
    ]
    env += [{"name": k, "value": v} for k, v in _RUNTIME_ENV.get(manufacturer.name, ())]
    env += [{"name": k, "value": propagated[k]} for k in sorted(propagated)]
    return env


def _volumes(manufacturer: Manufacturer) -> tuple[list[JSON], list[JSON]]:
    host = [("host-sys", "/sys", "Directory", True)]
    if runtime_class_name(manufacturer) is None:  # else the vendor runtime injects the nodes
        host.insert(0, ("host-dev", "/dev", "Directory", True))
    for index, path in enumerate(VENDOR_HOST_PATHS.get(manufacturer.name, ())):
        host.append((f"vendor-{index}", path, "", True))
    volumes: list[JSON] = []
    mounts: list[JSON] = []
    for name, path, kind, read_only in host:
        source: JSON = {"path": path}
        if kind:
            source["type"] = kind
        volumes.append({"name": name, "hostPath": source})
        mounts.append({"name": name, "mountPath": path, "readOnly": read_only})
    volumes.append({"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    return volumes, mounts


def _probe(path: str, failure_threshold: int) -> JSON:
    return {
        "httpGet": {"path": path, "port": "health"},
        "periodSeconds": 10,
        "timeoutSeconds": 3,
        "failureThreshold": failure_threshold,
    }


def _security_context(manufacturer: Manufacturer) -> JSON:
    """The least each vendor's detection needs (module docstring; docs/security.md)."""
    base: JSON = {"readOnlyRootFilesystem": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if runtime_class_name(manufacturer) is None:
        return {"privileged": True, "runAsUser": 0, **base}
    return {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsUser": 0,
        **base,
    }


def _daemonset(settings: BootstrapSettings, manufacturer: Manufacturer, image: str) -> JSON:
    instance = daemonset_name(manufacturer.name)
    volumes, mounts = _volumes(manufacturer)
    container: JSON = {
        "name": "main",
        "image": image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": ["device-manager", "serve", f"--manufacturer={manufacturer.name}"],
        "env": _env(manufacturer, settings.propagated_env),
        "ports": [
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
            {"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
        ],
        "startupProbe": _probe("/readyz", 30),
        "readinessProbe": _probe("/readyz", 3),
        "livenessProbe": _probe("/healthz", 3),
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        },
        "securityContext": _security_context(manufacturer),
        "volumeMounts": mounts,
    }
    pod_spec: JSON = {
        "serviceAccountName": ACCOUNT,
        "priorityClassName": PRIORITY_CLASS,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "tolerations": [{"operator": "Exists"}],
        "nodeSelector": {PCI_LABEL_TEMPLATE.format(vendor=manufacturer.pci_vendor_id): "true"},
        "containers": [container],
        "volumes": volumes,
    }
    affinity = coexistence_affinity(manufacturer.name) if settings.coexistence else None
    if affinity is not None:
        pod_spec["affinity"] = affinity
    runtime_class = runtime_class_name(manufacturer)
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(instance, _labels(instance), settings.namespace),
        "spec": {
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": {INSTANCE_LABEL: instance, **_selector_base()}},
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "template": {
                "metadata": {
                    "labels": _labels(instance),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(METRICS_PORT),
                    },
                },
                "spec": pod_spec,
            },
        },
    }


def _selector_base() -> dict[str, str]:
    full = _labels()
    return {
        k: full[k]
        for k in (
            "app.kubernetes.io/part-of",
            "app.kubernetes.io/component",
            "app.kubernetes.io/name",
        )
    }


def render_device_manager(
    settings: BootstrapSettings, manufacturers: Iterable[str], image: str
) -> list[JSON]:
    """One DaemonSet ``gpustack-operator-device-manager-<mfr>`` per manufacturer (its RBAC is
    a prerequisite: :func:`render_device_manager_rbac`).

    *manufacturers* are names from ``settings.manufacturers`` (an unknown name raises
    ``KeyError``); *image* is the worker's own image or ``--device-manager-image``.
    RuntimeClasses are rendered separately (:func:`render_runtime_classes`) because they
    are created only when missing.
    """
    chosen = [settings.manufacturers[name] for name in sorted(set(manufacturers))]
    # A label-only manufacturer has no detector, so no agent (docs/devices.md, "Managed
    # clouds and label-only accelerators").
    return [_daemonset(settings, m, image) for m in chosen if m.agent]
