"""The tenant settings (docs/tenants.md), shared by ``worker``, ``plan`` and ``sim``."""

from __future__ import annotations

import argparse

from gpustack_operator.commands.argtypes import comma_list
from gpustack_operator.domain.tenancy import TENANCY_AUTO, TENANCY_CHOICES


def quota_caps(raw: str) -> dict[str, int]:
    """``RESOURCE=N,...`` (``nvidia.com/gpu=4``): the declared cap per device resource."""
    caps: dict[str, int] = {}
    for item in comma_list(raw):
        resource, sep, amount = item.partition("=")
        if not sep or not resource.strip() or not amount.strip().isdigit():
            raise argparse.ArgumentTypeError(
                f"{item!r}: expected RESOURCE=N with a whole number, e.g. nvidia.com/gpu=4"
            )
        caps[resource.strip()] = int(amount)
    return caps


def add_tenant_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add ``--tenancy``, ``--virtual-scheduler`` and ``--tenant-quota-cap``."""
    parser.add_argument(
        "--tenancy",
        choices=TENANCY_CHOICES,
        default=TENANCY_AUTO,
        help="the kind of cluster: ordinary (also a vCluster tenant on private nodes), "
        "shared-nodes (a vCluster tenant on synced host nodes), pseudo-nodes (a vCluster "
        "tenant of pseudo nodes); auto: told from the Nodes (default: %(default)s)",
    )
    parser.add_argument(
        "--virtual-scheduler",
        action="store_true",
        default=False,
        help="a shared-node tenant runs vCluster's virtual scheduler, which places pods by "
        "the tenant's own Node copies: flavors may then select any label they carry",
    )
    parser.add_argument(
        "--tenant-quota-cap",
        type=quota_caps,
        default={},
        metavar="RESOURCE=N,...",
        help="in a shared-node tenant, this tenant's share of each device resource, e.g. "
        "nvidia.com/gpu=4: it bounds every device ClusterQueue's quota (default: none; "
        "the quota is then the host's whole, shared capacity)",
    )
