"""What the bootstrap keeps installed, decided from facts the reconciler gathered (pure).

The reconciler reads the caches and the API (is NFD someone else's? are NodeFeatureRules
served? which image do the agents run?) and passes the answers in; this module turns them
into manifests. docs/deploy.md states the rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gpustack_operator.domain.bootstrap.common import (
    DEVICE_MANAGER,
    NODE_FEATURE_DISCOVERY,
    BootstrapSettings,
)
from gpustack_operator.domain.bootstrap.devicemanager import (
    render_device_manager,
    render_runtime_classes,
)
from gpustack_operator.domain.bootstrap.nfd import render_cpu_info_rule, render_nfd

__all__ = ["DesiredBootstrap", "desired_bootstrap"]

JSON = dict[str, Any]


@dataclass
class DesiredBootstrap:
    """The objects to keep applied and those to create only when missing."""

    applied: list[JSON] = field(default_factory=list)
    created_if_missing: list[JSON] = field(default_factory=list)
    """RuntimeClasses: created when missing, never updated (someone may own them)."""


def desired_bootstrap(
    settings: BootstrapSettings,
    disabled: frozenset[str],
    manufacturers: Iterable[str],
    *,
    nfd: bool,
    rules_served: bool,
    agent_image: tuple[str, str] | None,
) -> DesiredBootstrap:
    """The bootstrap's objects.

    *nfd*: NFD is to be installed (not disabled, not installed by someone else, and its
    prerequisites shipped with deploy/ exist); *rules_served*: NodeFeatureRules can be
    written; *agent_image*: the device manager's (image, pull policy), None when unknown
    (no DaemonSet is rendered).
    """
    desired = DesiredBootstrap()
    if nfd and NODE_FEATURE_DISCOVERY not in disabled:
        desired.applied += render_nfd(settings)
    if rules_served:
        desired.applied.append(
            render_cpu_info_rule(settings.pci_class_prefixes, settings.manufacturers)
        )
    if DEVICE_MANAGER not in disabled and agent_image is not None:
        image, policy = agent_image
        with_policy = replace(settings, image_pull_policy=policy)
        chosen = tuple(manufacturers)
        desired.applied += render_device_manager(with_policy, chosen, image)
        desired.created_if_missing += render_runtime_classes(
            [with_policy.manufacturers[m] for m in chosen]
        )
    return desired
