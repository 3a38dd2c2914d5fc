"""Resource descriptors: what the client needs to address a kind without discovery.

A :class:`Resource` names one served (group, version, kind) and its plural, which is all that is
needed to build every URL of the REST API. Descriptors for built-in kinds live here; those of
custom resources (Kueue, NFD) are declared next to the code that uses them, so the runtime stays
free of any product knowledge.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "CONFIGMAPS",
    "CRDS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "ROLES",
    "ROLE_BINDINGS",
    "RUNTIME_CLASSES",
    "SECRETS",
    "SERVICES",
    "SERVICE_ACCOUNTS",
    "Resource",
]


@dataclass(frozen=True)
class Resource:
    """One served (group, version, kind) and the plural that names it in URLs.

    Frozen and hashable so it can key shared informers and caches.
    """

    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` field of objects of this kind (``v1``, ``apps/v1``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        """The group-version root: ``/api/v1`` for the core group, else ``/apis/<g>/<v>``."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def relative_path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The path below the group-version root (``namespaces/ns/pods/x/status``)."""
        if subresource and not name:
            raise ValueError(f"{self.kind}: a subresource ({subresource}) needs an object name")
        if name and self.namespaced and not namespace:
            raise ValueError(f"{self.kind} {name!r} is namespaced: pass its namespace")
        parts: list[str] = []
        if self.namespaced and namespace:
            parts += ["namespaces", namespace]
        elif namespace and not self.namespaced:
            raise ValueError(f"{self.kind} is cluster-scoped: do not pass a namespace")
        parts.append(self.plural)
        if name:
            parts.append(name)
        if subresource:
            parts.append(subresource)
        return "/".join(parts)

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The absolute URL path, e.g. ``/api/v1/nodes/x/status``.

        A namespaced kind without a namespace addresses the all-namespaces collection (list and
        watch only); a namespace on a cluster-scoped kind is a programming error.
        """
        return f"{self.prefix}/{self.relative_path(namespace, name, subresource)}"

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}" if self.group else self.plural


NODES = Resource("", "v1", "Node", "nodes", namespaced=False)
NAMESPACES = Resource("", "v1", "Namespace", "namespaces", namespaced=False)
PODS = Resource("", "v1", "Pod", "pods", namespaced=True)
# Core v1 Events, as client-go's and controller-runtime's event recorders write them.
EVENTS = Resource("", "v1", "Event", "events", namespaced=True)
LEASES = Resource("coordination.k8s.io", "v1", "Lease", "leases", namespaced=True)
CONFIGMAPS = Resource("", "v1", "ConfigMap", "configmaps", namespaced=True)
SECRETS = Resource("", "v1", "Secret", "secrets", namespaced=True)
SERVICE_ACCOUNTS = Resource("", "v1", "ServiceAccount", "serviceaccounts", namespaced=True)
SERVICES = Resource("", "v1", "Service", "services", namespaced=True)
DEPLOYMENTS = Resource("apps", "v1", "Deployment", "deployments", namespaced=True)
DAEMONSETS = Resource("apps", "v1", "DaemonSet", "daemonsets", namespaced=True)
_RBAC = "rbac.authorization.k8s.io"
CLUSTER_ROLES = Resource(_RBAC, "v1", "ClusterRole", "clusterroles", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(
    _RBAC, "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False
)
ROLES = Resource(_RBAC, "v1", "Role", "roles", namespaced=True)
ROLE_BINDINGS = Resource(_RBAC, "v1", "RoleBinding", "rolebindings", namespaced=True)
RESOURCE_SLICES = Resource(
    "resource.k8s.io", "v1", "ResourceSlice", "resourceslices", namespaced=False
)
RUNTIME_CLASSES = Resource("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", namespaced=False)
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False
)
