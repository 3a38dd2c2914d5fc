"""Google Kubernetes Engine node labels -> device pools (docs/devices.md, "GKE").

GKE names a GPU node pool's card in ``cloud.google.com/gke-accelerator`` and its own device
plugin advertises ``nvidia.com/gpu``: one per card, one per MIG partition when
``cloud.google.com/gke-gpu-partition-size`` is set, and ``max-shared-clients-per-gpu`` per
card under time-sharing or MPS. TPU slice nodes carry ``cloud.google.com/gke-tpu-accelerator``
and ``cloud.google.com/gke-tpu-topology`` and advertise their chips as ``google.com/tpu``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from gpustack_operator.domain.manufacturers import (
    GKE_GPU_MODELS,
    GKE_TPU_MODELS,
    AcceleratorModel,
)
from gpustack_operator.domain.node.devicesources.common import allocatable_count, label_count
from gpustack_operator.domain.node.devicesources.model import NO_ALLOCATABLE, DevicePool, Diagnostic

GPU_SOURCE: Final = "gke"
TPU_SOURCE: Final = "gke-tpu"
GPU_RESOURCE: Final = "nvidia.com/gpu"
TPU_RESOURCE: Final = "google.com/tpu"
ACCELERATOR_LABEL: Final = "cloud.google.com/gke-accelerator"
PARTITION_LABEL: Final = "cloud.google.com/gke-gpu-partition-size"
SHARING_LABEL: Final = "cloud.google.com/gke-gpu-sharing-strategy"
MAX_CLIENTS_LABEL: Final = "cloud.google.com/gke-max-shared-clients-per-gpu"
TPU_ACCELERATOR_LABEL: Final = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL: Final = "cloud.google.com/gke-tpu-topology"
SHARING_STRATEGIES: Final = ("time-sharing", "mps")
_PARTITION: Final = re.compile(r"[0-9]+g\.([0-9]+)gb")
_TOPOLOGY: Final = re.compile(r"[0-9]+(x[0-9]+)*")


def _gpu_model(accelerator: str) -> AcceleratorModel:
    """The card GKE names; a name not in the table is kept as GKE spells it."""
    return GKE_GPU_MODELS.get(accelerator) or AcceleratorModel(
        manufacturer="nvidia", product=accelerator
    )


def gke_gpu_pools(
    labels: Mapping[str, str], allocatable: Mapping[str, object]
) -> tuple[list[DevicePool], list[Diagnostic]]:
    """The NVIDIA pool of a GKE GPU node, or why it has none yet."""
    accelerator = labels.get(ACCELERATOR_LABEL, "")
    if not accelerator.startswith("nvidia-"):
        return [], []
    model = _gpu_model(accelerator)
    advertised = allocatable_count(allocatable, GPU_RESOURCE)
    if advertised == 0:
        detail = (
            f"{accelerator}: no allocatable {GPU_RESOURCE} yet: GKE's driver installer and device "
            "plugin (kube-system) have not finished on the node; the pool appears once they have"
        )
        return [], [Diagnostic(GPU_SOURCE, NO_ALLOCATABLE, detail)]
    partition = labels.get(PARTITION_LABEL, "")
    match = _PARTITION.fullmatch(partition)
    if match is not None:
        pool = DevicePool(
            source=GPU_SOURCE,
            manufacturer=model.manufacturer,
            product=f"{model.product}-MIG-{partition}",
            count=advertised,
            resource=GPU_RESOURCE,
            memory_mib=int(match.group(1)) * 1024,
        )
        return [pool], []
    sliced = 0
    if labels.get(SHARING_LABEL, "") in SHARING_STRATEGIES:
        sliced = label_count(labels, MAX_CLIENTS_LABEL) or 0
        sliced = sliced if sliced > 1 else 0
    pool = DevicePool(
        source=GPU_SOURCE,
        manufacturer=model.manufacturer,
        product=model.product,
        count=max(advertised // sliced, 1) if sliced else advertised,
        resource=GPU_RESOURCE,
        memory_mib=model.memory_mib,
        sliced=sliced,
    )
    return [pool], []


def _chips(topology: str) -> int:
    chips = 1
    for part in topology.split("x"):
        chips *= int(part)
    return chips


def gke_tpu_pools(
    labels: Mapping[str, str], allocatable: Mapping[str, object]
) -> tuple[list[DevicePool], list[Diagnostic]]:
    """The TPU pool of a GKE TPU slice node: its chips, named by TPU version and topology.

    The topology is part of the model: a workload selects a slice by both labels, so slices
    of one version and different shapes are not interchangeable. Every node of a multi-host
    slice has the same model, so the slice's nodes share one flavor.
    """
    accelerator = labels.get(TPU_ACCELERATOR_LABEL, "")
    if not accelerator:
        return [], []
    topology = labels.get(TPU_TOPOLOGY_LABEL, "")
    base = GKE_TPU_MODELS.get(accelerator)
    product = base.product if base is not None else accelerator
    if _TOPOLOGY.fullmatch(topology):
        product = f"{product} {topology}"
    chips = allocatable_count(allocatable, TPU_RESOURCE)
    if chips == 0:
        detail = (
            f"{product}: no allocatable {TPU_RESOURCE} yet: GKE's TPU device plugin has not "
            "registered the chips; the pool appears once it has"
        )
        return [], [Diagnostic(TPU_SOURCE, NO_ALLOCATABLE, detail)]
    hosts = ""
    if _TOPOLOGY.fullmatch(topology):
        hosts = "multi-host" if _chips(topology) > chips else "single-host"
    pool = DevicePool(
        source=TPU_SOURCE,
        manufacturer="google",
        product=product,
        count=chips,
        resource=TPU_RESOURCE,
        memory_mib=base.memory_mib if base is not None else 0,
        family=hosts,
    )
    return [pool], []
