"""One detection pass over every configured manufacturer (docs/device-manager.md).

For each manufacturer: look for its vendor's accelerator-class devices in PCI sysfs; none (and
the PCI check not disabled) means nothing to detect. Otherwise ask the vendor library (NVML
for NVIDIA, amdsmi for AMD); a manufacturer without a binding, or whose library is missing or
broken, is reported from PCI alone, with one warning naming the cause. The simulator replaces
all of this with the ``sim`` detector.

``DeviceDetection`` is long-lived (the agent keeps one) so that warnings are given once and the
``pci.ids`` database is read once; ``detect_all`` is the one-shot form for ``detect``.
Everything here blocks: the agent calls ``DeviceDetection.detect`` through ``anyio.to_thread``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from gpustack_operator.devicemanager.detectors.amd import AmdDetector
from gpustack_operator.devicemanager.detectors.base import (
    Detector,
    LibraryUnavailable,
    MetricsSource,
)
from gpustack_operator.devicemanager.detectors.nvidia import NvidiaDetector
from gpustack_operator.devicemanager.detectors.pci import (
    DEFAULT_PCI_ROOT,
    PciDetector,
    PciDevice,
    scan_pci_devices,
    select_devices,
)
from gpustack_operator.devicemanager.detectors.sim import SimDetector
from gpustack_operator.devicemanager.pciids import PciIds, find_pci_ids, load_pci_ids
from gpustack_operator.domain.manufacturers import AGENT_MANUFACTURERS, Manufacturer
from gpustack_operator.domain.node.devices import DeviceGroup, device_labels
from gpustack_operator.environment import (
    load_group_id_with_memory,
    load_manufacturers,
    load_pci_class_prefixes,
)

log = structlog.get_logger(__name__)

WSL_OSRELEASE = Path("/proc/sys/kernel/osrelease")


def running_under_wsl(osrelease: Path = WSL_OSRELEASE) -> bool:
    """WSL kernels name themselves ``...-microsoft-standard-WSL2``; they expose no PCI sysfs."""
    try:
        return "microsoft" in osrelease.read_text(encoding="utf-8", errors="replace").lower()
    except OSError:
        return False


@dataclass(frozen=True)
class DetectionConfig:
    """What to detect and where to look."""

    manufacturers: Mapping[str, Manufacturer]
    class_prefixes: tuple[str, ...]
    pci_root: Path = DEFAULT_PCI_ROOT
    pci_ids: Path | None = None
    no_pci_check: bool = False
    with_memory: bool = False
    env: Mapping[str, str] | None = None

    @classmethod
    def from_environment(
        cls,
        manufacturers: Iterable[str] | None = None,
        *,
        pci_root: Path = DEFAULT_PCI_ROOT,
        pci_ids: Path | str | None = None,
        no_pci_check: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> DetectionConfig:
        """Settings from ``GPUSTACK_*`` variables plus the command line.

        *manufacturers* ``None`` or empty selects every known one. Raises ``ValueError`` for an
        unknown manufacturer or an invalid environment value, naming it.
        """
        # Label-only manufacturers have no detector (docs/devices.md, "Managed clouds and
        # label-only accelerators").
        known = {name: m for name, m in load_manufacturers(env).items() if m.agent}
        wanted = [m.strip().lower() for m in manufacturers or () if m.strip()]
        unknown = sorted(set(wanted) - set(known))
        if unknown:
            raise ValueError(
                f"unknown manufacturer(s) {', '.join(unknown)}: "
                f"choose from {', '.join(AGENT_MANUFACTURERS)}"
            )
        selected = {name: known[name] for name in sorted(set(wanted) or set(known))}
        return cls(
            manufacturers=selected,
            class_prefixes=load_pci_class_prefixes(env),
            pci_root=pci_root,
            pci_ids=find_pci_ids(pci_ids, env),
            no_pci_check=no_pci_check,
            with_memory=load_group_id_with_memory(env),
            env=env,
        )


@dataclass(frozen=True)
class ManufacturerReport:
    """How one manufacturer was detected, for people reading ``detect`` output and logs.

    *source*: ``nvml``/``amdsmi`` (vendor library), ``pci`` (sysfs only), ``sim``, or ``none``
    (no device of that vendor on the PCI bus, so nothing was asked).
    """

    manufacturer: str
    source: str
    pci_devices: int
    devices: int
    note: str = ""


@dataclass(frozen=True)
class DetectionResult:
    groups: tuple[DeviceGroup, ...] = ()
    reports: tuple[ManufacturerReport, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def device_count(self) -> int:
        return sum(len(g.accelerators) for g in self.groups)

    def to_document(self) -> dict[str, Any]:
        """A plain, serialisable view (``detect -o json|yaml``); unknown values are left out."""
        return {
            "manufacturers": [
                {
                    "name": r.manufacturer,
                    "source": r.source,
                    "pciDevices": r.pci_devices,
                    "devices": r.devices,
                    **({"note": r.note} if r.note else {}),
                }
                for r in self.reports
            ],
            "groups": [_group_document(g) for g in self.groups],
            "labels": dict(self.labels),
        }

    def identity(self) -> tuple[tuple[str, str, bool], ...]:
        """(manufacturer, card id, unhealthy) of every card, sorted: what the monitor compares.

        A sorted tuple rather than a set, so two cards without a known id still count twice.
        """
        return tuple(
            sorted((g.manufacturer, a.id, a.unhealthy) for g in self.groups for a in g.accelerators)
        )


def _group_document(group: DeviceGroup) -> dict[str, Any]:
    doc: dict[str, Any] = {"key": group.key, "manufacturer": group.manufacturer, "name": group.name}
    for name, value in (
        ("memoryMiB", group.memory_mib),
        ("cores", group.cores),
        ("driverVersion", group.driver_version),
        ("runtimeVersion", group.runtime_version),
        ("computeCapability", group.compute_capability),
        ("family", group.family),
    ):
        if value:
            doc[name] = value
    doc["accelerators"] = [
        {"id": a.id, "index": a.index, "unhealthy": a.unhealthy} for a in group.accelerators
    ]
    return doc


def _result(
    groups: Sequence[DeviceGroup], reports: Sequence[ManufacturerReport]
) -> DetectionResult:
    return DetectionResult(
        groups=tuple(groups), reports=tuple(reports), labels=device_labels(groups)
    )


def default_library_detectors(config: DetectionConfig) -> dict[str, Detector]:
    """The vendor-library detectors this project binds (NVML, amdsmi)."""
    detectors: dict[str, Detector] = {}
    if "nvidia" in config.manufacturers:
        detectors["nvidia"] = NvidiaDetector(with_memory=config.with_memory)
    if "amd" in config.manufacturers:
        detectors["amd"] = AmdDetector(env=config.env, with_memory=config.with_memory)
    return detectors


class DeviceDetection:
    """Runs detection passes for a fixed configuration; thread-safe, one pass at a time."""

    def __init__(
        self,
        config: DetectionConfig,
        *,
        library_detectors: Mapping[str, Detector] | None = None,
        sim: SimDetector | None = None,
    ) -> None:
        self.config = config
        self._libraries = dict(
            default_library_detectors(config) if library_detectors is None else library_detectors
        )
        self._sim = sim
        self._pci_ids: PciIds | None = None
        self._warned_fallback: set[str] = set()
        self._disagreements: dict[str, tuple[int, int]] = {}
        self._answered: set[str] = set()
        self._lock = threading.Lock()

    def metrics_sources(self) -> list[MetricsSource]:
        """The vendor libraries that answered the last detection and can report live metrics.

        A manufacturer with no card on the bus, or whose library is unavailable, exports no
        series at all rather than a permanently failing one.
        """
        if self._sim is not None:
            return []
        return [
            d
            for name, d in self._libraries.items()
            if name in self._answered and isinstance(d, MetricsSource)
        ]

    def _database(self) -> PciIds:
        if self._pci_ids is None:
            vendors = {m.pci_vendor_id for m in self.config.manufacturers.values()}
            self._pci_ids = load_pci_ids(self.config.pci_ids, vendors)
        return self._pci_ids

    def detect(self) -> DetectionResult:
        """One pass: groups of every configured manufacturer, their labels, and how."""
        with self._lock:
            if self._sim is not None:
                return self._detect_sim(self._sim)
            bus = scan_pci_devices(self.config.pci_root)
            groups: list[DeviceGroup] = []
            reports: list[ManufacturerReport] = []
            for name, manufacturer in self.config.manufacturers.items():
                found, report = self._detect_one(name, manufacturer, bus)
                groups.extend(found)
                reports.append(report)
            library_sources = {d.source for d in self._libraries.values()}
            self._answered = {r.manufacturer for r in reports if r.source in library_sources}
            return _result(groups, reports)

    def _detect_sim(self, sim: SimDetector) -> DetectionResult:
        found = [g for g in sim.detect() if g.manufacturer in self.config.manufacturers]
        reports = [
            ManufacturerReport(
                manufacturer=name,
                source="sim",
                pci_devices=0,
                devices=sum(len(g.accelerators) for g in found if g.manufacturer == name),
            )
            for name in self.config.manufacturers
        ]
        return _result(found, reports)

    def _detect_one(
        self, name: str, manufacturer: Manufacturer, bus: Sequence[PciDevice]
    ) -> tuple[list[DeviceGroup], ManufacturerReport]:
        pci_devices = select_devices(bus, manufacturer.pci_vendor_id, self.config.class_prefixes)
        if not pci_devices and not self.config.no_pci_check:
            note = (
                f"no PCI device of vendor {manufacturer.pci_vendor_id} in classes "
                f"{','.join(self.config.class_prefixes)}"
            )
            return [], ManufacturerReport(name, "none", 0, 0, note)
        pci = PciDetector(
            name,
            manufacturer.pci_vendor_id,
            self.config.class_prefixes,
            root=self.config.pci_root,
            pci_ids=self._database(),
            with_memory=self.config.with_memory,
        )
        library = self._libraries.get(name)
        note = ""
        if library is None:
            groups = pci.group(pci_devices)
            source = "pci"
            note = "no vendor library binding: presence, count and PCI product name only"
        else:
            try:
                groups = library.detect()
                source = library.source
            except Exception as exc:  # any library failure degrades to PCI
                groups = pci.group(pci_devices)
                source = "pci"
                note = str(exc) if isinstance(exc, LibraryUnavailable) else repr(exc)
                self._warn_fallback(name, library.source, note, exc)
            else:
                self._warned_fallback.discard(name)
        count = sum(len(g.accelerators) for g in groups)
        self._note_disagreement(name, source, count, len(pci_devices))
        return groups, ManufacturerReport(name, source, len(pci_devices), count, note)

    def _note_disagreement(self, name: str, source: str, count: int, on_bus: int) -> None:
        """Log once per new mismatch (e.g. a container that sees only some of the cards)."""
        if source == "pci" or not on_bus or count == on_bus:
            self._disagreements.pop(name, None)
            return
        if self._disagreements.get(name) == (count, on_bus):
            return
        self._disagreements[name] = (count, on_bus)
        log.info(
            "vendor library and PCI bus disagree on the number of devices; using the library",
            manufacturer=name,
            library=source,
            library_devices=count,
            pci_devices=on_bus,
        )

    def _warn_fallback(self, name: str, library: str, reason: str, exc: Exception) -> None:
        if name in self._warned_fallback:
            log.debug("vendor library still unavailable", manufacturer=name, reason=reason)
            return
        self._warned_fallback.add(name)
        log.warning(
            "vendor library unavailable; reporting devices from PCI only "
            "(no memory, cores, versions or health)",
            manufacturer=name,
            library=library,
            reason=reason,
            **({} if isinstance(exc, LibraryUnavailable) else {"error_type": type(exc).__name__}),
        )


def detect_all(
    manufacturers: Iterable[str] | None = None,
    *,
    pci_root: Path = DEFAULT_PCI_ROOT,
    pci_ids: Path | str | None = None,
    no_pci_check: bool = False,
    env: Mapping[str, str] | None = None,
) -> DetectionResult:
    """One detection pass with settings from the environment (see ``DetectionConfig``)."""
    config = DetectionConfig.from_environment(
        manufacturers, pci_root=pci_root, pci_ids=pci_ids, no_pci_check=no_pci_check, env=env
    )
    return DeviceDetection(config).detect()
