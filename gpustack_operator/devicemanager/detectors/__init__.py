"""Accelerator detectors: one per source of facts (NVML, amdsmi, PCI sysfs, simulated devices).

Each returns the manufacturer's devices as ``DeviceGroup`` values; ``detection`` decides which
one to ask for each manufacturer and when to fall back to PCI (docs/device-manager.md).
"""

from gpustack_operator.devicemanager.detectors.base import (
    Detector,
    DeviceSample,
    LibraryUnavailable,
    MetricsSource,
)

__all__ = ["Detector", "DeviceSample", "LibraryUnavailable", "MetricsSource"]
