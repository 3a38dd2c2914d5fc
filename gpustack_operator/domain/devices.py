"""Accelerator device groups (SPEC §4.2) and the device-manager labels built from them (§4.3).

A detector reports what it found as ``DeviceGroup`` values: devices grouped by product name and
memory. The group ID is the device key's id (``tesla-t4``); ``<manufacturer>-<id>`` is the
``aKey`` used in every ``acceleratable.feature.gpustack.ai/`` label.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Accelerator(BaseModel):
    """One physical card (or NPU) of a group."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="stable identity, e.g. the NVML UUID; empty when unknown")
    index: int = Field(ge=0, description="the vendor library's index, or PCI enumeration order")
    unhealthy: bool = False


class DeviceGroup(BaseModel):
    """Cards of one manufacturer sharing a product name and memory size."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="normalised product id without the manufacturer prefix")
    manufacturer: str
    name: str = Field(description="raw product name as the source reported it")
    memory_mib: int = Field(default=0, ge=0)
    cores: int = Field(default=0, ge=0)
    driver_version: str = ""
    runtime_version: str = ""
    compute_capability: str = ""
    family: str = ""
    accelerators: tuple[Accelerator, ...] = ()

    @property
    def key(self) -> str:
        """The ``aKey``: ``<manufacturer>-<id>``."""
        return f"{self.manufacturer}-{self.id}"
