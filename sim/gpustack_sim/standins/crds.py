"""Open-schema CustomResourceDefinitions for the kinds the operator writes.

``sim --cluster`` must work from a fresh clone, where the real Kueue and NFD CRDs are not
available (they are not shipped with the project). These stand-ins serve the same groups,
versions, kinds, scopes and ``kubectl get`` columns; their schemas name the top-level fields
(so ``kubectl explain`` and kubectl's client-side validation have something to read) and keep
``spec`` and ``status`` open with ``x-kubernetes-preserve-unknown-fields``: nothing below
them is pruned, defaulted or validated, so objects read back are exactly what the operator
wrote. Load the real CRDs (``sim --crds DIR``) for schema validation (docs/simulator.md,
"Stand-in CRDs").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from gpustack_operator.domain.chain.declaredpools import POOL_KINDS

STAND_IN_LABEL: Final = "sim.gpustack.ai/stand-in"


def _open_schema(kind: str) -> dict[str, Any]:
    """Named top-level fields, open ``spec`` and ``status``, each described for explain."""
    article = "an" if kind[0] in "AEIOU" else "a"
    return {
        "openAPIV3Schema": {
            "type": "object",
            "description": f"{kind} (simulator stand-in: spec and status are not checked).",
            "properties": {
                "apiVersion": {
                    "type": "string",
                    "description": "The versioned schema of this representation of an object.",
                },
                "kind": {
                    "type": "string",
                    "description": "The REST resource this object represents.",
                },
                "metadata": {"type": "object", "description": "Standard object metadata."},
                "spec": {
                    "type": "object",
                    "description": f"The desired state of {article} {kind}; any fields are "
                    "kept (load the real CRD to check them).",
                    "x-kubernetes-preserve-unknown-fields": True,
                },
                "status": {
                    "type": "object",
                    "description": f"The observed state of {article} {kind}, written by its "
                    "controller; any fields are kept.",
                    "x-kubernetes-preserve-unknown-fields": True,
                },
            },
        }
    }


def _column(name: str, path: str, kind: str, description: str, priority: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "jsonPath": path,
        "description": description,
        **({"priority": priority} if priority else {}),
    }


def _queue_columns(version: str, kind: str) -> list[dict[str, Any]]:
    """The columns Kueue v0.19's own CRDs give ``kubectl get`` (kubernetes-sigs/kueue,
    config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml and _localqueues.yaml):
    a ClusterQueue shows its cohort (``.spec.cohortName`` from v1beta2, ``.spec.cohort``
    before), its queueing strategy (wide only) and its pending and (wide only) admitted
    workload counts; a LocalQueue shows its ClusterQueue and both counts."""
    pending = _column(
        "Pending Workloads", ".status.pendingWorkloads", "integer", "Workloads waiting"
    )
    if kind == "LocalQueue":
        return [
            _column("ClusterQueue", ".spec.clusterQueue", "string", "The backing ClusterQueue"),
            pending,
            _column(
                "Admitted Workloads",
                ".status.admittedWorkloads",
                "integer",
                "Admitted workloads not finished yet",
            ),
        ]
    cohort = ".spec.cohortName" if version != "v1beta1" else ".spec.cohort"
    return [
        _column("Cohort", cohort, "string", "The cohort it borrows within"),
        _column("Strategy", ".spec.queueingStrategy", "string", "How workloads are ordered", 1),
        pending,
        _column(
            "Admitted Workloads",
            ".status.admittedWorkloads",
            "integer",
            "Admitted workloads not finished yet",
            1,
        ),
    ]


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
                    "schema": _open_schema(kind),
                    **({"subresources": {"status": {}}} if status else {}),
                    **(
                        {"additionalPrinterColumns": _queue_columns(version, kind)}
                        if kind in ("ClusterQueue", "LocalQueue")
                        else {}
                    ),
                }
                for version in versions
            ],
        },
    }


def stand_in_crds() -> list[dict[str, Any]]:
    """NFD's NodeFeature (v1alpha1) and Kueue's four kinds and Topology (v1beta1 and
    v1beta2, as Kueue v0.19 serves them, storing v1beta2)."""
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
        _crd(
            "kueue.x-k8s.io",
            "Topology",
            "topologies",
            namespaced=False,
            status=False,
            short_names=("topo",),
            versions=kueue,
            storage="v1beta2",
        ),
        workload_crd(),
    ]


def workload_crd() -> dict[str, Any]:
    """Kueue's Workload (v1beta1 and v1beta2, storing v1beta2), schema-less: the Kueue
    stand-in (``gpustack_sim/standins/kueue.py``) serves it when no real Workload CRD was loaded."""
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


def infrastructure_stand_in_crds(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One schema-less CRD (no status subresource: a seeded object keeps its
    ``status.capacity``) per Cluster API infrastructure kind among *objects*
    (``infrastructure.cluster.x-k8s.io``; docs/autoscaling.md), at the versions they use."""
    versions: dict[str, set[str]] = {}
    for obj in objects:
        group, _, version = str(obj.get("apiVersion") or "").partition("/")
        kind = str(obj.get("kind") or "")
        if group == "infrastructure.cluster.x-k8s.io" and version and kind:
            versions.setdefault(kind, set()).add(version)
    return [
        _crd(
            "infrastructure.cluster.x-k8s.io",
            kind,
            kind.lower() + "s",
            namespaced=True,
            status=False,
            versions=tuple(sorted(found)),
            storage=sorted(found)[-1],
        )
        for kind, found in sorted(versions.items())
    ]


