"""AWS Neuron (Trainium, Inferentia) -> device pools (docs/devices.md, "AWS Neuron").

The Neuron device plugin advertises the same hardware twice: whole devices as
``aws.amazon.com/neuron`` (``aws.amazon.com/neurondevice`` before Neuron 2.20) and their
NeuronCores as ``aws.amazon.com/neuroncore``. A node is pooled by devices when the plugin
advertises them, else by cores: never both, which would count every device twice. No label of
the plugin names the model; the EC2 instance family (``node.kubernetes.io/instance-type``)
does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gpustack_operator.domain.labels import INSTANCE_TYPE_LABEL
from gpustack_operator.domain.manufacturers import NEURON_MODELS
from gpustack_operator.domain.node.devicesources.common import (
    allocatable_count,
    instance_family,
)
from gpustack_operator.domain.node.devicesources.model import (
    COUNTED_AS_DEVICES,
    MODEL_UNKNOWN,
    DevicePool,
    Diagnostic,
)

SOURCE: Final = "aws-neuron"
MANUFACTURER: Final = "aws"
DEVICE_RESOURCES: Final = ("aws.amazon.com/neuron", "aws.amazon.com/neurondevice")
CORE_RESOURCE: Final = "aws.amazon.com/neuroncore"


def neuron_pools(
    labels: Mapping[str, str], allocatable: Mapping[str, object]
) -> tuple[list[DevicePool], list[Diagnostic]]:
    """The Neuron pool of a node: its devices, else its cores; or why it has none."""
    devices = next(
        ((r, n) for r in DEVICE_RESOURCES if (n := allocatable_count(allocatable, r))), None
    )
    cores = allocatable_count(allocatable, CORE_RESOURCE)
    if devices is None and not cores:
        return [], []
    family = instance_family(labels)
    model = NEURON_MODELS.get(family)
    if model is None:
        resource = devices[0] if devices is not None else CORE_RESOURCE
        detail = (
            f"{resource}: instance type {labels.get(INSTANCE_TYPE_LABEL) or '(no label)'} is not "
            f"a known Neuron instance family ({', '.join(sorted(NEURON_MODELS))}): label the node "
            f"{INSTANCE_TYPE_LABEL} (the kubelet does on EC2) or report the new family"
        )
        problems = [Diagnostic(SOURCE, MODEL_UNKNOWN, detail, resource)]
        if devices is not None and cores:
            problems.append(Diagnostic(SOURCE, MODEL_UNKNOWN, detail, CORE_RESOURCE))
        return [], problems
    if devices is not None:
        resource, count = devices
        pool = DevicePool(
            source=SOURCE,
            manufacturer=MANUFACTURER,
            product=model.product,
            count=count,
            resource=resource,
            memory_mib=model.memory_mib,
            cores=model.cores,
        )
        problems = []
        if cores:
            detail = (
                f"{CORE_RESOURCE} ({cores}): the same {model.product} devices are pooled as "
                f"{resource}; their cores are not counted again (request {resource})"
            )
            problems.append(Diagnostic(SOURCE, COUNTED_AS_DEVICES, detail, CORE_RESOURCE))
        return [pool], problems
    pool = DevicePool(
        source=SOURCE,
        manufacturer=MANUFACTURER,
        product=f"{model.product} NeuronCore",
        count=cores,
        resource=CORE_RESOURCE,
        memory_mib=model.memory_mib // max(model.cores, 1),
        cores=1,
    )
    return [pool], []
