"""The general (CPU) node key ``gKey`` (docs/naming.md).

``gKey`` names a node's CPU profile inside label keys (``general.feature.gpustack.ai/<gKey>``)
and object names (``gpustack--<gKey>-...``). It is built from NFD's CPU labels and the
``gpustack-cpu-info`` annotations, abbreviated OS/arch suffixes and docs/naming.md's length budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gpustack_operator.domain.labels import (
    ARCH_LABEL,
    CPU_NAME_ANNOTATION,
    GENERAL_KEY_MAX_LEN,
    NFD_CPU_FAMILY_LABEL,
    NFD_CPU_ID_LABEL,
    NFD_CPU_VENDOR_LABEL,
    OS_LABEL,
)
from gpustack_operator.domain.names import normalize_name
from gpustack_operator.domain.node.devices import key_safe

GENERIC_MANUFACTURER: Final = "generic"
OS_ABBREVIATIONS: Final = {
    "linux": "ln",
    "windows": "wn",
    "darwin": "dw",
    "freebsd": "fb",
    "openbsd": "ob",
    "netbsd": "nb",
    "dragonfly": "df",
    "solaris": "so",
    "illumos": "im",
    "aix": "ax",
    "zos": "zo",
}
ARCH_ABBREVIATIONS: Final = {
    "amd64": "x64",
    "amd64p32": "x64p",
    "arm64": "a64",
    "arm64be": "a64b",
    "ppc64": "p64",
    "ppc64le": "p64l",
    "mips64": "m64",
    "mips64le": "m64l",
    "mips64p32": "m64p",
    "mips64p32le": "m64pl",
    "riscv64": "r64",
    "s390x": "s64",
    "sparc64": "sp64",
    "loong64": "l64",
}
# Unknown OS/arch values and vendor names are shortened so that the CPU name keeps most of
# the key budget; real values (js, 386, AMD, Intel, ...) are far shorter.
_MAX_PLATFORM_LEN: Final = 8
_MAX_VENDOR_LEN: Final = 16


def _platform_part(value: str, abbreviations: Mapping[str, str]) -> str:
    if value in abbreviations:
        return abbreviations[value]
    return key_safe(normalize_name(value, "", _MAX_PLATFORM_LEN))


def platform_suffix(labels: Mapping[str, str]) -> str:
    """``-<os>-<arch>`` from ``kubernetes.io/os`` and ``kubernetes.io/arch``, abbreviated."""
    suffix = ""
    for key, table in ((OS_LABEL, OS_ABBREVIATIONS), (ARCH_LABEL, ARCH_ABBREVIATIONS)):
        value = labels.get(key, "")
        part = _platform_part(value, table) if isinstance(value, str) and value else ""
        if part:
            suffix += "-" + part
    return suffix


def cpu_manufacturer(labels: Mapping[str, str]) -> str:
    """Lower-cased NFD cpuid vendor (``amd``, ``intel``); ``generic`` when unknown.

    Only ASCII letters and digits are kept, so the manufacturer is always the first
    dash-segment of ``gKey``.
    """
    raw = labels.get(NFD_CPU_VENDOR_LABEL, "")
    vendor = "".join(c for c in raw.lower() if c.isascii() and c.isalnum())[:_MAX_VENDOR_LEN]
    if not vendor or vendor == "vendorunknown":
        return GENERIC_MANUFACTURER
    return vendor


def _resolved(value: str) -> bool:
    """An annotation value that NFD resolved (unresolved templates start with ``@``)."""
    return value != "" and not value.startswith("@")


def cpu_node_key(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """``gKey`` of a node, or ``""`` when the node has no usable CPU identity (docs/naming.md).

    The key holds only ``[a-z0-9-]`` and fits :data:`GENERAL_KEY_MAX_LEN` (docs/naming.md).
    """
    suffix = platform_suffix(labels)
    mfr = cpu_manufacturer(labels)
    budget = GENERAL_KEY_MAX_LEN - len(mfr) - 1 - len(suffix)
    cpu_name = annotations.get(CPU_NAME_ANNOTATION, "")
    family = labels.get(NFD_CPU_FAMILY_LABEL, "")
    model_id = labels.get(NFD_CPU_ID_LABEL, "")
    if _resolved(cpu_name):
        ident = key_safe(normalize_name(cpu_name, mfr, budget, cpu_name=True))
    elif family and model_id:
        ident = key_safe(normalize_name(f"{family}-{model_id}", "", budget))
    else:
        ident = ""
    if not ident:
        return ""
    return f"{mfr}-{ident}{suffix}"
