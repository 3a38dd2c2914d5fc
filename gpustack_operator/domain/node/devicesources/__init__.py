"""Device facts derived from what the GPU stacks already publish (docs/devices.md, "Sources").

One module per source (:mod:`.gfd` for NVIDIA GPU Feature Discovery, :mod:`.amd` for the AMD
GPU Operator's node labeller) turns a Node's labels and ``status.allocatable`` into
:class:`~.model.DevicePool` values plus :class:`~.model.Diagnostic` reasons for devices that
get no pool; :mod:`.merge` applies the precedence between our agent and those sources and
renders the pools in the ``acceleratable.feature.gpustack.ai/`` label model.
"""

from gpustack_operator.domain.node.devicesources.merge import (
    DerivedDevices,
    agent_manufacturers,
    derive_devices,
    judged_diagnostics,
    node_device_diagnostics,
    unpooled_devices,
)
from gpustack_operator.domain.node.devicesources.model import DevicePool, Diagnostic

__all__ = [
    "DerivedDevices",
    "DevicePool",
    "Diagnostic",
    "agent_manufacturers",
    "derive_devices",
    "judged_diagnostics",
    "node_device_diagnostics",
    "unpooled_devices",
]
