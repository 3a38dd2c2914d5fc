"""Product names from the PCI ID database (``pci.ids``), when one is installed.

The PCI detector knows only the vendor and device IDs a card reports in sysfs. A product name
such as ``TU104GL [Tesla T4]`` comes from the ``pci.ids`` file that distributions ship with
``pciutils``/``hwdata``; without that file the name is unknown and the detector says so
instead of inventing one.

Only the vendors asked for are kept in memory: the file has tens of thousands of entries and
the device manager needs a handful.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

# Where distributions install the database, in the order `lspci` looks.
DEFAULT_PCI_IDS_PATHS: tuple[Path, ...] = (
    Path("/usr/share/misc/pci.ids"),
    Path("/usr/share/hwdata/pci.ids"),
    Path("/usr/share/pci.ids"),
    Path("/usr/share/misc/pci.ids.gz"),
)

# Environment variable naming an explicit database file (the `--pci-ids` flag wins over it).
PCI_IDS_ENV = "GPUSTACK_PCI_IDS"


@dataclass(frozen=True)
class PciIds:
    """Vendor and device names read from a ``pci.ids`` file (IDs are 4 lower-case hex digits)."""

    source: Path | None = None
    vendors: Mapping[str, str] = field(default_factory=dict)
    devices: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def vendor_name(self, vendor_id: str) -> str | None:
        return self.vendors.get(_norm(vendor_id))

    def device_name(self, vendor_id: str, device_id: str) -> str | None:
        return self.devices.get((_norm(vendor_id), _norm(device_id)))


def _norm(hex_id: str) -> str:
    """``0x10DE`` -> ``10de``."""
    value = hex_id.strip().lower()
    return value.removeprefix("0x")


def find_pci_ids(
    explicit: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    candidates: Iterable[Path] = DEFAULT_PCI_IDS_PATHS,
) -> Path | None:
    """The database to use: *explicit*, else ``$GPUSTACK_PCI_IDS``, else the first installed.

    An explicit path (flag or environment) that does not exist is reported with a warning and
    ignored, so a typo degrades to "names unknown" rather than failing detection.
    """
    environ = os.environ if env is None else env
    chosen = explicit if explicit not in (None, "") else environ.get(PCI_IDS_ENV) or None
    if chosen is not None:
        path = Path(chosen)
        if path.is_file():
            return path
        log.warning(
            "pci.ids file not found; product names will be unknown",
            path=str(path),
            hint="point --pci-ids (or GPUSTACK_PCI_IDS) at an existing pci.ids file",
        )
        return None
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return None


def _lines(path: Path) -> Iterator[str]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
            yield from fh
    else:
        with path.open(encoding="utf-8", errors="replace") as fh:
            yield from fh


def parse_pci_ids(lines: Iterable[str], vendors: Iterable[str] | None = None) -> PciIds:
    """Parse ``pci.ids`` text, keeping only *vendors* (all when ``None``).

    Format: ``vvvv  Vendor name``, then ``<TAB>dddd  Device name`` lines for that vendor, then
    ``<TAB><TAB>`` subsystem lines (ignored). The device-class section (``C xx ...``) ends the
    vendor list.
    """
    wanted = None if vendors is None else {_norm(v) for v in vendors}
    vendor_names: dict[str, str] = {}
    device_names: dict[tuple[str, str], str] = {}
    current: str | None = None
    for raw in lines:
        line = raw.rstrip("\n\r")
        if not line or line.startswith("#"):
            continue
        if line.startswith("C "):
            break
        if line.startswith("\t\t"):
            continue
        if line.startswith("\t"):
            if current is None:
                continue
            ident, _, name = line[1:].partition(" ")
            if _is_hex4(ident) and name.strip():
                device_names[(current, ident.lower())] = name.strip()
            continue
        ident, _, name = line.partition(" ")
        if not _is_hex4(ident):
            current = None
            continue
        ident = ident.lower()
        if wanted is not None and ident not in wanted:
            current = None
            continue
        current = ident
        vendor_names[ident] = name.strip()
    return PciIds(vendors=vendor_names, devices=device_names)


def _is_hex4(value: str) -> bool:
    return len(value) == 4 and all(c in "0123456789abcdefABCDEF" for c in value)


def load_pci_ids(path: Path | None, vendors: Iterable[str] | None = None) -> PciIds:
    """Read *path* (``None`` or unreadable -> an empty database, names unknown)."""
    if path is None:
        return PciIds()
    try:
        parsed = parse_pci_ids(_lines(path), vendors)
    except (OSError, EOFError) as exc:
        log.warning(
            "cannot read pci.ids; product names will be unknown", path=str(path), error=str(exc)
        )
        return PciIds()
    return PciIds(source=path, vendors=parsed.vendors, devices=parsed.devices)
