"""The manager cluster's MultiKueue objects, as the dispatch tests need them.

The tests of MultiKueue dispatch (the simulator's stand-in and real Kueue v0.19.2 on three
control planes) need a manager cluster whose queues point at the member clusters. Until the
product generates those objects, :func:`manager_objects` writes them in the shape issue #43
asks of the product, so the two can be swapped: per member a kubeconfig Secret in Kueue's
namespace and a MultiKueueCluster (``kueue.x-k8s.io/v1beta2``,
``spec.clusterSource.kubeConfig``); per distinct set of members a MultiKueueConfig and its
AdmissionCheck; per pool a ClusterQueue with one neutral flavor, the members' quotas summed
and that one check; per namespace a LocalQueue named as the members name that pool.
Pure: no I/O.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpustack_operator.domain.profiles import local_queue_name
from gpustack_operator.gateway.pools import sum_quantities

KUEUE_NAMESPACE = "kueue-system"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
NEUTRAL_FLAVOR = "gpustack-multikueue"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpustack-operator"}


@dataclass(frozen=True)
class Member:
    """One member cluster: its name on the manager, a kubeconfig Kueue accepts (embedded CA,
    a ServiceAccount token), its pools as the gateway reads them
    (``gateway.pools.pool_entry``: ``name`` is the ClusterQueue, ``nominalQuota`` the sums)
    and the namespaces its LocalQueues serve."""

    name: str
    kubeconfig: str
    pools: Sequence[Mapping[str, Any]]
    namespaces: Sequence[str] = field(default_factory=lambda: ["default"])


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(MANAGED_BY)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def secret_name(member: str) -> str:
    return f"gpustack-multikueue-{member}"


def check_name(members: Sequence[str]) -> str:
    """One AdmissionCheck (and MultiKueueConfig) per distinct set of members."""
    digest = hashlib.sha256(",".join(sorted(members)).encode()).hexdigest()[:10]
    return f"gpustack-multikueue-{digest}"


def manager_objects(members: Sequence[Member]) -> list[dict[str, Any]]:
    """Everything the manager cluster needs to dispatch to *members* (module docstring)."""
    objects: list[dict[str, Any]] = []
    for member in members:
        data = base64.b64encode(member.kubeconfig.encode()).decode()
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": _meta(secret_name(member.name), KUEUE_NAMESPACE),
                "type": "Opaque",
                "data": {"kubeconfig": data},
            }
        )
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "MultiKueueCluster",
                "metadata": _meta(member.name),
                "spec": {
                    "clusterSource": {
                        "kubeConfig": {
                            "location": secret_name(member.name),
                            "locationType": "Secret",
                        }
                    }
                },
            }
        )

    holders: dict[str, list[str]] = {}
    quotas: dict[str, list[tuple[str, object]]] = {}
    namespaces: dict[str, set[str]] = {}
    for member in members:
        for pool in member.pools:
            name = str(pool["name"])
            holders.setdefault(name, []).append(member.name)
            quotas.setdefault(name, []).extend((pool.get("nominalQuota") or {}).items())
            namespaces.setdefault(name, set()).update(member.namespaces)

    for clusters in sorted({tuple(sorted(h)) for h in holders.values()}):
        check = check_name(clusters)
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "MultiKueueConfig",
                "metadata": _meta(check),
                "spec": {"clusters": list(clusters)},
            }
        )
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "AdmissionCheck",
                "metadata": _meta(check),
                "spec": {
                    "controllerName": MULTIKUEUE_CONTROLLER,
                    "parameters": {
                        "apiGroup": "kueue.x-k8s.io",
                        "kind": "MultiKueueConfig",
                        "name": check,
                    },
                },
            }
        )

    if holders:
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "ResourceFlavor",
                "metadata": _meta(NEUTRAL_FLAVOR),
                "spec": {},
            }
        )
    for pool in sorted(holders):
        summed = sum_quantities(quotas[pool])
        objects.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "ClusterQueue",
                "metadata": _meta(pool),
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": sorted(summed),
                            "flavors": [
                                {
                                    "name": NEUTRAL_FLAVOR,
                                    "resources": [
                                        {"name": r, "nominalQuota": q}
                                        for r, q in sorted(summed.items())
                                    ],
                                }
                            ],
                        }
                    ],
                    "admissionChecksStrategy": {
                        "admissionChecks": [{"name": check_name(holders[pool])}]
                    },
                },
            }
        )
        for namespace in sorted(namespaces[pool]):
            objects.append(
                {
                    "apiVersion": KUEUE_API,
                    "kind": "LocalQueue",
                    "metadata": _meta(local_queue_name(pool), namespace),
                    "spec": {"clusterQueue": pool},
                }
            )
    return objects
