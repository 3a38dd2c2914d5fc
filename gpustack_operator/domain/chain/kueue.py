"""Typed Kueue objects with Kueue's own limits, rendered to plain manifests.

The models reject what the Kueue API server would reject (names, nodeLabels > 8, more than 16
resource groups or 64 flavors per group, non-canonical quantities), so a bug shows up here
with a clear message rather than as a 422 in a reconcile loop. ``manifest()`` renders the
``kueue.x-k8s.io/v1beta2`` shape by default and v1beta1 on request (docs/worker.md).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Final, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpustack_operator.domain.comparison import Compare, ObjectComparison
from gpustack_operator.domain.node.taints import (
    Toleration,
)
from gpustack_operator.domain.quantities import is_canonical_quantity
from gpustack_operator.domain.validation import (
    is_valid_dns_label,
    is_valid_dns_subdomain,
    is_valid_label_key,
    is_valid_label_value,
)

KUEUE_GROUP: Final = "kueue.x-k8s.io"
MAX_NODE_LABELS: Final = 8
MAX_RESOURCE_GROUPS: Final = 16
MAX_FLAVORS_PER_GROUP: Final = 64
MAX_RESOURCES_PER_GROUP: Final = 64


class KueueVersion(StrEnum):
    V1BETA2 = "v1beta2"
    V1BETA1 = "v1beta1"

    @property
    def api_version(self) -> str:
        return f"{KUEUE_GROUP}/{self.value}"


class OwnerReference(BaseModel):
    model_config = ConfigDict(frozen=True)

    api_version: str
    kind: str
    name: str
    uid: str = Field(min_length=1)
    controller: bool = True
    block_owner_deletion: bool = False

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": self.controller,
            "blockOwnerDeletion": self.block_owner_deletion,
        }


class Meta(BaseModel):
    """The parts of ``metadata`` this project sets."""

    model_config = ConfigDict(frozen=True)

    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: tuple[OwnerReference, ...] = ()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_valid_dns_subdomain(value):
            raise ValueError(f"invalid object name {value!r}")
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is not None and not is_valid_dns_label(value):
            raise ValueError(f"invalid namespace {value!r}")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not is_valid_label_key(key) or not is_valid_label_value(item):
                raise ValueError(f"invalid label {key}={item!r}")
        return value

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not is_valid_label_key(key):
                raise ValueError(f"invalid annotation key {key!r}")
        return value

    def manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.namespace is not None:
            out["namespace"] = self.namespace
        if self.labels:
            out["labels"] = dict(sorted(self.labels.items()))
        if self.annotations:
            out["annotations"] = dict(sorted(self.annotations.items()))
        if self.owner_references:
            out["ownerReferences"] = [o.manifest() for o in self.owner_references]
        return out


def _quantity(value: str) -> str:
    if not is_canonical_quantity(value):
        raise ValueError(f"quantity {value!r} is not in canonical form")
    return value


class ResourceFlavor(BaseModel):
    model_config = ConfigDict(frozen=True)
    COMPARISON: ClassVar = ObjectComparison(
        {
            "spec.nodeLabels": Compare.EXACT,
            "spec.tolerations": Compare.EXACT,
            "spec.topologyName": Compare.EXACT,
        }
    )
    """Node labels and tolerations are the worker's whole: a toleration no longer needed goes."""

    metadata: Meta
    node_labels: dict[str, str] = Field(max_length=MAX_NODE_LABELS)
    tolerations: tuple[Toleration, ...] = ()
    topology_name: str = ""
    """A TAS flavor's Topology (docs/topology.md); ``""``: not TAS."""

    @field_validator("node_labels")
    @classmethod
    def _node_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if not is_valid_label_key(key) or not is_valid_label_value(item):
                raise ValueError(f"invalid nodeLabel {key}={item!r}")
        return value

    def manifest(self, version: KueueVersion = KueueVersion.V1BETA2) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "nodeLabels": dict(sorted(self.node_labels.items())),
            # Always written (possibly empty): apply then drops tolerations no longer needed.
            "tolerations": [t.manifest() for t in self.tolerations],
        }
        if self.topology_name:
            spec["topologyName"] = self.topology_name
        return {
            "apiVersion": version.api_version,
            "kind": "ResourceFlavor",
            "metadata": self.metadata.manifest(),
            "spec": spec,
        }


class Cohort(BaseModel):
    """A Cohort with only a name (docs/worker.md); ``spec.parentName`` is not used."""

    model_config = ConfigDict(frozen=True)
    COMPARISON: ClassVar = ObjectComparison({"spec.parentName": Compare.EXACT})
    """The spec is written empty; any field the worker starts writing is compared exactly."""

    metadata: Meta

    def manifest(self, version: KueueVersion = KueueVersion.V1BETA2) -> dict[str, Any]:
        return {
            "apiVersion": version.api_version,
            "kind": "Cohort",
            "metadata": self.metadata.manifest(),
            "spec": {},
        }


