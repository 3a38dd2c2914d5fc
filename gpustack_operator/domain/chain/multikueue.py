"""The MultiKueue manager cluster's objects, computed from the pools of the member clusters.

Kueue's MultiKueue (kubernetes-sigs/kueue v0.19.2, beta and on) copies a Workload admitted in a
manager cluster to worker clusters, matched by namespace and LocalQueue name. This module turns
what the members' workers built (their managed ClusterQueues and LocalQueues, as the gateway
reads them) into what the manager needs (docs/multikueue.md):

- per member, a kubeconfig Secret in Kueue's namespace and a MultiKueueCluster naming it;
- per distinct set of members, a MultiKueueConfig listing them and its AdmissionCheck
  (``kueue.x-k8s.io/multikueue``): Kueue allows one MultiKueue check per ClusterQueue, and it
  cannot be scoped to flavors, so every set of members that share a pool needs its own;
- one neutral ResourceFlavor (no node labels: the members' flavors steer placement);
- per pool, a ClusterQueue of the pool's own name with that flavor, the pool's resources, the
  sum of the members' nominal quotas and the check of the members that have it;
- per namespace where a member has the pool's LocalQueue, a LocalQueue of the same name.

Pool names come from the members' ClusterQueue names, which depend on the hardware and the
chain policy only (docs/naming.md), so one pool has one name in every cluster. Pure functions,
no I/O; the gateway's MultiKueue mode (``gateway/multikueue.py``) feeds and applies them.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import yaml

from gpustack_operator.domain.chain.kueue import KUEUE_GROUP, KueueVersion
from gpustack_operator.domain.labels import MANAGED_BY_LABEL
from gpustack_operator.domain.profiles import fnv1a_64
from gpustack_operator.domain.quantities import sum_quantities
from gpustack_operator.domain.validation import is_valid_dns_label, is_valid_dns_subdomain

__all__ = [
    "DEFAULT_KUEUE_NAMESPACE",
    "DEFAULT_UNREACHABLE_AFTER",
    "MANAGER_SELECTOR",
    "MAX_CONFIG_CLUSTERS",
    "MULTIKUEUE_CONTROLLER",
    "MULTIKUEUE_MANAGED_BY",
    "NEUTRAL_FLAVOR",
    "KubeconfigRefused",
    "Member",
    "MemberPool",
    "MultiKueuePolicy",
    "check_set_name",
    "kueue_kubeconfig",
    "manager_objects",
    "member_object_name",
    "member_pools",
    "secret_name",
]

JSON = dict[str, Any]

MULTIKUEUE_MANAGED_BY: Final = "gpustack-operator-multikueue"
"""``app.kubernetes.io/managed-by`` of every object the manager mode writes. Not the worker's
value: a worker never touches these, and the manager mode changes and deletes only these."""
MANAGER_SELECTOR: Final = f"{MANAGED_BY_LABEL}={MULTIKUEUE_MANAGED_BY}"
MULTIKUEUE_CONTROLLER: Final = "kueue.x-k8s.io/multikueue"
NEUTRAL_FLAVOR: Final = "gpustack-multikueue"
"""The one ResourceFlavor of every manager ClusterQueue: no node labels, no taints."""
KUBECONFIG_KEY: Final = "kubeconfig"
"""The Secret key Kueue reads a MultiKueueCluster's kubeconfig from."""
DEFAULT_KUEUE_NAMESPACE: Final = "kueue-system"
DEFAULT_UNREACHABLE_AFTER: Final = 600.0
MAX_CONFIG_CLUSTERS: Final = 20
"""A MultiKueueConfig lists 1-20 clusters (its CRD's ``maxItems``)."""
_SECRET_PREFIX: Final = "gpustack-multikueue-"
_CHECK_PREFIX: Final = "gpustack-multikueue-"
_MEMBER_NAME_MAX: Final = 63


@dataclass(frozen=True)
class MultiKueuePolicy:
    """The manager mode's options (``worker-gateway --multikueue-*``, docs/multikueue.md)."""

    kueue_namespace: str = DEFAULT_KUEUE_NAMESPACE
    """Kueue's own namespace in the manager: where it reads the kubeconfig Secrets."""
    unreachable_after: float = DEFAULT_UNREACHABLE_AFTER
    """Seconds a member may stay unreachable before its pools leave the manager's sums."""
    kueue_version: KueueVersion = KueueVersion.V1BETA2
    """The Kueue API version the manager serves (v1beta2 preferred)."""


