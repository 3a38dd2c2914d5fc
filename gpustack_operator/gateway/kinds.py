"""The Kueue kinds the gateway watches, keyed by the plural that names them in its URLs.

Each cluster may serve a different Kueue version (docs/worker.md): ``kueue.x-k8s.io/v1beta2`` is
preferred, ``v1beta1`` is the fallback. The descriptors come from
:mod:`gpustack_operator.apis`; the objects are kept as the server sends them. Only
:func:`gpustack_operator.domain.chain.queues.cluster_queue_cohort` cares about the field that
differs (``spec.cohortName`` vs ``spec.cohort``).
"""

from __future__ import annotations

from typing import Final

from gpustack_operator.apis import kueue_resources
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.labels import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from gpustack_operator.runtime.resources import Resource

__all__ = [
    "KIND_NAMES",
    "MANAGED_SELECTOR",
    "SUPPORTED_VERSIONS",
    "pick_version",
    "watched_resources",
]

MANAGED_SELECTOR: Final = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
"""Only objects the operator created are watched (docs/worker.md)."""

KIND_NAMES: Final[tuple[str, ...]] = ("resourceflavors", "cohorts", "clusterqueues", "localqueues")
"""URL names of the watched kinds, in the order removals are announced."""
SUPPORTED_VERSIONS: Final[tuple[KueueVersion, ...]] = (KueueVersion.V1BETA2, KueueVersion.V1BETA1)


def watched_resources(version: KueueVersion) -> dict[str, Resource]:
    """Descriptor of every watched kind at *version*, keyed by the names in :data:`KIND_NAMES`."""
    kinds = kueue_resources(version)
    return {
        "resourceflavors": kinds.resource_flavors,
        "cohorts": kinds.cohorts,
        "clusterqueues": kinds.cluster_queues,
        "localqueues": kinds.local_queues,
    }


def pick_version(served: list[str]) -> KueueVersion | None:
    """The Kueue version to read among the *served* ones (v1beta2 first); None if neither."""
    for version in SUPPORTED_VERSIONS:
        if version.value in served:
            return version
    return None
