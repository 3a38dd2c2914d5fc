"""Simulated devices: the ``sim.gpustack.ai/devices`` Node annotation (docs/simulator.md).

The simulator and ``plan`` read it as if a detector had found those cards, so the same label
arithmetic runs without hardware. Card UUIDs are synthesised from the entry's content and the
card's index, so they are the same on every read and the agent can compare detections.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.devices import DetectedDevice, DeviceGroup, group_devices

SIM_DEVICES_ANNOTATION: Final = "sim.gpustack.ai/devices"


class SimDevice(BaseModel):
    """One entry of the annotation: *count* identical cards."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    manufacturer: str
    name: str = Field(min_length=1)
    memory_mib: int = Field(alias="memoryMiB", ge=0)
    count: int = Field(default=1, ge=1, le=1024)
    cores: int = Field(default=0, ge=0)
    compute_capability: str = Field(default="", alias="computeCapability")
    family: str = ""
    driver_version: str = Field(default="", alias="driverVersion")
    runtime_version: str = Field(default="", alias="runtimeVersion")


def _fake_uuid(entry: SimDevice, card: int) -> str:
    seed = f"{entry.manufacturer}\0{entry.name}\0{entry.memory_mib}\0{card}".encode()
    digest = hashlib.sha256(seed).hexdigest()
    return f"SIM-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def parse_sim_entries(value: str) -> list[SimDevice]:
    """Validate the annotation's JSON; ``ValueError`` says what is wrong and where."""
    try:
        data = json.loads(value)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{SIM_DEVICES_ANNOTATION} is not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise ValueError(f"{SIM_DEVICES_ANNOTATION} must be a JSON list of device objects")
    entries: list[SimDevice] = []
    for i, item in enumerate(data):
        try:
            entries.append(SimDevice.model_validate(item))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'entry'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ValueError(f"{SIM_DEVICES_ANNOTATION}[{i}] is invalid: {problems}") from None
    return entries


def parse_sim_devices(
    value: str, manufacturers: Mapping[str, Manufacturer], *, with_memory: bool = False
) -> list[DeviceGroup]:
    """Device groups described by the annotation *value*, per manufacturer in first-seen order.

    Raises ``ValueError`` on bad JSON, missing fields or an unknown manufacturer.
    """
    entries = parse_sim_entries(value)
    per_mfr: dict[str, list[DetectedDevice]] = {}
    for i, entry in enumerate(entries):
        if entry.manufacturer not in manufacturers:
            known = ", ".join(sorted(manufacturers))
            raise ValueError(
                f"{SIM_DEVICES_ANNOTATION}[{i}]: unknown manufacturer "
                f"{entry.manufacturer!r} (known: {known})"
            )
        cards = per_mfr.setdefault(entry.manufacturer, [])
        for card in range(entry.count):
            cards.append(
                DetectedDevice(
                    name=entry.name,
                    memory_mib=entry.memory_mib,
                    cores=entry.cores,
                    driver_version=entry.driver_version,
                    runtime_version=entry.runtime_version,
                    compute_capability=entry.compute_capability,
                    family=entry.family,
                    uuid=_fake_uuid(entry, card),
                    index=len(cards),
                )
            )
    groups: list[DeviceGroup] = []
    for mfr, cards in per_mfr.items():
        groups.extend(group_devices(mfr, cards, with_memory=with_memory))
    return groups


def sim_card_counts(groups: list[DeviceGroup]) -> dict[str, int]:
    """Cards per manufacturer, for defaulting ``status.allocatable[<resource>]``."""
    counts: dict[str, int] = {}
    for group in groups:
        counts[group.manufacturer] = counts.get(group.manufacturer, 0) + len(group.accelerators)
    return counts