@dataclass(frozen=True)
class MemberPool:
    """One pool of one member: its ClusterQueue's name, its nominal quota summed over the
    queue's flavors, and the LocalQueues (namespace, name) that point at it."""

    name: str
    quota: Mapping[str, str]
    local_queues: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Member:
    """A member cluster: its name, the kubeconfig Kueue uses to reach it (already checked by
    :func:`kueue_kubeconfig`) and the pools that count towards the manager's sums (none while
    it has been unreachable too long)."""

    name: str
    kubeconfig: Mapping[str, Any]
    pools: tuple[MemberPool, ...] = field(default=())


class KubeconfigRefused(ValueError):
    """A member's kubeconfig Kueue would refuse (the message names the field and the fix)."""


# --- reading the members ------------------------------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _quota(cluster_queue: Mapping[str, Any]) -> dict[str, str]:
    spec = _mapping(cluster_queue.get("spec"))
    return sum_quantities(
        (str(_mapping(res).get("name", "")), _mapping(res).get("nominalQuota"))
        for group in _list(spec.get("resourceGroups"))
        for flavor in _list(_mapping(group).get("flavors"))
        for res in _list(_mapping(flavor).get("resources"))
    )


def member_pools(
    cluster_queues: Iterable[Mapping[str, Any]], local_queues: Iterable[Mapping[str, Any]]
) -> tuple[MemberPool, ...]:
    """The pools a member's worker built: one per managed ClusterQueue, with the LocalQueues
    that point at it (the objects as the gateway caches them, either Kueue version)."""
    queues: dict[str, list[tuple[str, str]]] = {}
    for local_queue in local_queues:
        meta = _mapping(local_queue.get("metadata"))
        target = _mapping(local_queue.get("spec")).get("clusterQueue")
        namespace, name = meta.get("namespace"), meta.get("name")
        if isinstance(target, str) and isinstance(namespace, str) and isinstance(name, str):
            queues.setdefault(target, []).append((namespace, name))
    pools = []
    for cluster_queue in cluster_queues:
        name = _mapping(cluster_queue.get("metadata")).get("name")
        if not isinstance(name, str) or not is_valid_dns_subdomain(name):
            continue
        quota = _quota(cluster_queue)
        if quota:
            pools.append(MemberPool(name, quota, tuple(sorted(set(queues.get(name, []))))))
    return tuple(sorted(pools, key=lambda p: p.name))


# --- kubeconfigs Kueue accepts ------------------------------------------------------------------


def _named(document: Mapping[str, Any], section: str, name: object) -> Mapping[str, Any] | None:
    for item in _list(document.get(section)):
        if isinstance(item, Mapping) and item.get("name") == name:
            return item
    return None


def _refuse(where: str, what: str, fix: str) -> KubeconfigRefused:
    return KubeconfigRefused(f"{where}: {what}; Kueue's MultiKueue refuses it: {fix}")


def _is_trusted_host(server: str) -> bool:
    """Kueue accepts a server whose host is an IP address or a DNS subdomain (lower-cased)."""
    host = urlsplit(server.lower()).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return is_valid_dns_subdomain(host)
    return True


_TOKEN_FIX: Final = (
    "give Kueue a ServiceAccount token inline ('token'), as deploy/components/multikueue-member "
    "creates it (docs/multikueue.md)"
)


