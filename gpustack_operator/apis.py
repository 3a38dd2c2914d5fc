"""Resource descriptors of the third-party APIs the operator reads and writes.

The runtime addresses kinds by :class:`~gpustack_operator.runtime.resources.Resource`; the
built-in kinds live in the runtime, the custom ones (NFD, Kueue) here, so every component
(device manager, worker, simulator helpers) names them the same way. Kueue's version is not
fixed: the worker discovers which one the cluster serves (docs/worker.md) and asks
:func:`kueue_resources` for the matching descriptors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpustack_operator.domain.bootstrap.crds import NFD_GROUP, NFD_VERSION_NAME
from gpustack_operator.domain.chain.kueue import KUEUE_GROUP, KueueVersion
from gpustack_operator.runtime.resources import Resource

__all__ = [
    "KUEUE_GROUP",
    "NFD_GROUP",
    "NODE_FEATURES",
    "NODE_FEATURE_RULES",
    "KueueResources",
    "kueue_resources",
]

NODE_FEATURES: Final = Resource(
    NFD_GROUP, NFD_VERSION_NAME, "NodeFeature", "nodefeatures", namespaced=True
)
NODE_FEATURE_RULES: Final = Resource(
    NFD_GROUP, NFD_VERSION_NAME, "NodeFeatureRule", "nodefeaturerules", namespaced=False
)


@dataclass(frozen=True)
class KueueResources:
    """The four Kueue kinds the worker manages, at one API version."""

    version: KueueVersion
    resource_flavors: Resource
    cohorts: Resource
    cluster_queues: Resource
    local_queues: Resource
    topologies: Resource | None = None
    """Kueue's Topology at the same version (docs/topology.md), for TAS flavors."""


def kueue_resources(version: str | KueueVersion = KueueVersion.V1BETA2) -> KueueResources:
    """Descriptors of ResourceFlavor, Cohort, ClusterQueue and LocalQueue at *version*.

    Raises ``ValueError`` for a version this project cannot write (only v1beta2 and v1beta1).
    """
    try:
        v = KueueVersion(version)
    except ValueError:
        known = ", ".join(k.value for k in KueueVersion)
        raise ValueError(f"unsupported Kueue API version {version!r}: use one of {known}") from None
    return KueueResources(
        version=v,
        resource_flavors=Resource(KUEUE_GROUP, v.value, "ResourceFlavor", "resourceflavors", False),
        cohorts=Resource(KUEUE_GROUP, v.value, "Cohort", "cohorts", namespaced=False),
        cluster_queues=Resource(KUEUE_GROUP, v.value, "ClusterQueue", "clusterqueues", False),
        local_queues=Resource(KUEUE_GROUP, v.value, "LocalQueue", "localqueues", namespaced=True),
        topologies=Resource(KUEUE_GROUP, v.value, "Topology", "topologies", namespaced=False),
    )
