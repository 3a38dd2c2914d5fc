"""Everything the worker installs in Stage 1 (docs/worker.md), rendered as plain manifests.

Pure functions only: no I/O, no clock, no environment reads. The bootstrap reconciler
(``controllers/bootstrap.py``) applies what these return; the tests (checkov and schema
validation included) render them without a cluster.

- :mod:`.common` — names, labels and the settings every renderer takes;
- :mod:`.crds` — the NFD CustomResourceDefinitions, authored by this project;
- :mod:`.nfd` — NFD master, worker, garbage collector, their RBAC and configuration, and the
  NodeFeatureRule ``gpustack-cpu-info``;
- :mod:`.devicemanager` — one device-manager DaemonSet per manufacturer and the agent's
  least-privilege RBAC;
- :mod:`.prerequisites` — the CRDs and RBAC shipped statically with deploy/, which the
  bootstrap checks but never writes, and who installed an NFD CRD.
"""

from __future__ import annotations

from gpustack_operator.domain.bootstrap.common import (
    APPLICATIONS,
    DEFAULT_NFD_IMAGE,
    DEVICE_MANAGER,
    NODE_FEATURE_DISCOVERY,
    BootstrapSettings,
    parse_disabled_applications,
)
from gpustack_operator.domain.bootstrap.crds import render_nfd_crds
from gpustack_operator.domain.bootstrap.devicemanager import (
    render_device_manager,
    render_device_manager_rbac,
    render_runtime_classes,
)
from gpustack_operator.domain.bootstrap.nfd import render_cpu_info_rule, render_nfd, render_nfd_rbac
from gpustack_operator.domain.bootstrap.prerequisites import (
    NFD_CRDS_DIR,
    device_manager_prerequisites,
    installed_by_us,
    nfd_prerequisites,
    nfd_rbac_prerequisites,
)

__all__ = [
    "APPLICATIONS",
    "DEFAULT_NFD_IMAGE",
    "DEVICE_MANAGER",
    "NFD_CRDS_DIR",
    "NODE_FEATURE_DISCOVERY",
    "BootstrapSettings",
    "device_manager_prerequisites",
    "installed_by_us",
    "nfd_prerequisites",
    "nfd_rbac_prerequisites",
    "parse_disabled_applications",
    "render_cpu_info_rule",
    "render_device_manager",
    "render_device_manager_rbac",
    "render_nfd",
    "render_nfd_crds",
    "render_nfd_rbac",
    "render_runtime_classes",
]
