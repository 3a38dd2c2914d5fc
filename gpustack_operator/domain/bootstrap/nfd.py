"""Node Feature Discovery as the worker installs it (docs/worker.md), and the CPU-info rule.

The layout follows NFD's own chart at the pinned version, with these values:
a single nfd-master honouring only NodeFeature objects of the system namespace, an
nfd-worker on every node (label sources cpu, pci and custom; PCI classes from
``GPUSTACK_PCI_CLASS_PREFIXES``; ``deviceLabelFields: [vendor]``, so the PCI label is
``feature.node.kubernetes.io/pci-<vendor>.present``), and nfd-gc. Topology updater,
Prometheus objects and TLS are left out. Every container runs non-root with a read-only
root filesystem and no capabilities.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import yaml

from gpustack_operator.domain.bootstrap.common import (
    COMPONENT_LABEL,
    INSTANCE_LABEL,
    JSON,
    NAME_LABEL,
    NODE_FEATURE_DISCOVERY,
    BootstrapSettings,
    labels,
    metadata,
    role,
    role_binding,
    rule,
    service_account,
)
from gpustack_operator.domain.bootstrap.crds import NFD_GROUP, NFD_VERSION_NAME
from gpustack_operator.domain.labels import (
    ACCELERATABLE_LABEL,
    ACCELERATABLE_PREFIX,
    CPU_ANNOTATION_ATTRIBUTES,
    CPU_ANNOTATION_PREFIX,
    FEATURE_PREFIX,
    GENERAL_PREFIX,
    SYSTEM_PREFIX,
)
from gpustack_operator.domain.manufacturers import Manufacturer

NFD_NAME: Final = "node-feature-discovery"
MASTER: Final = f"{NFD_NAME}-master"
WORKER: Final = f"{NFD_NAME}-worker"
GC: Final = f"{NFD_NAME}-gc"
# Cluster-scoped names carry the project prefix so they cannot collide with another NFD.
CLUSTER_MASTER: Final = f"gpustack-{MASTER}"
CLUSTER_GC: Final = f"gpustack-{GC}"
CONFIG_DIR: Final = "/etc/kubernetes/node-feature-discovery"
HTTP_PORT: Final = 8080

CPU_INFO_RULE: Final = "gpustack-cpu-info"
HAS_DEVICES_VAR: Final = "has-acceleratable-devices"
# Label namespaces the master may write besides NFD's own (docs/labels.md keys).
EXTRA_LABEL_NAMESPACES: Final = tuple(
    p.rstrip("/") for p in (SYSTEM_PREFIX, FEATURE_PREFIX, GENERAL_PREFIX, ACCELERATABLE_PREFIX)
)
WORKER_LABEL_WHITELIST: Final = r"^(pci-|cpu-model\.|acceleratable)"


def _labels(name: str) -> dict[str, str]:
    return labels(name, NODE_FEATURE_DISCOVERY, instance=NFD_NAME)


def _selector(name: str) -> dict[str, str]:
    """Selector labels: stable across upgrades (a Deployment's selector is immutable)."""
    full = _labels(name)
    return {k: full[k] for k in (NAME_LABEL, INSTANCE_LABEL, COMPONENT_LABEL)}


def _security_context() -> JSON:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": 65534,
        "runAsGroup": 65534,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _pod_security_context() -> JSON:
    return {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def _probe(path: str) -> JSON:
    return {
        "httpGet": {"path": path, "port": "http"},
        "initialDelaySeconds": 5,
        "periodSeconds": 10,
        "timeoutSeconds": 3,
        "failureThreshold": 3,
    }


def _container(
    name: str,
    image: str,
    command: str,
    args: list[str],
    *,
    resources: JSON,
    env: list[JSON] | None = None,
    mounts: list[JSON] | None = None,
) -> JSON:
    container: JSON = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [command],
        "args": args,
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "livenessProbe": _probe("/healthz"),
        "readinessProbe": _probe("/healthz"),
        "resources": resources,
        "securityContext": _security_context(),
    }
    if env:
        container["env"] = env
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _field_env(name: str, path: str) -> JSON:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def _resources(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> JSON:
    return {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": cpu_limit, "memory": memory_limit},
    }


def _pod_template(name: str, account: str, containers: list[JSON], **spec: object) -> JSON:
    return {
        "metadata": {"labels": _labels(name)},
        "spec": {
            "serviceAccountName": account,
            "securityContext": _pod_security_context(),
            "tolerations": [{"operator": "Exists"}],
            "containers": containers,
            **spec,
        },
    }


def master_config(namespace: str) -> str:
    """``nfd-master.conf``: honour NodeFeatures of the system namespace only (docs/worker.md)."""
    config = {
        "extraLabelNs": list(EXTRA_LABEL_NAMESPACES),
        "restrictions": {
            "nodeFeatureNamespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": namespace},
            },
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


def worker_config(pci_class_prefixes: tuple[str, ...]) -> str:
    """``nfd-worker.conf``: label sources and the PCI classes that get a vendor label."""
    config = {
        "core": {
            "labelSources": ["cpu", "pci", "custom"],
            "labelWhiteList": WORKER_LABEL_WHITELIST,
        },
        "sources": {
            "pci": {
                "deviceClassWhitelist": list(pci_class_prefixes),
                "deviceLabelFields": ["vendor"],
            },
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


def _config_map(name: str, key: str, text: str, namespace: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(name, _labels(name.removesuffix("-conf")), namespace),
        "data": {key: text},
    }


def _config_volume(config_map: str, key: str) -> JSON:
    return {
        "name": "config",
        "configMap": {"name": config_map, "items": [{"key": key, "path": key}]},
    }


def render_nfd_rbac(settings: BootstrapSettings) -> list[JSON]:
    """NFD's ServiceAccounts and roles, as its own chart grants them. Shipped statically in
    deploy/components/node-feature-discovery: the worker checks they exist, never writes them
    (docs/security.md, "No escalation path")."""
    ns = settings.namespace
    master_rules = [
        rule([""], ["nodes"], ["get", "list", "watch", "patch", "update"]),
        rule([""], ["nodes/status"], ["patch", "update"]),
        rule(
            [NFD_GROUP],
            ["nodefeatures", "nodefeaturerules", "nodefeaturegroups"],
            ["get", "list", "watch"],
        ),
        rule([NFD_GROUP], ["nodefeaturegroups/status"], ["patch", "update"]),
    ]
    worker_rules = [rule([NFD_GROUP], ["nodefeatures"], ["create", "get", "update"])]
    gc_rules = [
        rule([""], ["nodes"], ["list", "watch"]),
        rule([NFD_GROUP], ["nodefeatures"], ["delete", "list"]),
    ]
    return [
        service_account(MASTER, _labels(MASTER), ns),
        service_account(WORKER, _labels(WORKER), ns),
        service_account(GC, _labels(GC), ns),
        role("ClusterRole", CLUSTER_MASTER, _labels(MASTER), master_rules, ns),
        role_binding(
            "ClusterRoleBinding",
            CLUSTER_MASTER,
            _labels(MASTER),
            "ClusterRole",
            CLUSTER_MASTER,
            MASTER,
            ns,
        ),
        role("Role", WORKER, _labels(WORKER), worker_rules, ns),
        role_binding("RoleBinding", WORKER, _labels(WORKER), "Role", WORKER, WORKER, ns),
        role("ClusterRole", CLUSTER_GC, _labels(GC), gc_rules, ns),
        role_binding(
            "ClusterRoleBinding", CLUSTER_GC, _labels(GC), "ClusterRole", CLUSTER_GC, GC, ns
        ),
    ]


def _master(settings: BootstrapSettings) -> JSON:
    ns = settings.namespace
    container = _container(
        "master",
        settings.nfd_image,
        "nfd-master",
        [f"-config={CONFIG_DIR}/nfd-master.conf", f"-port={HTTP_PORT}"],
        resources=_resources("100m", "128Mi", "500m", "512Mi"),
        env=[
            _field_env("NODE_NAME", "spec.nodeName"),
            _field_env("POD_NAMESPACE", "metadata.namespace"),
        ],
        mounts=[{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    )
    volumes = [_config_volume(f"{MASTER}-conf", "nfd-master.conf")]
    return _deployment(MASTER, container, ns, volumes=volumes)


def _deployment(name: str, container: JSON, namespace: str, **pod_spec: object) -> JSON:
    """A one-replica Deployment of *container* running as the service account *name*."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name, _labels(name), namespace),
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": _selector(name)},
            "template": _pod_template(name, name, [container], **pod_spec),
        },
    }


def _host_volume(name: str, path: str, kind: str = "") -> JSON:
    host: JSON = {"path": path}
    if kind:
        host["type"] = kind
    return {"name": name, "hostPath": host}


def _worker(settings: BootstrapSettings) -> JSON:
    ns = settings.namespace
    host_paths = [
        ("host-boot", "/boot", "/host-boot", ""),
        ("host-os-release", "/etc/os-release", "/host-etc/os-release", "File"),
        ("host-sys", "/sys", "/host-sys", "Directory"),
        ("host-usr-lib", "/usr/lib", "/host-usr/lib", ""),
        ("host-lib", "/lib", "/host-lib", ""),
        ("source-d", f"{CONFIG_DIR}/source.d/", f"{CONFIG_DIR}/source.d/", "DirectoryOrCreate"),
        (
            "features-d",
            f"{CONFIG_DIR}/features.d/",
            f"{CONFIG_DIR}/features.d/",
            "DirectoryOrCreate",
        ),
    ]
    mounts = [{"name": n, "mountPath": m, "readOnly": True} for n, _, m, _ in host_paths]
    mounts.append({"name": "config", "mountPath": CONFIG_DIR, "readOnly": True})
    volumes = [_host_volume(n, p, k) for n, p, _, k in host_paths]
    volumes.append(_config_volume(f"{WORKER}-conf", "nfd-worker.conf"))
    container = _container(
        "worker",
        settings.nfd_image,
        "nfd-worker",
        [f"-config={CONFIG_DIR}/nfd-worker.conf", f"-port={HTTP_PORT}"],
        resources=_resources("5m", "64Mi", "200m", "256Mi"),
        env=[
            _field_env("NODE_NAME", "spec.nodeName"),
            _field_env("POD_NAME", "metadata.name"),
            _field_env("POD_UID", "metadata.uid"),
            _field_env("POD_NAMESPACE", "metadata.namespace"),
        ],
        mounts=mounts,
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(WORKER, _labels(WORKER), ns),
        "spec": {
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": _selector(WORKER)},
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
            },
            "template": _pod_template(
                WORKER, WORKER, [container], dnsPolicy="ClusterFirst", volumes=volumes
            ),
        },
    }


def _gc(settings: BootstrapSettings) -> JSON:
    ns = settings.namespace
    container = _container(
        "gc",
        settings.nfd_image,
        "nfd-gc",
        ["-gc-interval=1h", f"-port={HTTP_PORT}"],
        resources=_resources("10m", "64Mi", "200m", "256Mi"),
        env=[_field_env("NODE_NAME", "spec.nodeName")],
    )
    return _deployment(GC, container, ns)


def render_nfd(settings: BootstrapSettings) -> list[JSON]:
    """What the worker installs of NFD: its configuration and workloads. Its CRDs (``crds``)
    and RBAC (:func:`render_nfd_rbac`) are prerequisites shipped with deploy/."""
    ns = settings.namespace
    return [
        _config_map(f"{MASTER}-conf", "nfd-master.conf", master_config(ns), ns),
        _config_map(
            f"{WORKER}-conf", "nfd-worker.conf", worker_config(settings.pci_class_prefixes), ns
        ),
        _master(settings),
        _worker(settings),
        _gc(settings),
    ]


def render_cpu_info_rule(
    pci_class_prefixes: tuple[str, ...], manufacturers: Mapping[str, Manufacturer]
) -> JSON:
    """The NodeFeatureRule ``gpustack-cpu-info`` (docs/worker.md), cluster-scoped.

    Rule 1 copies the CPU model into ``feature.gpustack.ai/cpu-*`` annotations; rule 2 sets
    a variable when a PCI device of an accelerator class and a known vendor is present;
    rule 3 labels nodes without one ``feature.gpustack.ai/acceleratable=false``.
    """
    annotations = {
        f"{CPU_ANNOTATION_PREFIX}{attr}": f"@cpu.model.{attr.replace('-', '_')}"
        for attr in CPU_ANNOTATION_ATTRIBUTES
    }
    vendors = sorted({m.pci_vendor_id for m in manufacturers.values()})
    return {
        "apiVersion": f"{NFD_GROUP}/{NFD_VERSION_NAME}",
        "kind": "NodeFeatureRule",
        "metadata": metadata(CPU_INFO_RULE, labels(CPU_INFO_RULE, NODE_FEATURE_DISCOVERY)),
        "spec": {
            "rules": [
                {
                    "name": "attached cpu info to annotations",
                    "annotations": annotations,
                    "matchFeatures": [
                        {
                            "feature": "cpu.model",
                            "matchExpressions": {"vendor_id": {"op": "Exists"}},
                        }
                    ],
                },
                {
                    "name": "detect whether the node has acceleratable devices",
                    "vars": {HAS_DEVICES_VAR: "true"},
                    "matchFeatures": [
                        {
                            "feature": "pci.device",
                            "matchExpressions": {
                                "class": {
                                    "op": "InRegexp",
                                    "value": [f"^{p}" for p in pci_class_prefixes],
                                },
                                "vendor": {"op": "In", "value": vendors},
                            },
                        }
                    ],
                },
                {
                    "name": "identify the node without any acceleratable device",
                    "labels": {ACCELERATABLE_LABEL: "false"},
                    "matchFeatures": [
                        {
                            "feature": "rule.matched",
                            "matchExpressions": {HAS_DEVICES_VAR: {"op": "DoesNotExist"}},
                        }
                    ],
                },
            ]
        },
    }
