"""What must exist before the worker installs NFD and the device managers, and is never written
by it: NFD's CRDs and every ServiceAccount, role and binding (docs/security.md, "No escalation
path").

Writing roles and bindings needs either every permission they grant or ``escalate``/``bind``
on them, and either one lets a leaked worker token grant itself those rights. So these objects
ship statically with deploy/ (``deploy/base/device-manager.yaml``, the kustomize component
``deploy/components/node-feature-discovery`` and the CRDs in ``deploy/nfd-crds``), generated
from the renderers below by ``hack/render_prerequisites.py``; the bootstrap only checks that
they exist.

NFD's CRDs are not part of any overlay: a cluster may run an NFD of its own (a Helm release,
the NVIDIA GPU Operator, kustomize) whose CRDs ``kubectl apply`` would relabel as ours and
``kubectl delete -k`` would delete with every NodeFeature. ``make deploy`` creates each one only
where none exists, and ``make undeploy`` deletes only those :func:`installed_by_us` says are
ours (docs/deploy.md, "Beside an NFD of your own").

The cluster itself has prerequisites too, checked by the worker at start
(:func:`cluster_problems`, docs/deploy.md, "Prerequisites"): the Kubernetes version each
overlay needs, ValidatingAdmissionPolicies served, and the node-bound device-manager policy
only where Pod tokens carry the node-name claim it reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpustack_operator.domain.bootstrap.common import BootstrapSettings
from gpustack_operator.domain.bootstrap.crds import render_nfd_crds
from gpustack_operator.domain.bootstrap.devicemanager import render_device_manager_rbac
from gpustack_operator.domain.bootstrap.nfd import render_nfd_rbac
from gpustack_operator.domain.labels import MANAGED_BY_LABEL, MANAGED_BY_VALUE

__all__ = [
    "ADMISSION_POLICIES_SINCE",
    "HELM_RELEASE_ANNOTATION",
    "NFD_CRDS_DIR",
    "NODE_BOUND_POLICY",
    "NODE_BOUND_SINCE",
    "PRE_NODE_BOUND_OVERLAY",
    "ClusterFacts",
    "cluster_problems",
    "device_manager_prerequisites",
    "installed_by_us",
    "nfd_prerequisites",
    "nfd_rbac_prerequisites",
    "parse_server_version",
]

JSON = dict[str, Any]

NFD_CRDS_DIR: Final = "deploy/nfd-crds"
"""Where NFD's CRDs ship, one file per CRD named after it (``make deploy`` creates the missing)."""
HELM_RELEASE_ANNOTATION: Final = "meta.helm.sh/release-name"
"""Helm marks every object of a release with it, beside ``app.kubernetes.io/managed-by: Helm``
(helm/helm ``pkg/action/validate.go``@002ac78, ``setMetadataVisitor``)."""
HELM_CHART_LABEL: Final = "helm.sh/chart"
"""Set by a chart's own templates to ``<chart>-<version>`` (Helm's convention, not Helm itself)."""
CHART_LABEL_PREFIX: Final = "gpustack-operator-"
"""Our chart's value of it, before the version (deploy/helm/gpustack-operator, docs/deploy.md
"Helm")."""


def nfd_prerequisites(settings: BootstrapSettings) -> list[JSON]:
    """NFD's CRDs, ServiceAccounts and RBAC: what must exist before the worker installs NFD."""
    return [*render_nfd_crds(), *nfd_rbac_prerequisites(settings)]


def nfd_rbac_prerequisites(settings: BootstrapSettings) -> list[JSON]:
    """NFD's ServiceAccounts and RBAC (the kustomize component): project-prefixed names in the
    system namespace, so they cannot collide with another NFD's."""
    return render_nfd_rbac(settings)


def device_manager_prerequisites(settings: BootstrapSettings) -> list[JSON]:
    """The device manager's ServiceAccount and RBAC."""
    return render_device_manager_rbac(settings)