def kueue_kubeconfig(
    document: Mapping[str, Any], context: str | None, where: str = "kubeconfig"
) -> dict[str, Any]:
    """The kubeconfig to store for Kueue: *context* (else the current one) with only its cluster
    and user, once it passes the checks Kueue v0.19.2 makes before it uses one
    (``validateKubeconfig`` and ``validateRestConfig`` in kubernetes-sigs/kueue v0.19.2
    ``pkg/controller/admissionchecks/multikueue/multikueuecluster.go``), plus file-path client
    certificates, which Kueue would look for in its own Pod. Raises :class:`KubeconfigRefused`.
    """
    name = context or document.get("current-context")
    entry = _named(document, "contexts", name) if name else None
    if entry is None:
        raise KubeconfigRefused(
            f"{where}: no context {name!r}: name an existing context (NAME=KUBECONFIG:CONTEXT)"
        )
    ctx = _mapping(entry.get("context"))
    cluster_entry = _named(document, "clusters", ctx.get("cluster"))
    user_entry = _named(document, "users", ctx.get("user"))
    if cluster_entry is None:
        raise KubeconfigRefused(f"{where}: context {name!r} names no known cluster; fix the file")
    cluster = dict(_mapping(cluster_entry.get("cluster")))
    user = dict(_mapping(user_entry.get("user"))) if user_entry is not None else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise _refuse(where, "the cluster has no 'server'", "set the member's API server URL")
    if cluster.get("insecure-skip-tls-verify"):
        raise _refuse(
            where,
            "the cluster sets 'insecure-skip-tls-verify'",
            "remove it and put the member API server's CA in 'certificate-authority-data'",
        )
    if cluster.get("certificate-authority"):
        raise _refuse(
            where,
            "the cluster names a 'certificate-authority' file",
            "put the CA itself in 'certificate-authority-data'",
        )
    if not _is_trusted_host(server):
        raise _refuse(
            where,
            f"the server {server!r} is neither an IP address nor a DNS name",
            "use the member API server's IP address or DNS name",
        )
    for key, what in (
        ("tokenFile", "a 'tokenFile'"),
        ("exec", "an 'exec' credential plugin"),
        ("auth-provider", "an 'auth-provider'"),
        ("username", "basic authentication ('username')"),
        ("password", "basic authentication ('password')"),
    ):
        if user.get(key):
            raise _refuse(where, f"the user uses {what}", _TOKEN_FIX)
    for key in ("client-certificate", "client-key"):
        if user.get(key):
            raise _refuse(
                where,
                f"the user names a '{key}' file, which Kueue would read in its own Pod",
                f"put the file's content in '{key}-data', or use a token",
            )
    cluster_name, user_name = str(cluster_entry.get("name")), "member"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": str(name), "context": {"cluster": cluster_name, "user": user_name}}],
        "current-context": str(name),
    }


# --- names --------------------------------------------------------------------------------------


def _digest(text: str) -> str:
    return f"{fnv1a_64(text.encode()):016x}"


def member_object_name(member: str) -> str:
    """The MultiKueueCluster's name for *member*: the member's own name where it is a DNS
    label; else a slug of it and a hash of the whole (gateway names allow ``_``, ``@``,
    upper case)."""
    if is_valid_dns_label(member):
        return member
    slug = "".join(c if c.isalnum() and c.isascii() else "-" for c in member.lower())
    slug = "-".join(part for part in slug.split("-") if part)[: _MEMBER_NAME_MAX - 17].rstrip("-")
    return f"{slug}-{_digest(member)}" if slug else f"m-{_digest(member)}"


def secret_name(member: str) -> str:
    """The kubeconfig Secret of *member* in Kueue's namespace."""
    return _SECRET_PREFIX + member_object_name(member)


def check_set_name(members: Sequence[str]) -> str:
    """The MultiKueueConfig and AdmissionCheck of a set of members (MultiKueueCluster names):
    a hash of the sorted set, so the same members always share one check; a DNS label, as the
    AdmissionCheck's ``parameters.name`` requires."""
    return _CHECK_PREFIX + _digest(",".join(sorted(members)))


# --- the manager's objects ----------------------------------------------------------------------


