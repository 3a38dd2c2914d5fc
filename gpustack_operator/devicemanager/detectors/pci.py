"""Accelerators seen on the PCI bus through sysfs (``/sys/bus/pci/devices``).

Every manufacturer is checked here first (docs/device-manager.md): no device of its vendor in an
accelerator class means nothing to detect. For manufacturers without a vendor library binding,
or when that library is missing or broken, this is also the detector: it knows that cards are
present, how many, and — when a ``pci.ids`` database is installed — their product name. Memory,
cores, versions and health are unknown to PCI and are left empty rather than guessed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from gpustack_operator.devicemanager.pciids import PciIds
from gpustack_operator.domain.node.devices import DetectedDevice, DeviceGroup, group_devices

log = structlog.get_logger(__name__)

DEFAULT_PCI_ROOT = Path("/sys/bus/pci/devices")


@dataclass(frozen=True)
class PciDevice:
    """One PCI function: bus address and IDs as lower-case hex without ``0x``."""

    address: str
    vendor_id: str
    device_id: str
    class_code: str


def _read_hex(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip().lower()
    except OSError:
        return None
    value = text.removeprefix("0x")
    if not value or any(c not in "0123456789abcdef" for c in value):
        return None
    return value


def scan_pci_devices(root: Path = DEFAULT_PCI_ROOT) -> list[PciDevice]:
    """Every PCI function under *root*, sorted by bus address; unreadable entries are skipped.

    A missing *root* (WSL, some containers) is an empty bus, not an error.
    """
    try:
        entries = sorted(root.iterdir(), key=lambda p: p.name)
    except OSError:
        return []
    found: list[PciDevice] = []
    for entry in entries:
        vendor = _read_hex(entry / "vendor")
        device = _read_hex(entry / "device")
        pci_class = _read_hex(entry / "class")
        if vendor is None or device is None or pci_class is None:
            continue
        found.append(
            PciDevice(
                address=entry.name,
                vendor_id=vendor.zfill(4),
                device_id=device.zfill(4),
                class_code=pci_class.zfill(6),
            )
        )
    return found


def select_devices(
    devices: Iterable[PciDevice], vendor_id: str, class_prefixes: Iterable[str]
) -> list[PciDevice]:
    """The devices of *vendor_id* whose 6-digit class starts with one of *class_prefixes*."""
    vendor = vendor_id.lower().removeprefix("0x")
    prefixes = tuple(p.lower().removeprefix("0x") for p in class_prefixes)
    return [d for d in devices if d.vendor_id == vendor and d.class_code.startswith(prefixes)]


def product_name(device: PciDevice, pci_ids: PciIds) -> str:
    """The product name for *device*: the marketing name from ``pci.ids`` when known.

    ``pci.ids`` writes NVIDIA and AMD entries as ``<chip> [<marketing name>]``
    (``TU104GL [Tesla T4]``); the bracketed part is what the vendor libraries report as the
    name, so using it keeps group IDs stable when detection falls back to PCI. Without a
    database entry the name is the PCI ID pair ``10de:1eb8`` — a fact, not a guess.
    """
    name = pci_ids.device_name(device.vendor_id, device.device_id)
    if not name:
        return f"{device.vendor_id}:{device.device_id}"
    start, end = name.find("["), name.rfind("]")
    if 0 <= start < end and name[start + 1 : end].strip():
        return name[start + 1 : end].strip()
    return name


class PciDetector:
    """Groups a manufacturer's PCI devices by product name; every other fact stays unknown."""

    source = "pci"

    def __init__(
        self,
        manufacturer: str,
        vendor_id: str,
        class_prefixes: Iterable[str],
        *,
        root: Path = DEFAULT_PCI_ROOT,
        pci_ids: PciIds | None = None,
        with_memory: bool = False,
    ) -> None:
        self._manufacturer = manufacturer
        self._vendor_id = vendor_id
        self._class_prefixes = tuple(class_prefixes)
        self._root = root
        self._pci_ids = pci_ids or PciIds()
        self._with_memory = with_memory
        self._lock = threading.Lock()

    @property
    def manufacturer(self) -> str:
        return self._manufacturer

    def devices(self) -> list[PciDevice]:
        """This manufacturer's accelerator-class PCI devices now."""
        return select_devices(scan_pci_devices(self._root), self._vendor_id, self._class_prefixes)

    def detect(self) -> list[DeviceGroup]:
        with self._lock:
            return self.group(self.devices())

    def group(self, devices: Iterable[PciDevice]) -> list[DeviceGroup]:
        """Device groups for already-scanned *devices* (index = order on the bus).

        The accelerator id is the PCI bus address: the only stable identity PCI offers, and
        what lets the monitor notice a card appearing or disappearing.
        """
        detected = [
            DetectedDevice(name=product_name(dev, self._pci_ids), uuid=dev.address, index=index)
            for index, dev in enumerate(devices)
        ]
        return group_devices(self._manufacturer, detected, with_memory=self._with_memory)
