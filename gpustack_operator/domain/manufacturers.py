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

KNOWN_MANUFACTURERS: Final[tuple[str, ...]] = tuple(sorted(_DEFAULTS))
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
    """The nine manufacturers with *overrides* applied, sorted by name.

    *overrides* maps ``<mfr>_<field>`` (:data:`OVERRIDE_FIELDS`) to the raw value of its
    ``GPUSTACK_`` variable; missing and ``None`` values keep the default. The configuration
    layer (``gpustack_operator.environment``) reads them. A bad value raises ``ValueError``
    naming the variable.
    """
    result: dict[str, Manufacturer] = {}
    for name in KNOWN_MANUFACTURERS:
        vendor, resource, runtime = _DEFAULTS[name]
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
