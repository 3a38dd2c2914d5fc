"""Test doubles for the vendor libraries and for PCI sysfs.

``FakeNvml`` and ``FakeAmdSmi`` model just enough of ``pynvml`` and ``amdsmi`` for the
detectors: the functions they call, the error classes (an error carries its code as
``value`` / ``err_code`` like the real ones), and a way to make any call fail for a card.
``make_pci_device`` writes the three sysfs files the PCI scanner reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

MIB = 1024 * 1024


# --------------------------------------------------------------------------- NVML


class NVMLError(Exception):
    """Like ``pynvml.NVMLError``: constructed from a return code, kept as ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {
            3: "Not Supported",
            9: "Driver Not Loaded",
            12: "NVML Shared Library Not Found",
            15: "GPU is lost",
            999: "Unknown Error",
        }.get(self.value, f"NVML error {self.value}")


NOT_SUPPORTED = 3
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
GPU_IS_LOST = 15
UNKNOWN = 999


@dataclass
class FakeGpu:
    name: str
    memory_mib: int
    cores: int | None = 0
    capability: tuple[int, int] = (0, 0)
    uuid: str = ""
    ecc_uncorrected: int | None = 0  # None: ECC not supported
    utilization: int = 0
    memory_used_mib: int = 0
    temperature: int = 40
    power_mw: int = 70_000
    # function name -> NVML error code raised when this card is asked
    failures: dict[str, int] = field(default_factory=dict)


