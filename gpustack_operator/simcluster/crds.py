"""Schema-less CustomResourceDefinitions for the kinds the operator writes.

``sim --cluster`` must work from a fresh clone, where the real Kueue and NFD CRDs are not
available (they are not shipped with the project). These stand-ins serve the same groups,
versions, kinds and scopes, with ``x-kubernetes-preserve-unknown-fields`` schemas: nothing is
pruned, defaulted or validated, so objects read back are exactly what the operator wrote.
Load the real CRDs (``sim --crds DIR``) for schema validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

STAND_IN_LABEL: Final = "sim.gpustack.ai/stand-in"

_OPEN_SCHEMA: Final = {
    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
}


def _crd(
    group: str,
    kind: str,
    plural: str,
    *,
    namespaced: bool,
    versions: tuple[str, ...],
    storage: str,
    status: bool,
    short_names: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "labels": {STAND_IN_LABEL: "true"},
        },
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                **({"shortNames": list(short_names)} if short_names else {}),
            },
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": version == storage,
                    "schema": _OPEN_SCHEMA,
                    **({"subresources": {"status": {}}} if status else {}),
                }
                for version in versions
            ],
        },
    }


def stand_in_crds() -> list[dict[str, Any]]:
    """NFD's NodeFeature (v1alpha1) and Kueue's four kinds (v1beta1 and v1beta2, as Kueue
    v0.19 serves them, storing v1beta2)."""
    kueue = ("v1beta1", "v1beta2")
    return [
        _crd(
            "nfd.k8s-sigs.io",
            "NodeFeature",
            "nodefeatures",
            namespaced=True,
            versions=("v1alpha1",),
            storage="v1alpha1",
            status=False,
        ),
        _crd(
            "kueue.x-k8s.io",
            "ResourceFlavor",
            "resourceflavors",
            namespaced=False,
            status=False,
            short_names=("flavor", "flavors", "rf"),
            versions=kueue,
            storage="v1beta2",
        ),
        _crd(
            "kueue.x-k8s.io",
            "Cohort",
            "cohorts",
            namespaced=False,
            status=True,
            versions=kueue,
            storage="v1beta2",
        ),
        _crd(
            "kueue.x-k8s.io",
            "ClusterQueue",
            "clusterqueues",
            namespaced=False,
            status=True,
            short_names=("cq",),
            versions=kueue,
            storage="v1beta2",
        ),
        _crd(
            "kueue.x-k8s.io",
            "LocalQueue",
            "localqueues",
            namespaced=True,
            status=True,
            short_names=("queue", "queues", "lq"),
            versions=kueue,
            storage="v1beta2",
        ),
        workload_crd(),
    ]


def workload_crd() -> dict[str, Any]:
    """Kueue's Workload (v1beta1 and v1beta2, storing v1beta2), schema-less: the Kueue
    stand-in (``sim/kueue.py``) serves it when no real Workload CRD was loaded."""
    return _crd(
        "kueue.x-k8s.io",
        "Workload",
        "workloads",
        namespaced=True,
        status=True,
        short_names=("wl",),
        versions=("v1beta1", "v1beta2"),
        storage="v1beta2",
    )


def is_stand_in(crd: Mapping[str, Any]) -> bool:
    """Whether *crd* is one of :func:`stand_in_crds` (not a real, schema-carrying CRD)."""
    labels = (crd.get("metadata") or {}).get("labels") or {}
    return labels.get(STAND_IN_LABEL) == "true"