class ResourceQuota(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    nominal_quota: str
    borrowing_limit: str | None = None

    _check_nominal = field_validator("nominal_quota")(_quantity)

    @field_validator("borrowing_limit")
    @classmethod
    def _borrowing(cls, value: str | None) -> str | None:
        return None if value is None else _quantity(value)

    def manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "nominalQuota": self.nominal_quota}
        if self.borrowing_limit is not None:
            out["borrowingLimit"] = self.borrowing_limit
        return out


class FlavorQuotas(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    resources: tuple[ResourceQuota, ...] = Field(min_length=1, max_length=MAX_RESOURCES_PER_GROUP)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_valid_dns_subdomain(value):
            raise ValueError(f"invalid flavor name {value!r}")
        return value


class ResourceGroup(BaseModel):
    model_config = ConfigDict(frozen=True)

    covered_resources: tuple[str, ...] = Field(min_length=1, max_length=MAX_RESOURCES_PER_GROUP)
    flavors: tuple[FlavorQuotas, ...] = Field(min_length=1, max_length=MAX_FLAVORS_PER_GROUP)

    @model_validator(mode="after")
    def _same_resources(self) -> Self:
        for flavor in self.flavors:
            if tuple(r.name for r in flavor.resources) != self.covered_resources:
                raise ValueError(
                    f"flavor {flavor.name} must list {list(self.covered_resources)} in order"
                )
        return self

    def manifest(self) -> dict[str, Any]:
        return {
            "coveredResources": list(self.covered_resources),
            "flavors": [
                {"name": f.name, "resources": [r.manifest() for r in f.resources]}
                for f in self.flavors
            ],
        }


FLAVOR_FUNGIBILITY: Final = {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "MayStopSearch"}
PREEMPTION: Final = {
    "reclaimWithinCohort": "Never",
    "borrowWithinCohort": {"policy": "Never"},
    "withinClusterQueue": "LowerPriority",
}


class ClusterQueue(BaseModel):
    """A ClusterQueue as docs/worker.md step 7 shapes it."""

    model_config = ConfigDict(frozen=True)
    COMPARISON: ClassVar = ObjectComparison(
        {
            "spec.cohortName": Compare.EXACT,
            "spec.cohort": Compare.EXACT,
            # Kueue's CRD defaults fields inside these; the worker's values must be present.
            "spec.namespaceSelector": Compare.CONTAINS,
            "spec.flavorFungibility": Compare.CONTAINS,
            "spec.preemption": Compare.CONTAINS,
            "spec.resourceGroups": Compare.CONTAINS,
            "spec.stopPolicy": Compare.EXACT,
        }
    )

    metadata: Meta
    cohort: str
    resource_groups: tuple[ResourceGroup, ...] = Field(max_length=MAX_RESOURCE_GROUPS)
    stop_policy: str | None = None
    """``Hold`` while the queue's whole pool is away for a planned reason
    (docs/node-lifecycle.md, "Whole-pool Hold"); None: not set (Kueue's default)."""

    @field_validator("cohort")
    @classmethod
    def _cohort(cls, value: str) -> str:
        if not is_valid_dns_subdomain(value):
            raise ValueError(f"invalid cohort name {value!r}")
        return value

    @model_validator(mode="after")
    def _resources_in_one_group(self) -> Self:
        seen: set[str] = set()
        for group in self.resource_groups:
            for resource in group.covered_resources:
                if resource in seen:
                    raise ValueError(f"resource {resource} is covered by two resource groups")
                seen.add(resource)
        return self

    def manifest(self, version: KueueVersion = KueueVersion.V1BETA2) -> dict[str, Any]:
        cohort_field = "cohortName" if version is KueueVersion.V1BETA2 else "cohort"
        return {
            "apiVersion": version.api_version,
            "kind": "ClusterQueue",
            "metadata": self.metadata.manifest(),
            "spec": {
                cohort_field: self.cohort,
                "namespaceSelector": {},
                "flavorFungibility": dict(FLAVOR_FUNGIBILITY),
                "preemption": {
                    "reclaimWithinCohort": PREEMPTION["reclaimWithinCohort"],
                    "borrowWithinCohort": {"policy": "Never"},
                    "withinClusterQueue": PREEMPTION["withinClusterQueue"],
                },
                "resourceGroups": [g.manifest() for g in self.resource_groups],
                **({"stopPolicy": self.stop_policy} if self.stop_policy else {}),
            },
        }


class LocalQueue(BaseModel):
    model_config = ConfigDict(frozen=True)
    COMPARISON: ClassVar = ObjectComparison({"spec.clusterQueue": Compare.EXACT})

    metadata: Meta
    cluster_queue: str

    @model_validator(mode="after")
    def _namespaced(self) -> Self:
        if self.metadata.namespace is None:
            raise ValueError("a LocalQueue needs a namespace")
        if not is_valid_dns_subdomain(self.cluster_queue):
            raise ValueError(f"invalid ClusterQueue name {self.cluster_queue!r}")
        return self

    def manifest(self, version: KueueVersion = KueueVersion.V1BETA2) -> dict[str, Any]:
        return {
            "apiVersion": version.api_version,
            "kind": "LocalQueue",
            "metadata": self.metadata.manifest(),
            "spec": {"clusterQueue": self.cluster_queue},
        }
