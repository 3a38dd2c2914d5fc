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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gpustack_operator.domain.bootstrap.common import BootstrapSettings
from gpustack_operator.domain.bootstrap.crds import render_nfd_crds
from gpustack_operator.domain.bootstrap.devicemanager import render_device_manager_rbac
from gpustack_operator.domain.bootstrap.nfd import render_nfd_rbac
from gpustack_operator.domain.labels import MANAGED_BY_LABEL, MANAGED_BY_VALUE

__all__ = [
    "HELM_RELEASE_ANNOTATION",
    "NFD_CRDS_DIR",
    "device_manager_prerequisites",
    "installed_by_us",
    "nfd_prerequisites",
    "nfd_rbac_prerequisites",
]

JSON = dict[str, Any]

NFD_CRDS_DIR: Final = "deploy/nfd-crds"
"""Where NFD's CRDs ship, one file per CRD named after it (``make deploy`` creates the missing)."""
HELM_RELEASE_ANNOTATION: Final = "meta.helm.sh/release-name"
"""Helm marks every object of a release with it, beside ``app.kubernetes.io/managed-by: Helm``
(helm/helm ``pkg/action/validate.go``@002ac78, ``setMetadataVisitor``)."""


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
    """Whether this project installed *obj*: it carries our managed-by label and no Helm
    release annotation. The second test catches CRDs of a Helm release that an earlier
    version of our overlay relabelled: Helm's annotations survive ``kubectl apply``."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return (
        labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
        and HELM_RELEASE_ANNOTATION not in annotations
    )