class FakeNvml:
    """An injectable stand-in for the ``pynvml`` module."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_TEMPERATURE_GPU = 0

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        driver: str = "580.126.09",
        cuda: int = 13000,
        init_error: int | None = None,
        count_error: int | None = None,
        system_failures: dict[str, int] | None = None,
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.count_error = count_error
        self.system_failures = system_failures or {}
        self.initialised = 0
        self.calls: list[str] = []

    def _system(self, name: str) -> None:
        self.calls.append(name)
        if self.initialised <= 0:
            raise NVMLError(1)  # Uninitialized
        if name in self.system_failures:
            raise NVMLError(self.system_failures[name])

    def _card(self, name: str, handle: FakeGpu) -> FakeGpu:
        self._system(name)
        if name in handle.failures:
            raise NVMLError(handle.failures[name])
        return handle

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._system("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._system("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._system("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._system("nvmlDeviceGetCount")
        if self.count_error is not None:
            raise NVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._system("nvmlDeviceGetHandleByIndex")
        gpu = self.gpus[index]
        if "nvmlDeviceGetHandleByIndex" in gpu.failures:
            raise NVMLError(gpu.failures["nvmlDeviceGetHandleByIndex"])
        return gpu

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return self._card("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> SimpleNamespace:
        gpu = self._card("nvmlDeviceGetMemoryInfo", handle)
        total = gpu.memory_mib * MIB
        used = gpu.memory_used_mib * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetNumGpuCores(self, handle: FakeGpu) -> int:
        gpu = self._card("nvmlDeviceGetNumGpuCores", handle)
        if gpu.cores is None:
            raise NVMLError(NOT_SUPPORTED)
        return gpu.cores

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu) -> tuple[int, int]:
        return self._card("nvmlDeviceGetCudaComputeCapability", handle).capability

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return self._card("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeGpu, error_type: int, counter: int) -> int:
        gpu = self._card("nvmlDeviceGetTotalEccErrors", handle)
        assert (error_type, counter) == (1, 0), "asks for uncorrected volatile ECC errors"
        if gpu.ecc_uncorrected is None:
            raise NVMLError(NOT_SUPPORTED)
        return gpu.ecc_uncorrected

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> SimpleNamespace:
        gpu = self._card("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=gpu.utilization, memory=0)

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        assert sensor == 0
        return self._card("nvmlDeviceGetTemperature", handle).temperature

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        return self._card("nvmlDeviceGetPowerUsage", handle).power_mw


def tesla_t4(uuid: str = "GPU-t4-0", **kw: Any) -> FakeGpu:
    kw.setdefault("cores", 2560)
    return FakeGpu("Tesla T4", 15360, capability=(7, 5), uuid=uuid, **kw)


def a10g(uuid: str = "GPU-a10g-0", **kw: Any) -> FakeGpu:
    kw.setdefault("cores", 9216)
    return FakeGpu("NVIDIA A10G", 23028, capability=(8, 6), uuid=uuid, **kw)


def h100(uuid: str = "GPU-h100-0", **kw: Any) -> FakeGpu:
    kw.setdefault("cores", 16896)
    return FakeGpu("NVIDIA H100 80GB HBM3", 81559, capability=(9, 0), uuid=uuid, **kw)


# --------------------------------------------------------------------------- amdsmi


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = err_code


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0


@dataclass
class FakeAmdGpu:
    market_name: str
    vram_mib: int
    compute_units: int | str = 304
    gfx: str = "gfx942"
    uuid: str = ""
    uncorrectable: int = 0
    edge_temperature: int | None = 45  # None: not supported (MI300 has no edge sensor)
    hotspot_temperature: int = 60
    failures: dict[str, int] = field(default_factory=dict)


class FakeAmdSmi:
    """An injectable stand-in for the ``amdsmi`` module."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric

    def __init__(
        self, gpus: list[FakeAmdGpu], *, driver: str = "6.8.5", rocm: str = "6.4.1"
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.rocm = rocm
        self.initialised = 0

    def _card(self, name: str, handle: FakeAmdGpu) -> FakeAmdGpu:
        assert self.initialised > 0
        if name in handle.failures:
            raise AmdSmiLibraryException(handle.failures[name])
        return handle

    def amdsmi_init(self) -> None:
        self.initialised += 1

    def amdsmi_shut_down(self) -> None:
        self.initialised -= 1

    def amdsmi_get_rocm_version(self) -> tuple[bool, str]:
        return True, self.rocm

    def amdsmi_get_processor_handles(self) -> list[FakeAmdGpu]:
        return list(self.gpus)

    def amdsmi_get_gpu_asic_info(self, h: FakeAmdGpu) -> dict[str, Any]:
        gpu = self._card("amdsmi_get_gpu_asic_info", h)
        return {
            "market_name": gpu.market_name,
            "num_compute_units": gpu.compute_units,
            "target_graphics_version": gpu.gfx,
        }

    def amdsmi_get_gpu_vram_info(self, h: FakeAmdGpu) -> dict[str, Any]:
        return {"vram_size": self._card("amdsmi_get_gpu_vram_info", h).vram_mib}

    def amdsmi_get_gpu_driver_info(self, h: FakeAmdGpu) -> dict[str, Any]:
        self._card("amdsmi_get_gpu_driver_info", h)
        return {"driver_name": "amdgpu", "driver_version": self.driver}

    def amdsmi_get_gpu_device_uuid(self, h: FakeAmdGpu) -> str:
        return self._card("amdsmi_get_gpu_device_uuid", h).uuid

    def amdsmi_get_gpu_total_ecc_count(self, h: FakeAmdGpu) -> dict[str, Any]:
        gpu = self._card("amdsmi_get_gpu_total_ecc_count", h)
        return {"correctable_count": 0, "uncorrectable_count": gpu.uncorrectable}

    def amdsmi_get_gpu_activity(self, h: FakeAmdGpu) -> dict[str, Any]:
        self._card("amdsmi_get_gpu_activity", h)
        return {"gfx_activity": 37, "umc_activity": "N/A", "mm_activity": "N/A"}

    def amdsmi_get_gpu_vram_usage(self, h: FakeAmdGpu) -> dict[str, Any]:
        gpu = self._card("amdsmi_get_gpu_vram_usage", h)
        return {"vram_total": gpu.vram_mib, "vram_used": 1024}

    def amdsmi_get_power_info(self, h: FakeAmdGpu) -> dict[str, Any]:
        self._card("amdsmi_get_power_info", h)
        return {"current_socket_power": "N/A", "average_socket_power": 350}

    def amdsmi_get_temp_metric(self, h: FakeAmdGpu, sensor: int, metric: int) -> int:
        gpu = self._card("amdsmi_get_temp_metric", h)
        if sensor == AmdSmiTemperatureType.EDGE:
            if gpu.edge_temperature is None:
                raise AmdSmiLibraryException(2)
            return gpu.edge_temperature
        return gpu.hotspot_temperature


# --------------------------------------------------------------------------- PCI sysfs


def make_pci_device(root: Path, address: str, vendor: str, device: str, pci_class: str) -> Path:
    """``<root>/<address>/{vendor,device,class}`` as the kernel writes them (``0x10de``)."""
    entry = root / address
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "vendor").write_text(f"0x{vendor}\n")
    (entry / "device").write_text(f"0x{device}\n")
    (entry / "class").write_text(f"0x{pci_class}\n")
    return entry


PCI_IDS_SAMPLE = """\
# Sample of the PCI ID database
#\tvendor  vendor_name
#\t\tdevice  device_name
1002  Advanced Micro Devices, Inc. [AMD/ATI]
\t74a1  Aqua Vanjaram [Instinct MI300X]
\t\t1002 74a1  Instinct MI300X
10de  NVIDIA Corporation
\t1eb8  TU104GL [Tesla T4]
\t\t10de 12a2  T4 16GB
\t2237  GA102GL [A10G]
\t2330  GH100 [H100 SXM5 80GB]
\t0fb9  GP107GL High Definition Audio Controller
19e5  Huawei Technologies Co., Ltd.
\td801  Ascend 910
8086  Intel Corporation
\t1572  Ethernet Controller X710 for 10GbE SFP+
C 03  Display controller
\t02  3D controller
"""
