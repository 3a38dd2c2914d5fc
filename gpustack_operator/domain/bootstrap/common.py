"""Names, labels and settings shared by the bootstrap renderers (docs/worker.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpustack_operator.domain.comparison import Compare, ObjectComparison
from gpustack_operator.domain.labels import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from gpustack_operator.domain.manufacturers import (
    DEFAULT_PCI_CLASS_PREFIXES,
    Manufacturer,
    default_manufacturers,
)
from gpustack_operator.domain.node.nodefeature import DEFAULT_SYSTEM_NAMESPACE

JSON = dict[str, Any]

# The applications `--disable-applications` can name (docs/worker.md; Kueue and the CSI drivers
# are not installed by this project, so they are not accepted).
NODE_FEATURE_DISCOVERY: Final = "node-feature-discovery"
DEVICE_MANAGER: Final = "device-manager"
APPLICATIONS: Final = (NODE_FEATURE_DISCOVERY, DEVICE_MANAGER)

# NFD is pinned to a tested version (docs/worker.md); `--nfd-image` overrides it.
NFD_VERSION: Final = "v0.18.3"
DEFAULT_NFD_IMAGE: Final = f"registry.k8s.io/nfd/node-feature-discovery:{NFD_VERSION}"

PART_OF_LABEL: Final = "app.kubernetes.io/part-of"
NAME_LABEL: Final = "app.kubernetes.io/name"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
INSTANCE_LABEL: Final = "app.kubernetes.io/instance"
VERSION_LABEL: Final = "app.kubernetes.io/version"
PART_OF_VALUE: Final = "gpustack-operator"
MANAGED_SELECTOR: Final = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"

MANIFEST_COMPARISON: Final = ObjectComparison({"data": Compare.EXACT}, others=Compare.CONTAINS)
"""How the bootstrap's manifests are compared (docs/worker.md, "Writes and ownership"): the
API server defaults much of a workload's spec, so the rest of the body may hold more than
rendered; a ConfigMap's data is the bootstrap's whole."""

RBAC_API_VERSION: Final = "rbac.authorization.k8s.io/v1"


@dataclass(frozen=True)
class BootstrapSettings:
    """What the renderers need to know about the installation; every field has a default."""

    namespace: str = DEFAULT_SYSTEM_NAMESPACE
    """The system namespace everything namespaced is installed in."""
    nfd_image: str = DEFAULT_NFD_IMAGE
    pci_class_prefixes: tuple[str, ...] = DEFAULT_PCI_CLASS_PREFIXES
    manufacturers: Mapping[str, Manufacturer] = field(default_factory=default_manufacturers)
    """The manufacturers a device-manager DaemonSet is rendered for, by name."""
    image_pull_policy: str = "IfNotPresent"
    """Pull policy of the device-manager containers (the worker's own, when known)."""
    propagated_env: Mapping[str, str] = field(default_factory=dict)
    """``GPUSTACK_*`` variables of the worker copied into every agent (docs/device-manager.md)."""
    coexistence: bool = True
    """Keep a vendor's agent off nodes whose devices that vendor's own stack already labels
    (docs/devices.md, "Coexistence")."""


def parse_disabled_applications(values: Iterable[str]) -> frozenset[str]:
    """``--disable-applications`` values (comma lists, repeatable; ``*`` = all) as names.

    Raises ``ValueError`` naming the unknown application and the accepted ones.
    """
    names: set[str] = set()
    for value in values:
        for part in value.split(","):
            item = part.strip()
            if not item:
                continue
            if item == "*":
                names.update(APPLICATIONS)
            elif item in APPLICATIONS:
                names.add(item)
            else:
                raise ValueError(
                    f"unknown application {item!r} in --disable-applications: use "
                    f"{', '.join(APPLICATIONS)} or * (Kueue is a prerequisite, never installed)"
                )
    return frozenset(names)


def labels(name: str, component: str, *, instance: str | None = None) -> dict[str, str]:
    """The recommended labels plus the ownership mark (docs/worker.md) of a bootstrap object."""
    out = {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        PART_OF_LABEL: PART_OF_VALUE,
        NAME_LABEL: name,
        COMPONENT_LABEL: component,
    }
    if instance:
        out[INSTANCE_LABEL] = instance
    return out


def metadata(name: str, component_labels: Mapping[str, str], namespace: str | None = None) -> JSON:
    meta: JSON = {"name": name, "labels": dict(component_labels)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def rule(groups: list[str], resources: list[str], verbs: list[str]) -> JSON:
    """One RBAC PolicyRule; verbs sorted so rendered roles diff cleanly."""
    return {"apiGroups": groups, "resources": resources, "verbs": sorted(verbs)}


def service_account(name: str, meta_labels: Mapping[str, str], namespace: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(name, meta_labels, namespace),
        "automountServiceAccountToken": True,
    }


def role_binding(
    kind: str,
    name: str,
    meta_labels: Mapping[str, str],
    role_kind: str,
    role_name: str,
    account: str,
    namespace: str,
) -> JSON:
    """A RoleBinding (namespaced) or ClusterRoleBinding granting *role_name* to *account*."""
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": kind,
        "metadata": metadata(name, meta_labels, namespace if kind == "RoleBinding" else None),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }


def role(kind: str, name: str, meta_labels: Mapping[str, str], rules: list[JSON], ns: str) -> JSON:
    """A Role (in *ns*) or ClusterRole with *rules*."""
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": kind,
        "metadata": metadata(name, meta_labels, ns if kind == "Role" else None),
        "rules": rules,
    }
