"""What the chain needs from Kueue's own Configuration, and what a given one lacks.

Kueue reads its Configuration (``config.kueue.x-k8s.io``) from the
``controller_manager_config.yaml`` key of a ConfigMap (``kueue-manager-config`` in
``kueue-system`` as Kueue installs it). The worker only reads it; this module judges it
(docs/workloads.md, "Kueue's configuration"):

- ``device`` quotas (the default): ClusterQueues cover the device plugin's resource names, so
  Kueue must count them as a Pod requests them: no transformation may replace a covered
  resource and no ``resources.excludeResourcePrefixes`` entry may hide one;
- ``credits`` quotas: every vendor resource name must be turned into
  ``credits.gpustack.ai/<mfr>`` by a ``resources.transformations`` entry (strategy
  ``Replace``, one credit per unit);
- either way Kueue must manage ``batch/job`` (``integrations.frameworks``; an empty list
  means Kueue's default, ``batch/job`` alone).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import yaml

from gpustack_operator.domain.chain.queues import QuotaResources
from gpustack_operator.domain.labels import CREDITS_PREFIX
from gpustack_operator.domain.manufacturers import Manufacturer

DEFAULT_KUEUE_NAMESPACE: Final = "kueue-system"
DEFAULT_KUEUE_CONFIGMAP: Final = "kueue-manager-config"
CONFIG_KEY: Final = "controller_manager_config.yaml"
JOB_FRAMEWORK: Final = "batch/job"
HOST_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})

EXTRA_RESOURCE_NAMES: Final[Mapping[str, tuple[str, ...]]] = {
    "nvidia": (
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.5gb",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.20gb",
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/mig-4g.20gb",
        "nvidia.com/mig-4g.40gb",
        "nvidia.com/mig-7g.40gb",
        "nvidia.com/mig-7g.80gb",
    ),
}
"""Resource names a device plugin may advertise besides the manufacturer's own: NVIDIA's
time-slicing/MPS ``renameByDefault`` name and the MIG profiles of A100/H100 cards
(docs/workloads.md lists the sources)."""


@dataclass(frozen=True)
class KueueConfiguration:
    """Kueue's Configuration as the worker found it."""

    found: bool
    """The ConfigMap exists and holds the configuration key."""
    data: Mapping[str, Any]
    error: str = ""
    """Why the configuration could not be read (unparsable YAML), else empty."""

    @property
    def is_default(self) -> bool:
        """Kueue runs with its built-in defaults for what the chain depends on: no ConfigMap,
        or one without a ``resources`` section."""
        return not self.found or not self.data.get("resources")


@dataclass(frozen=True)
class Finding:
    """One piece of Kueue's configuration the chain needs and does not get."""

    piece: str
    """A short, stable name (the metric's ``piece`` label): ``transformation/nvidia.com/gpu``."""
    message: str
    """What is wrong and the fix."""


def parse_configuration(configmap: Mapping[str, Any] | None) -> KueueConfiguration:
    """Read the Configuration from Kueue's ConfigMap (``None``: the ConfigMap is absent)."""
    if configmap is None:
        return KueueConfiguration(found=False, data={})
    text = (configmap.get("data") or {}).get(CONFIG_KEY)
    if not text:
        return KueueConfiguration(found=False, data={})
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        return KueueConfiguration(found=True, data={}, error=f"invalid YAML: {err}")
    if not isinstance(data, dict):
        return KueueConfiguration(found=True, data={}, error="not a YAML mapping")
    return KueueConfiguration(found=True, data=data)


@dataclass(frozen=True)
class FairSharing:
    """Whether Kueue's fair sharing is on, as its Configuration says (docs/teams.md, "Fair
    sharing"): preemption and borrowing between the queues of a Cohort then follow the
    queues' weighted shares, not ``reclaimWithinCohort`` alone."""

    enabled: bool
    preemption_strategies: tuple[str, ...] = ()

    def describe(self) -> str:
        if not self.enabled:
            return (
                "Kueue's fair sharing is off: team queues reclaim their quota by classic "
                "preemption (reclaimWithinCohort)"
            )
        strategies = ", ".join(self.preemption_strategies) or (
            "no preemptionStrategies, which Kueue's v1beta2 validation requires"
        )
        return (
            f"Kueue's fair sharing is on ({strategies}): preemption between the queues of a "
            f"Cohort follows their shares; team queues carry their share as fairSharing.weight"
        )


def fair_sharing(config: KueueConfiguration) -> FairSharing:
    """Kueue's fair sharing setting in *config*. ``config.kueue.x-k8s.io/v1beta2`` turns it on
    by the ``fairSharing`` section's presence (kubernetes-sigs/kueue v0.19.2
    ``pkg/scheduler/preemption/fairsharing/strategy.go`` ``Enabled``); v1beta1 by
    ``fairSharing.enable: true`` (``apis/config/v1beta1/configuration_conversion.go``)."""
    section = config.data.get("fairSharing")
    if not isinstance(section, Mapping):
        return FairSharing(enabled=False)
    if str(config.data.get("apiVersion", "")).endswith("/v1beta1") and not section.get("enable"):
        return FairSharing(enabled=False)
    strategies = section.get("preemptionStrategies") or []
    return FairSharing(
        enabled=True,
        preemption_strategies=tuple(str(s) for s in strategies if isinstance(s, str)),
    )