def installed_by_us(obj: Mapping[str, Any]) -> bool:
    """Whether this project installed *obj*: ``make deploy`` did (our managed-by label and no
    Helm release annotation) or our Helm chart did (its ``helm.sh/chart`` label, which only
    the chart's own templates set). The annotation test catches CRDs of another Helm release
    that an earlier version of our overlay relabelled: Helm's annotations survive
    ``kubectl apply``; no overlay ever wrote the chart label."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if str(labels.get(HELM_CHART_LABEL, "")).startswith(CHART_LABEL_PREFIX):
        return True
    return (
        labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
        and HELM_RELEASE_ANNOTATION not in annotations
    )


ADMISSION_POLICIES_SINCE: Final = (1, 30)
"""ValidatingAdmissionPolicy is GA (``admissionregistration.k8s.io/v1``) from Kubernetes 1.30
(https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/):
every overlay ships one (``deploy/components/admission-policies``)."""
NODE_BOUND_SINCE: Final = (1, 32)
"""Pod-bound ServiceAccount tokens carry ``authentication.kubernetes.io/node-name`` from 1.32
(docs/security.md, "Device manager token"); the node-bound policy reads it."""
NODE_BOUND_POLICY: Final = "gpustack-operator-device-manager-own-node"
"""The ValidatingAdmissionPolicy (and binding) of ``deploy/components/node-bound-agents``."""
PRE_NODE_BOUND_OVERLAY: Final = "deploy/overlays/release-k8s-1.30"
"""The release overlay without the node-bound policy, for Kubernetes 1.30 and 1.31."""


@dataclass(frozen=True)
class ClusterFacts:
    """What the worker read at start; ``None`` where it could not tell."""

    version: tuple[int, int] | None
    """The API server's (major, minor) from ``/version``."""
    serves_admission_policies: bool | None
    """Discovery lists ``validatingadmissionpolicies`` in ``admissionregistration.k8s.io/v1``."""
    node_bound_policy: bool | None
    """The ValidatingAdmissionPolicy :data:`NODE_BOUND_POLICY` exists."""


def parse_server_version(info: Mapping[str, Any]) -> tuple[int, int] | None:
    """(major, minor) of a ``/version`` answer; managed clusters write ``"31+"`` as minor."""
    parts = []
    for key in ("major", "minor"):
        match = re.match(r"\d+", str(info.get(key) or ""))
        if match is None:
            return None
        parts.append(int(match.group()))
    return parts[0], parts[1]


def _text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def cluster_problems(facts: ClusterFacts) -> list[str]:
    """Each prerequisite the cluster misses, as one sentence that says what to change
    (docs/deploy.md, "Prerequisites"); empty when all hold or could not be told."""
    problems = []
    version = facts.version
    if version is not None and version < ADMISSION_POLICIES_SINCE:
        problems.append(
            f"Kubernetes {_text(version)} is older than {_text(ADMISSION_POLICIES_SINCE)}, the "
            "oldest the overlays support (their ValidatingAdmissionPolicies are "
            "admissionregistration.k8s.io/v1): upgrade the cluster to "
            f"{_text(ADMISSION_POLICIES_SINCE)} or newer"
        )
    elif facts.serves_admission_policies is False:
        problems.append(
            "the API server serves no admissionregistration.k8s.io/v1 "
            "ValidatingAdmissionPolicies, so the policy that holds the worker to its own "
            "workloads (deploy/components/admission-policies) is not enforced: enable that API"
        )
    if version is not None and version < NODE_BOUND_SINCE and facts.node_bound_policy:
        problems.append(
            f"Kubernetes {_text(version)} gives Pod tokens no node-name claim (from "
            f"{_text(NODE_BOUND_SINCE)}), so the ValidatingAdmissionPolicy {NODE_BOUND_POLICY} "
            "refuses every device-manager write and no GPU pool appears: on this cluster "
            f"apply {PRE_NODE_BOUND_OVERLAY} instead (make deploy OVERLAY=release-k8s-1.30) and "
            "run "
            f"kubectl delete validatingadmissionpolicy,validatingadmissionpolicybinding "
            f"{NODE_BOUND_POLICY}, or upgrade to {_text(NODE_BOUND_SINCE)}"
        )
    return problems
