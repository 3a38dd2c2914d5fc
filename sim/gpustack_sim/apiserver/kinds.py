"""The kinds the simulated API server serves: built-in descriptors and CRD-registered ones.

Every other part of the simulator (storage, routing, discovery, OpenAPI, validation, tables)
looks kinds up here, so this module is the single source of what exists in the simulated
cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

KUBERNETES_VERSION = (1, 34, 0)
"""The Kubernetes release whose built-in kinds, schemas and ``/version`` the simulator serves."""


@dataclass(frozen=True)
class KindInfo:
    """One served (group, version, kind)."""

    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    has_status: bool = False
    # The openAPIV3Schema of a CRD version; None for built-in kinds (validated structurally).
    schema: Mapping[str, Any] | None = None
    # CRD additionalPrinterColumns, used for `kubectl get` tables.
    printer_columns: tuple[Mapping[str, Any], ...] = ()
    # True for the version a CRD stores; objects are kept once, whatever version wrote them.
    storage: bool = True
    # A CRD version's subresources.scale (specReplicasPath, statusReplicasPath, ...).
    scale: Mapping[str, Any] | None = None
    # Subresources besides status and scale that write through the kind's own shape
    # (a CertificateSigningRequest's ``approval``).
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """``plural.group`` as Kubernetes names it (``nodes``, ``leases.coordination.k8s.io``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


# The categories kube-apiserver gives its kinds (docs/simulator.md, "Built-in kinds"):
# "all" is what `kubectl get all` lists, "api-extensions" what extends the API.
_ALL_CATEGORY = frozenset(
    {
        "Pod",
        "Service",
        "ReplicationController",
        "Deployment",
        "ReplicaSet",
        "DaemonSet",
        "StatefulSet",
        "Job",
    }
)
_API_EXTENSIONS = frozenset(
    {
        "APIService",
        "CustomResourceDefinition",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)


def _categories(kind: str) -> tuple[str, ...]:
    if kind in _ALL_CATEGORY:
        return ("all",)
    return ("api-extensions",) if kind in _API_EXTENSIONS else ()


def _core(kind: str, plural: str, namespaced: bool, *short: str, status: bool = False) -> KindInfo:
    return KindInfo(
        "", "v1", kind, plural, kind.lower(), namespaced, short, _categories(kind), status
    )


def _grp(
    group: str,
    version: str,
    kind: str,
    plural: str,
    namespaced: bool,
    *short: str,
    status: bool = False,
    subresources: tuple[str, ...] = (),
) -> KindInfo:
    return KindInfo(
        group,
        version,
        kind,
        plural,
        kind.lower(),
        namespaced,
        short,
        _categories(kind),
        status,
        subresources=subresources,
    )


BUILTIN_KINDS: tuple[KindInfo, ...] = (
    _core("Namespace", "namespaces", False, "ns", status=True),
    _core("Node", "nodes", False, "no", status=True),
    _core("ConfigMap", "configmaps", True, "cm"),
    _core("Secret", "secrets", True),
    _core("ServiceAccount", "serviceaccounts", True, "sa"),
    _core("Service", "services", True, "svc", status=True),
    _core("Pod", "pods", True, "po", status=True),
    _core("Event", "events", True, "ev"),
    _core("ReplicationController", "replicationcontrollers", True, "rc", status=True),
    _grp("apps", "v1", "Deployment", "deployments", True, "deploy", status=True),
    _grp("apps", "v1", "ReplicaSet", "replicasets", True, "rs", status=True),
    _grp("apps", "v1", "DaemonSet", "daemonsets", True, "ds", status=True),
    _grp("apps", "v1", "StatefulSet", "statefulsets", True, "sts", status=True),
    _grp("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    _grp("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    _grp("rbac.authorization.k8s.io", "v1", "Role", "roles", True),
    _grp("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True),
    _grp("batch", "v1", "Job", "jobs", True, status=True),
    _grp("coordination.k8s.io", "v1", "Lease", "leases", True),
    _grp("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True, "pdb", status=True),
    _grp("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True, "netpol"),
    _grp("networking.k8s.io", "v1", "Ingress", "ingresses", True, "ing", status=True),
    _grp(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        False,
        "csr",
        status=True,
        subresources=("approval",),
    ),
    _grp("storage.k8s.io", "v1", "CSIStorageCapacity", "csistoragecapacities", True),
    _grp("apiregistration.k8s.io", "v1", "APIService", "apiservices", False, status=True),
    _grp("events.k8s.io", "v1", "Event", "events", True, "ev"),
    _grp("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", False),
    _grp("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", False),
    _grp(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        False,
        status=True,
    ),
    _grp(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        False,
    ),
    _grp(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        "crd",
        "crds",
        status=True,
    ),
)


def kinds_from_crd(crd: Mapping[str, Any]) -> list[KindInfo]:
    """The served versions of an ``apiextensions.k8s.io/v1`` CustomResourceDefinition."""
    if crd.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"not a CustomResourceDefinition: kind={crd.get('kind')!r}")
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
    if not (group and plural and kind):
        raise ValueError("a CRD needs spec.group, spec.names.plural and spec.names.kind")
    out: list[KindInfo] = []
    for ver in spec.get("versions") or []:
        if not ver.get("served", True):
            continue
        out.append(
            KindInfo(
                group=group,
                version=ver["name"],
                kind=kind,
                plural=plural,
                singular=names.get("singular") or kind.lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                has_status="status" in (ver.get("subresources") or {}),
                schema=(ver.get("schema") or {}).get("openAPIV3Schema"),
                printer_columns=tuple(ver.get("additionalPrinterColumns") or ()),
                storage=bool(ver.get("storage", False)),
                scale=(ver.get("subresources") or {}).get("scale"),
            )
        )
    return out


@dataclass
class KindRegistry:
    """What the simulated cluster serves, looked up by the ways requests name a kind."""

    _by_path: dict[tuple[str, str, str], KindInfo] = field(default_factory=dict)

    @classmethod
    def with_builtins(cls) -> KindRegistry:
        registry = cls()
        registry.register_all(BUILTIN_KINDS)
        return registry

    def register(self, info: KindInfo) -> None:
        self._by_path[(info.group, info.version, info.plural)] = info

    def register_all(self, infos: Iterable[KindInfo]) -> None:
        for info in infos:
            self.register(info)

    def unregister_group_resource(self, group: str, plural: str) -> None:
        for key in [k for k in self._by_path if k[0] == group and k[2] == plural]:
            del self._by_path[key]

    def lookup(self, group: str, version: str, plural: str) -> KindInfo | None:
        """The kind served at ``/api(s)/<group>/<version>/.../<plural>``."""
        return self._by_path.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> KindInfo | None:
        """The kind an object's ``apiVersion`` and ``kind`` name."""
        group, _, version = api_version.rpartition("/")
        for info in self._by_path.values():
            if info.group == group and info.version == version and info.kind == kind:
                return info
        return None

    def versions_of(self, group: str, plural: str) -> list[KindInfo]:
        """Every served version of one resource (objects are shared between them)."""
        return [i for (g, _, p), i in self._by_path.items() if g == group and p == plural]

    def __iter__(self) -> Iterator[KindInfo]:
        return iter(list(self._by_path.values()))