def autoscaling_stand_in_crds(provisioning: bool = True) -> list[dict[str, Any]]:
    """Pool objects and provisioning kinds, schema-less (docs/autoscaling.md): every kind of
    the product's ``POOL_KINDS`` (Karpenter's NodePool ``karpenter.sh/v1``, Cluster API's
    MachineDeployment and MachinePool ``cluster.x-k8s.io/v1beta1``) and, with *provisioning*,
    Kueue's AdmissionCheck and ProvisioningRequestConfig and the autoscaler's ProvisioningRequest
    (``autoscaling.x-k8s.io/v1``). The simulator serves them when a test or ``sim --cluster``
    asks; the real CRDs of ../shared/crds take their place where given."""
    kueue = ("v1beta1", "v1beta2")
    # The product's table of pool kinds, each at its oldest version read (what the examples
    # and the tests' objects use).
    crds = [
        _crd(
            k.group,
            k.kind,
            k.plural,
            namespaced=k.namespaced,
            status=True,
            versions=(k.versions[-1],),
            storage=k.versions[-1],
        )
        for k in POOL_KINDS
    ]
    if provisioning:
        crds += [
            _crd(
                "kueue.x-k8s.io",
                "AdmissionCheck",
                "admissionchecks",
                namespaced=False,
                status=True,
                versions=kueue,
                storage="v1beta2",
            ),
            _crd(
                "kueue.x-k8s.io",
                "ProvisioningRequestConfig",
                "provisioningrequestconfigs",
                namespaced=False,
                status=False,
                versions=kueue,
                storage="v1beta2",
            ),
            _crd(
                "autoscaling.x-k8s.io",
                "ProvisioningRequest",
                "provisioningrequests",
                namespaced=True,
                status=True,
                versions=("v1",),
                storage="v1",
            ),
        ]
    return crds


def multikueue_stand_in_crds() -> list[dict[str, Any]]:
    """Kueue's MultiKueue kinds for a simulated manager cluster, schema-less (v1beta1 and
    v1beta2, storing v1beta2): AdmissionCheck, MultiKueueConfig and MultiKueueCluster
    (``gpustack_sim/standins/multikueue.py`` reads them). The real CRDs of ../shared/crds
    take their place where given."""
    kueue = ("v1beta1", "v1beta2")
    return [
        _crd(
            "kueue.x-k8s.io",
            kind,
            plural,
            namespaced=False,
            status=True,
            versions=kueue,
            storage="v1beta2",
        )
        for kind, plural in (
            ("AdmissionCheck", "admissionchecks"),
            ("MultiKueueConfig", "multikueueconfigs"),
            ("MultiKueueCluster", "multikueueclusters"),
        )
    ]
