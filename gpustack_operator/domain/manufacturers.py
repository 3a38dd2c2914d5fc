"""The accelerator manufacturers the operator knows (docs/configuration.md) and their overrides.

A manufacturer ties together the PCI vendor the device manager scans for, the extended
resource its device plugin advertises, the RuntimeClass its pods use, and the Kueue credits
resource its queues are measured in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from pydantic import BaseModel, ConfigDict

from gpustack_operator.domain.labels import CREDITS_PREFIX
from gpustack_operator.domain.validation import is_valid_dns_subdomain, is_valid_label_key


class Manufacturer(BaseModel):
    """One accelerator manufacturer with its effective (default or overridden) settings."""

    model_config = ConfigDict(frozen=True)

    name: str
    pci_vendor_id: str
    """The 4-hex-digit vendor used for PCI scanning (the part after the last ``_``)."""
    pci_class: str | None = None
    """The class part of a ``<class>_<vendor>`` override, else ``None``."""
    resource_name: str
    runtime_class: str | None = None
    agent: bool = True
    """Our device manager has a detector for it; ``False``: known from vendor labels and
    allocatable only (docs/devices.md, "Managed clouds and label-only accelerators")."""

    @property
    def credits_resource(self) -> str:
        """The Kueue resource queues of this manufacturer are measured in."""
        return f"{CREDITS_PREFIX}{self.name}"


# name -> (PCI vendor id, extended resource, RuntimeClass)
_DEFAULTS: Final[dict[str, tuple[str, str, str | None]]] = {
    "amd": ("1002", "amd.com/gpu", "amd"),
    "ascend": ("19e5", "huawei.com/npu", "ascend"),
    "cambricon": ("cabc", "cambricon.com/mlu", "cambricon"),
    "hygon": ("1d94", "hygon.com/dcu", "hygon"),
    "iluvatar": ("1e3e", "iluvatar.com/gpu", "iluvatar"),
    "metax": ("9999", "metax-tech.com/gpu", "metax"),
    "mthreads": ("1ed5", "mthreads.com/gpu", "mthreads"),
    "nvidia": ("10de", "nvidia.com/gpu", "nvidia"),
    "thead": ("1ded", "alibabacloud.com/ppu", None),
}
# Accelerators the chain knows from vendor labels and allocatable alone: the device manager
# has no detector for them, so no agent DaemonSet is rendered (docs/devices.md, "Managed
# clouds and label-only accelerators"). name -> (PCI vendor id, extended resource).
_LABEL_ONLY: Final[dict[str, tuple[str, str]]] = {
    "aws": ("1d0f", "aws.amazon.com/neuron"),
    "google": ("1ae0", "google.com/tpu"),
    "habana": ("1da3", "habana.ai/gaudi"),
}

KNOWN_MANUFACTURERS: Final[tuple[str, ...]] = tuple(sorted({*_DEFAULTS, *_LABEL_ONLY}))
AGENT_MANUFACTURERS: Final[tuple[str, ...]] = tuple(sorted(_DEFAULTS))
"""The manufacturers our device manager detects (and the worker bootstraps an agent for)."""
DEFAULT_PCI_CLASS_PREFIXES: Final = ("02", "03", "0b", "12")

_VENDOR = re.compile(r"[0-9a-f]{4}")
_CLASS = re.compile(r"[0-9a-f]{1,6}")

ENV_PREFIX: Final = "GPUSTACK_"
OVERRIDE_FIELDS: Final = (
    "pci_vendor_id",
    "acceleratable_resource_name",
    "acceleratable_runtime_name",
)
"""Per manufacturer, the settings ``GPUSTACK_<MFR>_<FIELD>`` overrides (docs/devices.md)."""


def env_var_name(field: str) -> str:
    """The environment variable behind a settings field name (``nvidia_pci_vendor_id``)."""
    return ENV_PREFIX + field.upper()


def _parse_vendor(var: str, raw: str) -> tuple[str, str | None]:
    value = raw.strip().lower()
    pci_class, sep, vendor = value.rpartition("_")
    if not _VENDOR.fullmatch(vendor) or (sep and not _CLASS.fullmatch(pci_class)):
        raise ValueError(
            f"{var}={raw!r} is invalid: expected a 4-digit hex PCI vendor id (10de) "
            "or <class>_<vendor> (0302_10de)"
        )
    return vendor, (pci_class if sep else None)


def _parse_resource(var: str, raw: str) -> str:
    value = raw.strip()
    if "/" not in value or not is_valid_label_key(value):
        raise ValueError(
            f"{var}={raw!r} is invalid: expected an extended resource name like nvidia.com/gpu"
        )
    return value


def _parse_runtime(var: str, raw: str) -> str:
    value = raw.strip()
    if not is_valid_dns_subdomain(value):
        raise ValueError(f"{var}={raw!r} is invalid: expected a RuntimeClass name like nvidia")
    return value


def manufacturers_with_overrides(
    overrides: Mapping[str, str | None],
) -> dict[str, Manufacturer]:
    """The known manufacturers with *overrides* applied, sorted by name.

    *overrides* maps ``<mfr>_<field>`` (:data:`OVERRIDE_FIELDS`) to the raw value of its
    ``GPUSTACK_`` variable; missing and ``None`` values keep the default. The configuration
    layer (``gpustack_operator.environment``) reads them. A bad value raises ``ValueError``
    naming the variable.
    """
    result: dict[str, Manufacturer] = {}
    for name in KNOWN_MANUFACTURERS:
        if name in _DEFAULTS:
            vendor, resource, runtime = _DEFAULTS[name]
        else:
            vendor, resource = _LABEL_ONLY[name]
            runtime = None
        pci_class: str | None = None
        raw_vendor = overrides.get(f"{name}_pci_vendor_id")
        if raw_vendor is not None:
            var = env_var_name(f"{name}_pci_vendor_id")
            vendor, pci_class = _parse_vendor(var, raw_vendor)
        raw_resource = overrides.get(f"{name}_acceleratable_resource_name")
        if raw_resource is not None:
            var = env_var_name(f"{name}_acceleratable_resource_name")
            resource = _parse_resource(var, raw_resource)
        raw_runtime = overrides.get(f"{name}_acceleratable_runtime_name")
        if raw_runtime is not None:
            var = env_var_name(f"{name}_acceleratable_runtime_name")
            runtime = _parse_runtime(var, raw_runtime)
        result[name] = Manufacturer(
            name=name,
            pci_vendor_id=vendor,
            pci_class=pci_class,
            resource_name=resource,
            runtime_class=runtime,
            agent=name in _DEFAULTS,
        )
    return result


def parse_pci_class_prefixes(raw: str) -> tuple[str, ...]:
    """``GPUSTACK_PCI_CLASS_PREFIXES`` as lower-case hex prefixes, duplicates removed
    (docs/devices.md; default ``02,03,0b,12``)."""
    prefixes: list[str] = []
    for part in raw.split(","):
        item = part.strip().lower()
        if not item:
            continue
        if not _CLASS.fullmatch(item):
            raise ValueError(
                f"GPUSTACK_PCI_CLASS_PREFIXES={raw!r} is invalid: {part.strip()!r} is not a "
                "hex PCI class prefix of 1 to 6 digits (e.g. 02,03,0b,12)"
            )
        if item not in prefixes:
            prefixes.append(item)
    if not prefixes:
        raise ValueError(
            f"GPUSTACK_PCI_CLASS_PREFIXES={raw!r} is invalid: list at least one class prefix"
        )
    return tuple(prefixes)


def default_manufacturers() -> dict[str, Manufacturer]:
    """The registry without any environment overrides (docs/configuration.md table)."""
    return manufacturers_with_overrides({})


class AcceleratorModel(BaseModel):
    """One accelerator model as its vendor names it, with the facts no label carries."""

    model_config = ConfigDict(frozen=True)

    manufacturer: str
    product: str
    memory_mib: int = 0
    cores: int = 0
    """Cores per device where the vendor schedules cores separately (AWS NeuronCores)."""


# Vendor facts the label sources read (docs/devices.md, "Managed clouds and label-only
# accelerators", where each is sourced). Kept here so that they sit beside the manufacturers.
GKE_GPU_MODELS: Final[Mapping[str, AcceleratorModel]] = {
    "nvidia-tesla-t4": AcceleratorModel(
        manufacturer="nvidia", product="Tesla T4", memory_mib=16384
    ),
    "nvidia-tesla-v100": AcceleratorModel(
        manufacturer="nvidia", product="Tesla V100-SXM2-16GB", memory_mib=16384
    ),
    "nvidia-tesla-p4": AcceleratorModel(manufacturer="nvidia", product="Tesla P4", memory_mib=8192),
    "nvidia-tesla-p100": AcceleratorModel(
        manufacturer="nvidia", product="Tesla P100-PCIE-16GB", memory_mib=16384
    ),
    "nvidia-tesla-a100": AcceleratorModel(
        manufacturer="nvidia", product="NVIDIA A100-SXM4-40GB", memory_mib=40960
    ),
    "nvidia-a100-80gb": AcceleratorModel(
        manufacturer="nvidia", product="NVIDIA A100-SXM4-80GB", memory_mib=81920
    ),
    "nvidia-l4": AcceleratorModel(manufacturer="nvidia", product="NVIDIA L4", memory_mib=24576),
    "nvidia-h100-80gb": AcceleratorModel(
        manufacturer="nvidia", product="NVIDIA H100 80GB HBM3", memory_mib=81920
    ),
    "nvidia-h100-mega-80gb": AcceleratorModel(
        manufacturer="nvidia", product="NVIDIA H100 80GB HBM3", memory_mib=81920
    ),
    "nvidia-h200-141gb": AcceleratorModel(
        manufacturer="nvidia", product="NVIDIA H200", memory_mib=144384
    ),
}
"""GKE's ``cloud.google.com/gke-accelerator`` values -> the card as NVIDIA names it."""

