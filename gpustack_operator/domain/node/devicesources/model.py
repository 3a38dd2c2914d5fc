"""What a device source reports: pools (one per device model) and reasons for no pool."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DevicePool:
    """The cards (or MIG devices) of one model on one node, as one source describes them.

    ``count`` is the number of physical devices of the model (what the ``-<n>d`` of the
    flavor counts); ``resource`` is the extended resource the device plugin advertises
    them as; ``sliced`` is the number of partitions each device is shared into (0: not
    shared).
    """

    source: str
    manufacturer: str
    product: str
    count: int
    resource: str
    memory_mib: int = 0
    cores: int = 0
    family: str = ""
    compute_capability: str = ""
    driver_version: str = ""
    runtime_version: str = ""
    sliced: int = 0
    dra: bool = False
    """Published through DRA: no allocatable count, the quota is ``count``."""


@dataclass(frozen=True)
class Diagnostic:
    """Why a device a source saw gets no pool (docs/devices.md, "Why a device gets no pool").

    ``reason`` is a short machine-readable code, ``detail`` one human line.
    """

    source: str
    reason: str
    detail: str
    resource: str = ""
    """The allocatable resource the reason accounts for (``""``: none), so that it is not
    reported again as a resource that feeds no pool."""

    def __str__(self) -> str:
        return f"{self.source}: {self.detail}"


# Reason codes (docs/devices.md, "Why a device gets no pool").
NO_ALLOCATABLE = "no-allocatable-resource"
COUNT_MISSING = "count-missing"
PRODUCT_MISSING = "product-missing"
EXCLUDED_MIG_PROFILE = "excluded-mig-profile"
UNKNOWN_VENDOR = "unknown-vendor"
DESCRIBED_BY_AGENT = "described-by-agent"
AMBIGUOUS_MODELS = "ambiguous-models"
DUPLICATE_KEY = "duplicate-key"
MODEL_UNKNOWN = "model-unknown"
UNKNOWN_RESOURCE = "unknown-resource"
COUNTED_AS_DEVICES = "counted-as-devices"

INFORMATIONAL_REASONS = frozenset({DESCRIBED_BY_AGENT, COUNTED_AS_DEVICES})
"""Reasons whose devices do feed a pool (through another source, or as whole devices): the
worker reports them in ``plan`` only, not as unpooled devices."""
