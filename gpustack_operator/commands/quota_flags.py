"""``--quota-resources``, shared by ``worker``, ``plan`` and ``sim``."""

from __future__ import annotations

import argparse

from gpustack_operator.domain.queues import DEFAULT_QUOTA_RESOURCES, QuotaResources


def add_quota_resources_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add ``--quota-resources {device,credits}`` (docs/devices.md, "Quota resources")."""
    parser.add_argument(
        "--quota-resources",
        choices=[q.value for q in QuotaResources],
        default=DEFAULT_QUOTA_RESOURCES.value,
        help="what device ClusterQueues are measured in: device = the pool's own resource "
        "(nvidia.com/gpu, nvidia.com/mig-1g.10gb), so plain Jobs asking for it are admitted; "
        "credits = credits.gpustack.ai/<manufacturer> (default: %(default)s)",
    )