def vendor_resource_names(manufacturer: Manufacturer) -> tuple[str, ...]:
    """Every resource name a device plugin of *manufacturer* may advertise."""
    extra = EXTRA_RESOURCE_NAMES.get(manufacturer.name, ())
    return (manufacturer.resource_name, *(n for n in extra if n != manufacturer.resource_name))


def credits_transformation(resource: str, manufacturer: Manufacturer) -> dict[str, Any]:
    """The transformation that charges one credit per unit of *resource*."""
    return {
        "input": resource,
        "strategy": "Replace",
        "outputs": {manufacturer.credits_resource: "1"},
    }


def recommended_configuration(
    quota_resources: QuotaResources | str, manufacturers: Mapping[str, Manufacturer]
) -> dict[str, Any]:
    """The Configuration fragment queues measured in *quota_resources* need
    (``credits``: deploy/components/kueue-config); ``ValueError`` for an unknown mode."""
    mode = QuotaResources(quota_resources)
    fragment: dict[str, Any] = {"integrations": {"frameworks": [JOB_FRAMEWORK]}}
    if mode is QuotaResources.CREDITS:
        fragment["resources"] = {
            "transformations": [
                credits_transformation(name, mfr)
                for _, mfr in sorted(manufacturers.items())
                for name in vendor_resource_names(mfr)
            ]
        }
    return fragment


def _transformations(config: KueueConfiguration) -> dict[str, Mapping[str, Any]]:
    resources = config.data.get("resources") or {}
    out: dict[str, Mapping[str, Any]] = {}
    for item in resources.get("transformations") or []:
        if isinstance(item, Mapping) and isinstance(item.get("input"), str):
            out[item["input"]] = item
    return out


def _excluded_prefixes(config: KueueConfiguration) -> list[str]:
    resources = config.data.get("resources") or {}
    return [p for p in resources.get("excludeResourcePrefixes") or [] if isinstance(p, str)]


def _frameworks(config: KueueConfiguration) -> list[str]:
    integrations = config.data.get("integrations") or {}
    return [f for f in integrations.get("frameworks") or [] if isinstance(f, str)]


def _where(config: KueueConfiguration) -> str:
    if not config.found:
        return "Kueue runs with its default configuration (no kueue-manager-config ConfigMap)"
    if config.is_default:
        return "Kueue's configuration has no resources section"
    return "Kueue's configuration"


def missing_pieces(
    config: KueueConfiguration,
    covered_resources: Iterable[str],
    manufacturers: Mapping[str, Manufacturer],
) -> list[Finding]:
    """What *config* lacks for ClusterQueues covering *covered_resources* (sorted by piece).

    *covered_resources* are the resources the worker's ClusterQueues cover, so the judgement
    follows what the queues really ask for (``credits.gpustack.ai/<mfr>`` or a device
    resource name) whichever ``--quota-resources`` wrote them; host resources (cpu, memory,
    ephemeral-storage) need nothing.
    """
    fix = "apply deploy/components/kueue-config (see docs/workloads.md) and restart Kueue"
    if config.error:
        return [
            Finding(
                "configuration",
                f"Kueue's configuration cannot be read ({config.error}); Kueue will not start "
                f"with it either: fix the {CONFIG_KEY} key of its ConfigMap",
            )
        ]
    findings: list[Finding] = []
    frameworks = _frameworks(config)
    if frameworks and JOB_FRAMEWORK not in frameworks:
        findings.append(
            Finding(
                "framework/batch-job",
                f"Kueue's integrations.frameworks lacks {JOB_FRAMEWORK}: Jobs are never queued; "
                f"add {JOB_FRAMEWORK} to integrations.frameworks, or {fix}",
            )
        )
    transformations = _transformations(config)
    excluded = _excluded_prefixes(config)
    by_credits = {m.credits_resource: m for m in manufacturers.values()}
    for resource in sorted(set(covered_resources) - HOST_RESOURCES):
        if resource.startswith(CREDITS_PREFIX):
            mfr = by_credits.get(resource)
            if mfr is None:
                continue
            name = mfr.resource_name
            item = transformations.get(name)
            outputs = (item or {}).get("outputs") or {}
            if item is None or item.get("strategy") != "Replace" or resource not in outputs:
                findings.append(
                    Finding(
                        f"transformation/{name}",
                        f"{_where(config)} lacks the resource transformation {name} -> "
                        f"{resource} (strategy Replace): a Job asking for {name} is never "
                        f"admitted to the {mfr.name} queues; {fix}",
                    )
                )
            continue
        item = transformations.get(resource)
        if item is not None and item.get("strategy") == "Replace":
            findings.append(
                Finding(
                    f"transformation/{resource}",
                    f"Kueue's configuration replaces {resource} by a transformation, but the "
                    f"queues cover {resource} itself: Jobs asking for it are never admitted; "
                    f"remove that transformation, or run the worker with "
                    f"--quota-resources=credits",
                )
            )
        hidden = [p for p in excluded if resource.startswith(p)]
        if hidden:
            findings.append(
                Finding(
                    f"excluded/{resource}",
                    f"Kueue's resources.excludeResourcePrefixes {hidden} hides {resource}: "
                    f"its quota is never enforced; remove the prefix from "
                    f"excludeResourcePrefixes",
                )
            )
    return sorted(findings, key=lambda f: f.piece)
