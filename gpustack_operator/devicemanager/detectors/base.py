"""What every detector promises, and the errors that make detection fall back to PCI.

A detector is synchronous and blocking (vendor libraries are C calls); the agent runs it in a
worker thread. Each instance serialises its own calls with a lock, so one detector may be
shared by the reconciler and the metrics collector.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import structlog

from gpustack_operator.domain.node.devices import DeviceGroup


class LibraryUnavailable(Exception):
    """The vendor library is missing, cannot be initialised, or broke while enumerating.

    Detection then falls back to the PCI detector for that manufacturer, with one warning that
    carries this message: say what failed and what the operator can do about it.
    """


@runtime_checkable
class Detector(Protocol):
    """Finds the devices of one manufacturer and returns them grouped (docs/device-manager.md)."""

    @property
    def manufacturer(self) -> str: ...

    @property
    def source(self) -> str:
        """Where the facts come from (``nvml``, ``amdsmi``, ``pci``, ``sim``), for people."""
        ...

    def detect(self) -> list[DeviceGroup]:
        """The device groups found now; raises ``LibraryUnavailable`` to ask for the fallback."""
        ...


@dataclass(frozen=True)
class DeviceSample:
    """Live readings of one card for ``/metrics``; ``None`` where the card cannot say."""

    manufacturer: str
    model: str
    uuid: str
    index: int
    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    healthy: bool | None = None


@runtime_checkable
class MetricsSource(Protocol):
    """A vendor library that can read live device metrics (NVML, amdsmi)."""

    @property
    def manufacturer(self) -> str: ...

    def sample(self) -> list[DeviceSample]:
        """Readings now; raises ``LibraryUnavailable`` when the library cannot be used."""
        ...


class WarnOnce:
    """Logs a warning the first time a (function, error) pair fails, debug afterwards.

    A card that does not support a query fails the same way on every detection and scrape;
    one warning tells the operator, repeating it every few seconds would drown the log.
    """

    def __init__(self, logger: structlog.typing.FilteringBoundLogger) -> None:
        self._log = logger
        self._seen: set[tuple[str, str]] = set()

    def __call__(self, key: tuple[str, str], message: str, **fields: object) -> None:
        if key in self._seen:
            self._log.debug(message, **fields)
            return
        self._seen.add(key)
        self._log.warning(message, **fields)
