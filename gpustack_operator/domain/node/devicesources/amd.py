"""AMD GPU Operator node labeller labels -> device pools (docs/devices.md, "AMD").

The labeller writes ``amd.com/gpu.<property>=<value>`` (``product-name``, ``vram``,
``cu-count``, ``device-id``, ``family``, ``driver-version``) and, in its experimental form,
``beta.amd.com/gpu.<property>.<value>=<number of cards>``. It writes no count: the number of
devices is the device plugin's allocatable ``amd.com/gpu``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from gpustack_operator.domain.node.devicesources.common import allocatable_count
from gpustack_operator.domain.node.devicesources.model import (
    AMBIGUOUS_MODELS,
    MODEL_UNKNOWN,
    NO_ALLOCATABLE,
    DevicePool,
    Diagnostic,
)

SOURCE: Final = "amd-labeller"
MANUFACTURER: Final = "amd"
GPU_RESOURCE: Final = "amd.com/gpu"
PREFIX: Final = "amd.com/gpu."
BETA_PREFIX: Final = "beta.amd.com/gpu."
_VRAM: Final = re.compile(r"([0-9]+)([MGT])")
_UNIT_MIB: Final = {"M": 1, "G": 1024, "T": 1024 * 1024}


def _property(labels: Mapping[str, str], name: str) -> tuple[list[str], str]:
    """The values of one labeller property: the plain label, else the beta key suffixes.

    Returns (values, how the values were found) so that a node with several models can be
    reported rather than guessed.
    """
    value = labels.get(PREFIX + name, "")
    if value:
        return [value], PREFIX + name
    beta = BETA_PREFIX + name + "."
    values = sorted(k[len(beta) :] for k in labels if k.startswith(beta) and len(k) > len(beta))
    return values, beta + "*"


def _vram_mib(text: str) -> int:
    match = _VRAM.fullmatch(text)
    return int(match.group(1)) * _UNIT_MIB[match.group(2)] if match else 0


def _unnamed(labels: Mapping[str, str], allocatable: Mapping[str, object]) -> list[Diagnostic]:
    """Why a labeller release that names no product (``beta.`` labels before v1.31) gives no
    pool: the cards are there, their model is not."""
    count = allocatable_count(allocatable, GPU_RESOURCE)
    if not count or not any(k.startswith((PREFIX, BETA_PREFIX)) for k in labels):
        return []
    device = ", ".join(_property(labels, "device-id")[0]) or "unknown"
    detail = (
        f"{GPU_RESOURCE} ({count}): the AMD node labeller on the node names no product "
        f"(device id {device}; releases before v1.31 label no product-name): upgrade the "
        "labeller, or let gpustack-operator's device manager for amd describe the node (its "
        "DaemonSet avoids only nodes with amd.com/gpu.product-name)"
    )
    return [Diagnostic(SOURCE, MODEL_UNKNOWN, detail, GPU_RESOURCE)]


def amd_pools(
    labels: Mapping[str, str], allocatable: Mapping[str, object]
) -> tuple[list[DevicePool], list[Diagnostic]]:
    """The AMD device pool the labeller describes on a node, and why it gets none."""
    products, where = _property(labels, "product-name")
    if not products:
        return [], _unnamed(labels, allocatable)
    if len(products) > 1:
        detail = (
            f"{where} names {len(products)} models ({', '.join(products)}) that share one "
            f"{GPU_RESOURCE} resource; their cards cannot be told apart"
        )
        return [], [Diagnostic(SOURCE, AMBIGUOUS_MODELS, detail, GPU_RESOURCE)]
    product = products[0].replace("_", " ")
    count = allocatable_count(allocatable, GPU_RESOURCE)
    if count == 0:
        detail = f"{product}: no allocatable {GPU_RESOURCE} (is the AMD device plugin running?)"
        return [], [Diagnostic(SOURCE, NO_ALLOCATABLE, detail)]
    first = {
        name: (_property(labels, name)[0] or [""])[0]
        for name in ("vram", "cu-count", "family", "driver-version")
    }
    cores = first["cu-count"]
    pool = DevicePool(
        source=SOURCE,
        manufacturer=MANUFACTURER,
        product=product,
        count=count,
        resource=GPU_RESOURCE,
        memory_mib=_vram_mib(first["vram"]),
        cores=int(cores) if cores.isdigit() else 0,
        family=first["family"],
        driver_version=first["driver-version"],
    )
    return [pool], []


def describes_node(labels: Mapping[str, str]) -> bool:
    """Whether the AMD labeller describes the node's AMD devices (used for coexistence)."""
    return bool(_property(labels, "product-name")[0])
