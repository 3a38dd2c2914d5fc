"""``GPUSTACK_*`` environment settings, read here and passed to the (pure) domain.

The configuration layer of the CLI: it reads the variables (docs/devices.md,
docs/configuration.md), the domain's functions turn the raw values into its objects. Every
loader takes an optional mapping instead of ``os.environ`` so tests, ``plan`` and the
simulator can pass their own. Variable names are matched without regard to case and an
empty value counts as unset. Invalid values raise ``ValueError`` naming the variable.

Plain parsing rather than a settings library: a handful of strings and one boolean do not
need one, and importing pydantic-settings cost every command 0.01-0.06 s of start-up
(docs/performance.md, "Worker start-up: CPU before the first API request").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from gpustack_operator.domain.manufacturers import (
    DEFAULT_PCI_CLASS_PREFIXES,
    ENV_PREFIX,
    KNOWN_MANUFACTURERS,
    OVERRIDE_FIELDS,
    Manufacturer,
    manufacturers_with_overrides,
    parse_pci_class_prefixes,
)

GROUP_ID_WITH_MEMORY_VARS: Final = (
    "GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY",
    "GPUSTACK_DEVICES_DETECT_GROUP_ID_WITH_MEMORY",
)
"""The current name first; the second is the name older releases read."""
PCI_CLASS_PREFIXES_VAR: Final = ENV_PREFIX + "PCI_CLASS_PREFIXES"
_TRUE: Final = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE: Final = frozenset({"0", "off", "f", "false", "n", "no"})


def _variables(env: Mapping[str, str] | None) -> dict[str, str]:
    """*env* (``None``: ``os.environ``) with upper-case names and the empty values dropped."""
    source = os.environ if env is None else env
    return {name.upper(): value for name, value in source.items() if value != ""}


def _invalid(var: str, problem: str, value: str) -> ValueError:
    return ValueError(f"invalid environment: {var}: {problem} (got {value!r})")


def load_group_id_with_memory(env: Mapping[str, str] | None = None) -> bool:
    """Whether group IDs carry ``-<mem>g`` (``GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY``)."""
    variables = _variables(env)
    for var in GROUP_ID_WITH_MEMORY_VARS:
        if var in variables:
            raw = variables[var]
            word = raw.strip().lower()
            if word in _TRUE:
                return True
            if word in _FALSE:
                return False
            raise _invalid(var, "expected a boolean (true/false, 1/0, yes/no, on/off)", raw)
    return False


def load_manufacturers(env: Mapping[str, str] | None = None) -> dict[str, Manufacturer]:
    """The known manufacturers with ``GPUSTACK_<MFR>_*`` overrides applied, sorted by name.

    *env* ``None`` reads ``os.environ``. Empty variables count as unset. A bad value raises
    ``ValueError`` naming the variable.
    """
    variables = _variables(env)
    overrides: dict[str, str | None] = {}
    for name in KNOWN_MANUFACTURERS:
        for field in OVERRIDE_FIELDS:
            key = f"{name}_{field}"
            overrides[key] = variables.get(ENV_PREFIX + key.upper())
    return manufacturers_with_overrides(overrides)


def load_pci_class_prefixes(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``GPUSTACK_PCI_CLASS_PREFIXES`` as lower-case hex prefixes (default 02,03,0b,12)."""
    raw = _variables(env).get(PCI_CLASS_PREFIXES_VAR, ",".join(DEFAULT_PCI_CLASS_PREFIXES))
    return parse_pci_class_prefixes(raw)
