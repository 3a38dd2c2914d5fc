"""Intel Gaudi -> device pools (docs/devices.md, "Intel Gaudi").

The Intel Gaudi device plugin advertises the cards as ``habana.ai/gaudi`` and labels
nothing that names the generation. NFD does, when its PCI source labels the device id
(``feature.node.kubernetes.io/pci-<class>_1da3_<device>.present``); on EC2 the instance family
does (``dl1``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from gpustack_operator.domain.manufacturers import GAUDI_INSTANCE_FAMILIES, GAUDI_MODELS
from gpustack_operator.domain.node.devicesources.common import allocatable_count, instance_family
from gpustack_operator.domain.node.devicesources.model import MODEL_UNKNOWN, DevicePool, Diagnostic

SOURCE: Final = "intel-gaudi"
MANUFACTURER: Final = "habana"
RESOURCE: Final = "habana.ai/gaudi"
_NFD_PCI_DEVICE: Final = re.compile(
    r"feature\.node\.kubernetes\.io/pci-[0-9a-f]{4}_1da3_([0-9a-f]{4})\.present"
)


def _device_ids(labels: Mapping[str, str]) -> list[str]:
    ids = {
        m.group(1) for k, v in labels.items() if v == "true" and (m := _NFD_PCI_DEVICE.fullmatch(k))
    }
    family = GAUDI_INSTANCE_FAMILIES.get(instance_family(labels))
    if not ids and family:
        ids.add(family)
    return sorted(ids)


def gaudi_pools(
    labels: Mapping[str, str], allocatable: Mapping[str, object]
) -> tuple[list[DevicePool], list[Diagnostic]]:
    """The Gaudi pool of a node, or why its ``habana.ai/gaudi`` devices have none."""
    count = allocatable_count(allocatable, RESOURCE)
    if count == 0:
        return [], []
    models = {
        GAUDI_MODELS[i].product: GAUDI_MODELS[i] for i in _device_ids(labels) if i in GAUDI_MODELS
    }
    if len(models) != 1:
        found = ", ".join(sorted(models)) or "none"
        detail = (
            f"{RESOURCE} ({count}): the Gaudi generation is not known (models named: {found}); "
            "configure NFD's PCI source with deviceLabelFields [class, vendor, device] so that "
            "the device id is labelled, or run each generation on nodes of its own"
        )
        return [], [Diagnostic(SOURCE, MODEL_UNKNOWN, detail, RESOURCE)]
    (model,) = models.values()
    pool = DevicePool(
        source=SOURCE,
        manufacturer=MANUFACTURER,
        product=model.product,
        count=count,
        resource=RESOURCE,
        memory_mib=model.memory_mib,
    )
    return [pool], []
