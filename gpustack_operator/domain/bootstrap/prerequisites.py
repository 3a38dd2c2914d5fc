"""What must exist before the worker installs NFD and the device managers, and is never written
by it: NFD's CRDs and every ServiceAccount, role and binding (docs/security.md, "No escalation
path").

Writing roles and bindings needs either every permission they grant or ``escalate``/``bind``
on them, and either one lets a leaked worker token grant itself those rights. So these objects
ship statically with deploy/ (``deploy/base/device-manager.yaml`` and the kustomize component
``deploy/components/node-feature-discovery``), generated from the renderers below by
``hack/render_prerequisites.py``; the bootstrap only checks that they exist.
"""

from __future__ import annotations

from typing import Any

from gpustack_operator.domain.bootstrap.common import BootstrapSettings
from gpustack_operator.domain.bootstrap.crds import render_nfd_crds
from gpustack_operator.domain.bootstrap.devicemanager import render_device_manager_rbac
from gpustack_operator.domain.bootstrap.nfd import render_nfd_rbac

__all__ = ["device_manager_prerequisites", "nfd_prerequisites"]

JSON = dict[str, Any]


def nfd_prerequisites(settings: BootstrapSettings) -> list[JSON]:
    """NFD's CRDs, ServiceAccounts and RBAC."""
    return [*render_nfd_crds(), *render_nfd_rbac(settings)]


def device_manager_prerequisites(settings: BootstrapSettings) -> list[JSON]:
    """The device manager's ServiceAccount and RBAC."""
    return render_device_manager_rbac(settings)