def _meta(name: str, namespace: str | None = None, **labels: str) -> JSON:
    meta: JSON = {"name": name, "labels": {MANAGED_BY_LABEL: MULTIKUEUE_MANAGED_BY, **labels}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _secret(member: Member, policy: MultiKueuePolicy) -> JSON:
    text = yaml.safe_dump(dict(member.kubeconfig), sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(secret_name(member.name), policy.kueue_namespace),
        "type": "Opaque",
        "data": {KUBECONFIG_KEY: base64.b64encode(text.encode()).decode()},
    }


def _cluster(member: Member, policy: MultiKueuePolicy) -> JSON:
    location = {"location": secret_name(member.name), "locationType": "Secret"}
    # v1beta2 nests the kubeconfig under clusterSource; v1beta1 has it directly under spec (the
    # CRD's conversion webhook maps one onto the other, kubernetes-sigs/kueue v0.19.2
    # apis/kueue/v1beta1/multikueue_conversion.go).
    spec = (
        {"clusterSource": {"kubeConfig": location}}
        if policy.kueue_version is KueueVersion.V1BETA2
        else {"kubeConfig": location}
    )
    return {
        "apiVersion": policy.kueue_version.api_version,
        "kind": "MultiKueueCluster",
        "metadata": _meta(member_object_name(member.name)),
        "spec": spec,
    }


def _config(name: str, clusters: Sequence[str], policy: MultiKueuePolicy) -> JSON:
    return {
        "apiVersion": policy.kueue_version.api_version,
        "kind": "MultiKueueConfig",
        "metadata": _meta(name),
        "spec": {"clusters": list(clusters)},
    }


def _check(name: str, policy: MultiKueuePolicy) -> JSON:
    return {
        "apiVersion": policy.kueue_version.api_version,
        "kind": "AdmissionCheck",
        "metadata": _meta(name),
        "spec": {
            "controllerName": MULTIKUEUE_CONTROLLER,
            "parameters": {"apiGroup": KUEUE_GROUP, "kind": "MultiKueueConfig", "name": name},
        },
    }


def _flavor(policy: MultiKueuePolicy) -> JSON:
    return {
        "apiVersion": policy.kueue_version.api_version,
        "kind": "ResourceFlavor",
        "metadata": _meta(NEUTRAL_FLAVOR),
        "spec": {},
    }


def _cluster_queue(
    name: str, quota: Mapping[str, str], check: str, policy: MultiKueuePolicy
) -> JSON:
    resources = sorted(quota)
    return {
        "apiVersion": policy.kueue_version.api_version,
        "kind": "ClusterQueue",
        "metadata": _meta(name),
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": resources,
                    "flavors": [
                        {
                            "name": NEUTRAL_FLAVOR,
                            "resources": [{"name": r, "nominalQuota": quota[r]} for r in resources],
                        }
                    ],
                }
            ],
            # The one MultiKueue check, for the whole queue (Kueue refuses onFlavors on it).
            "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
        },
    }


def _local_queue(namespace: str, name: str, pool: str, policy: MultiKueuePolicy) -> JSON:
    return {
        "apiVersion": policy.kueue_version.api_version,
        "kind": "LocalQueue",
        "metadata": _meta(name, namespace),
        "spec": {"clusterQueue": pool},
    }


def manager_objects(
    members: Iterable[Member],
    policy: MultiKueuePolicy | None = None,
    namespaces: Iterable[str] | None = None,
) -> list[JSON]:
    """Every object the manager cluster should hold for *members* (see the module docstring),
    in the order to apply them: Secrets, MultiKueueClusters, MultiKueueConfigs,
    AdmissionChecks, the flavor, ClusterQueues, LocalQueues. *namespaces*: the manager's
    namespaces (LocalQueues go only there); None: wherever a member has one.

    A pool shared by more than :data:`MAX_CONFIG_CLUSTERS` members lists the first 20 by name
    (a MultiKueueConfig's limit) and sums the quotas of those only."""
    policy = policy or MultiKueuePolicy()
    wanted_namespaces = None if namespaces is None else set(namespaces)
    ordered = sorted(members, key=lambda m: m.name)
    objects: list[JSON] = [_secret(m, policy) for m in ordered]
    objects += [_cluster(m, policy) for m in ordered]

    holders: dict[str, list[tuple[str, MemberPool]]] = {}
    for member in ordered:
        for pool in member.pools:
            holders.setdefault(pool.name, []).append((member_object_name(member.name), pool))

    checks: dict[tuple[str, ...], str] = {}
    queues: list[JSON] = []
    local_queues: dict[tuple[str, str], JSON] = {}
    for pool_name in sorted(holders):
        held = sorted(holders[pool_name], key=lambda h: h[0])[:MAX_CONFIG_CLUSTERS]
        clusters = tuple(name for name, _ in held)
        check = checks.setdefault(clusters, check_set_name(clusters))
        quota = sum_quantities(
            (resource, amount) for _, pool in held for resource, amount in pool.quota.items()
        )
        queues.append(_cluster_queue(pool_name, quota, check, policy))
        for _, pool in held:
            for namespace, name in pool.local_queues:
                if wanted_namespaces is None or namespace in wanted_namespaces:
                    local_queues.setdefault(
                        (namespace, name), _local_queue(namespace, name, pool_name, policy)
                    )
    for clusters, name in sorted(checks.items(), key=lambda item: item[1]):
        objects.append(_config(name, clusters, policy))
    objects += [_check(name, policy) for _, name in sorted(checks.items(), key=lambda i: i[1])]
    if queues:
        objects.append(_flavor(policy))
    objects += queues
    objects += [local_queues[key] for key in sorted(local_queues)]
    return objects
