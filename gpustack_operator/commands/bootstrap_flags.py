"""The ``worker`` flags of Stage 1 (docs/worker.md) and the start-up step they drive.

Kept apart from ``commands/worker.py`` so the worker command only adds three calls:
:func:`add_bootstrap_flags` when building its parser, :func:`bootstrap_config` when reading
it, and :func:`start_bootstrap` before running its manager.
"""

from __future__ import annotations

import argparse

import structlog

from gpustack_operator.controllers.bootstrap import BootstrapConfig, check_nfd_crds, setup_bootstrap
from gpustack_operator.domain.bootstrap import APPLICATIONS, DEFAULT_NFD_IMAGE
from gpustack_operator.runtime.client import ApiError, Client
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.worker.prerequisites import check_cluster_prerequisites

log = structlog.get_logger(__name__)


def add_bootstrap_flags(parser: argparse._ActionsContainer) -> None:
    """The worker's flags for what it installs itself (NFD, device-manager DaemonSets)."""
    parser.add_argument(
        "--disable-applications",
        action="append",
        default=[],
        metavar="NAMES",
        help=f"applications not to install: {', '.join(APPLICATIONS)} or * (comma list, "
        "repeatable; default: install both)",
    )
    parser.add_argument(
        "--nfd-image",
        default=DEFAULT_NFD_IMAGE,
        metavar="IMAGE",
        help=f"Node Feature Discovery image (default: {DEFAULT_NFD_IMAGE})",
    )
    parser.add_argument(
        "--device-manager-image",
        metavar="IMAGE",
        help="image of the device-manager DaemonSets (default: the worker's own, read from "
        "its Pod named by $KUBERNETES_POD_NAME)",
    )
    parser.add_argument(
        "--coexistence",
        choices=("auto", "off"),
        default="auto",
        help="auto: no device-manager agent on nodes whose devices GPU Feature Discovery or "
        "the AMD node labeller already describe (their labels are used instead); off: an "
        "agent on every node with the vendor's PCI device (default: auto)",
    )


def bootstrap_config(args: argparse.Namespace) -> BootstrapConfig:
    """The bootstrap configuration of the parsed flags; ``ValueError`` for bad values."""
    return BootstrapConfig.from_environment(
        namespace=args.system_namespace,
        disabled=args.disable_applications or (),
        nfd_image=args.nfd_image,
        device_manager_image=args.device_manager_image,
        manufacturers=args.manufacturer,
        coexistence=args.coexistence == "auto",
    )


async def start_bootstrap(client: Client, manager: Manager, config: BootstrapConfig) -> None:
    """Check the cluster's prerequisites (docs/deploy.md: version, admission policies; a
    problem keeps ``/readyz`` failing with what to change), check NFD's CRDs are installed
    (the worker's informers need them to sync; they ship with deploy/), then register the
    bootstrap controller, which runs while *manager* leads.

    A failed check is logged, not fatal: the bootstrap controller checks again, and the
    manager's cache-sync timeout names the kinds that stay missing.
    """
    await check_cluster_prerequisites(
        client, manager, pod_name=config.pod_name, namespace=config.pod_namespace
    )
    try:
        await check_nfd_crds(client, config)
    except ApiError as exc:
        log.error(
            "cannot read the NFD CRDs before start-up; the bootstrap controller retries",
            error=str(exc),
            hint="check the worker's RBAC for customresourcedefinitions (deploy/base)",
        )
    setup_bootstrap(manager, config)
