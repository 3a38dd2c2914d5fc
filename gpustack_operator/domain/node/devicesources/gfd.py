"""NVIDIA GPU Feature Discovery labels -> device pools (docs/devices.md, "NVIDIA").

GFD labels every resource the NVIDIA device plugin advertises as
``<resource>.<attribute>``: full cards under ``nvidia.com/gpu.*``, MIG devices of the
``mixed`` strategy under ``nvidia.com/mig-<profile>.*``. Under the ``single`` strategy the
MIG devices are advertised as ``nvidia.com/gpu`` and the product carries
``-MIG-<profile>``. With time-slicing or MPS ``.replicas`` is above 1 and the product may
end in ``-SHARED`` (not part of the model's name); with ``renameByDefault`` the shared
resource is ``nvidia.com/gpu.shared``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from gpustack_operator.domain.node.devicesources.common import allocatable_count, label_count
from gpustack_operator.domain.node.devicesources.model import (
    COUNT_MISSING,
    EXCLUDED_MIG_PROFILE,
    NO_ALLOCATABLE,
    PRODUCT_MISSING,
    DevicePool,
    Diagnostic,
)

SOURCE: Final = "nvidia-gfd"
MANUFACTURER: Final = "nvidia"
GPU_RESOURCE: Final = "nvidia.com/gpu"
SHARED_RESOURCE: Final = "nvidia.com/gpu.shared"
GPU_PREFIX: Final = "nvidia.com/gpu."
PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
COUNT_LABEL: Final = "nvidia.com/gpu.count"
MIG_STRATEGY_LABEL: Final = "nvidia.com/mig.strategy"
SHARING_STRATEGIES: Final = ("time-slicing", "mps")
DRIVER_FULL_LABEL: Final = "nvidia.com/cuda.driver-version.full"
RUNTIME_FULL_LABEL: Final = "nvidia.com/cuda.runtime-version.full"
_MIG_COUNT: Final = re.compile(r"nvidia\.com/mig-([0-9a-z.+-]+)\.count")
_SHARED_SUFFIX: Final = "-SHARED"


def _versions(labels: Mapping[str, str]) -> tuple[str, str]:
    """Driver and CUDA runtime versions: the ``.full`` labels, else major.minor[.rev]."""
    driver = labels.get(DRIVER_FULL_LABEL, "")
    if not driver:
        parts = [labels.get(f"nvidia.com/cuda.driver.{p}", "") for p in ("major", "minor", "rev")]
        driver = ".".join(p for p in parts if p) if parts[0] else ""
    runtime = labels.get(RUNTIME_FULL_LABEL, "")
    if not runtime:
        major = labels.get("nvidia.com/cuda.runtime.major", "")
        minor = labels.get("nvidia.com/cuda.runtime.minor", "")
        runtime = f"{major}.{minor}" if major and minor else major
    return driver, runtime


def _architecture(labels: Mapping[str, str]) -> tuple[str, str]:
    """Family (``ampere`` -> ``Ampere``) and compute capability (``8.0``) of the cards."""
    family = labels.get(GPU_PREFIX + "family", "")
    major = labels.get(GPU_PREFIX + "compute.major", "")
    minor = labels.get(GPU_PREFIX + "compute.minor", "")
    comcap = f"{major}.{minor}" if major.isdigit() and minor.isdigit() else ""
    return (family.capitalize() if family and family != "undefined" else ""), comcap


def _memory(labels: Mapping[str, str], prefix: str) -> int:
    return label_count(labels, prefix + "memory") or 0


def _sliced(labels: Mapping[str, str], prefix: str) -> int:
    """Replicas per device when shared by time-slicing or MPS, else 0."""
    replicas = label_count(labels, prefix + "replicas") or 0
    strategy = labels.get(prefix + "sharing-strategy", "")
    if replicas > 1 and strategy in SHARING_STRATEGIES:
        return replicas
    if replicas > 1 and not strategy:  # GFD before the sharing-strategy label: time-slicing
        return replicas
    return 0


def _has_mixed_mig(labels: Mapping[str, str]) -> bool:
    return labels.get(MIG_STRATEGY_LABEL) == "mixed" or any(
        k.startswith("nvidia.com/mig-") and k.endswith(".count") for k in labels
    )


def _full_cards(
    labels: Mapping[str, str], allocatable: Mapping[str, object]
) -> tuple[list[DevicePool], list[Diagnostic]]:
    product = labels.get(PRODUCT_LABEL, "").removesuffix(_SHARED_SUFFIX)
    count = label_count(labels, COUNT_LABEL)
    if not product and count is None:
        return [], []
    if not product:
        detail = f"{COUNT_LABEL} is set but {PRODUCT_LABEL} is missing"
        return [], [Diagnostic(SOURCE, PRODUCT_MISSING, detail, GPU_RESOURCE)]
    if count is None:
        detail = f"{product}: {COUNT_LABEL} is missing or not a positive count"
        return [], [Diagnostic(SOURCE, COUNT_MISSING, detail, GPU_RESOURCE)]
    sliced = _sliced(labels, GPU_PREFIX)
    resource = GPU_RESOURCE
    if allocatable_count(allocatable, GPU_RESOURCE) == 0 and allocatable_count(
        allocatable, SHARED_RESOURCE
    ):
        resource = SHARED_RESOURCE  # the device plugin's renameByDefault
    if allocatable_count(allocatable, resource) == 0:
        detail = (
            f"{product}: no allocatable {GPU_RESOURCE} (the device plugin has not registered "
            "the cards, or they are partitioned into MIG devices)"
        )
        return [], [Diagnostic(SOURCE, NO_ALLOCATABLE, detail)]
    if _has_mixed_mig(labels):
        # gpu.count counts the MIG-enabled cards too; the full cards are what the device
        # plugin advertises as whole GPUs (docs/devices.md, "NVIDIA").
        count = min(count, allocatable_count(allocatable, resource) // max(sliced, 1)) or count
    family, comcap = _architecture(labels)
    driver, runtime = _versions(labels)
    pool = DevicePool(
        source=SOURCE,
        manufacturer=MANUFACTURER,
        product=product,
        count=count,
        resource=resource,
        memory_mib=_memory(labels, GPU_PREFIX),
        cores=0,
        family=family,
        compute_capability=comcap,
        driver_version=driver,
        runtime_version=runtime,
        sliced=sliced,
    )
    return [pool], []


def _mig_mixed(
    labels: Mapping[str, str], allocatable: Mapping[str, object]
) -> tuple[list[DevicePool], list[Diagnostic]]:
    pools: list[DevicePool] = []
    problems: list[Diagnostic] = []
    family, comcap = _architecture(labels)
    driver, runtime = _versions(labels)
    for key in sorted(labels):
        match = _MIG_COUNT.fullmatch(key)
        if match is None:
            continue
        profile = match.group(1)
        prefix = f"nvidia.com/mig-{profile}."
        resource = f"nvidia.com/mig-{profile}"
        count = label_count(labels, key)
        product = labels.get(prefix + "product", "").removesuffix(_SHARED_SUFFIX)
        if count is None:
            detail = f"MIG profile {profile}: {key} is not a positive count"
            problems.append(Diagnostic(SOURCE, EXCLUDED_MIG_PROFILE, detail))
            continue
        if not product:
            detail = f"MIG profile {profile}: {prefix}product is missing"
            problems.append(Diagnostic(SOURCE, EXCLUDED_MIG_PROFILE, detail))
            continue
        if allocatable_count(allocatable, resource) == 0:
            detail = f"MIG profile {profile}: no allocatable {resource}"
            problems.append(Diagnostic(SOURCE, EXCLUDED_MIG_PROFILE, detail))
            continue
        pools.append(
            DevicePool(
                source=SOURCE,
                manufacturer=MANUFACTURER,
                product=product,
                count=count,
                resource=resource,
                memory_mib=_memory(labels, prefix),
                family=family,
                compute_capability=comcap,
                driver_version=driver,
                runtime_version=runtime,
                sliced=_sliced(labels, prefix),
            )
        )
    return pools, problems


def gfd_pools(
    labels: Mapping[str, str], allocatable: Mapping[str, object]
) -> tuple[list[DevicePool], list[Diagnostic]]:
    """The NVIDIA device pools GFD describes on a node, and why others get none.

    Full cards (and MIG devices of the ``single`` strategy, whose product names the profile)
    come from ``nvidia.com/gpu.*``; each ``mixed`` MIG profile is a pool of its own.
    """
    pools, problems = _full_cards(labels, allocatable)
    mig_pools, mig_problems = _mig_mixed(labels, allocatable)
    return pools + mig_pools, problems + mig_problems


def describes_node(labels: Mapping[str, str]) -> bool:
    """Whether GFD labels describe the node's NVIDIA devices (used for coexistence)."""
    return PRODUCT_LABEL in labels or any(_MIG_COUNT.fullmatch(k) for k in labels)