GKE_TPU_MODELS: Final[Mapping[str, AcceleratorModel]] = {
    "tpu-v4-podslice": AcceleratorModel(manufacturer="google", product="TPU v4", memory_mib=32768),
    "tpu-v5-lite-podslice": AcceleratorModel(
        manufacturer="google", product="TPU v5e", memory_mib=16384
    ),
    "tpu-v5-lite-device": AcceleratorModel(
        manufacturer="google", product="TPU v5e", memory_mib=16384
    ),
    "tpu-v5p-slice": AcceleratorModel(manufacturer="google", product="TPU v5p", memory_mib=97280),
    "tpu-v6e-slice": AcceleratorModel(manufacturer="google", product="TPU v6e", memory_mib=32768),
}
"""GKE's ``cloud.google.com/gke-tpu-accelerator`` values -> the TPU version (HBM per chip)."""

NEURON_MODELS: Final[Mapping[str, AcceleratorModel]] = {
    "inf1": AcceleratorModel(manufacturer="aws", product="Inferentia", memory_mib=8192, cores=4),
    "inf2": AcceleratorModel(manufacturer="aws", product="Inferentia2", memory_mib=32768, cores=2),
    "trn1": AcceleratorModel(manufacturer="aws", product="Trainium", memory_mib=32768, cores=2),
    "trn1n": AcceleratorModel(manufacturer="aws", product="Trainium", memory_mib=32768, cores=2),
    "trn2": AcceleratorModel(manufacturer="aws", product="Trainium2", memory_mib=98304, cores=8),
}
"""EC2 instance families with AWS Neuron devices -> the device (HBM and NeuronCores per
device)."""

GAUDI_MODELS: Final[Mapping[str, AcceleratorModel]] = {
    "1000": AcceleratorModel(manufacturer="habana", product="Gaudi", memory_mib=32768),
    "1010": AcceleratorModel(manufacturer="habana", product="Gaudi", memory_mib=32768),
    "1020": AcceleratorModel(manufacturer="habana", product="Gaudi2", memory_mib=98304),
    "1030": AcceleratorModel(manufacturer="habana", product="Gaudi2", memory_mib=98304),
    "1060": AcceleratorModel(manufacturer="habana", product="Gaudi3", memory_mib=131072),
}
"""Habana Labs PCI device ids (vendor ``1da3``) -> the Intel Gaudi generation."""

GAUDI_INSTANCE_FAMILIES: Final[Mapping[str, str]] = {"dl1": "1000"}
"""EC2 instance families with Gaudi cards -> their PCI device id in :data:`GAUDI_MODELS`."""
