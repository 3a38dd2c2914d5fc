"""NVIDIA cards through NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``).

Mapping (docs/device-manager.md): driver version = NVML system driver version; runtime
version = CUDA driver version as ``major.minor`` (``13000`` -> ``13.0``); compute capability
``major.minor``; family from the capability; unhealthy when the card reports uncorrected
volatile ECC errors.

A query a card does not support (``NotSupported``, ``FunctionNotFound`` on older drivers)
quietly leaves that fact empty. Any other NVML error on one card degrades only that fact or that
card, with one warning. Failing to initialise NVML or to count the cards raises
``LibraryUnavailable`` so detection falls back to PCI.

The module is injected (``nvml=``) so tests can drive the mapping with a fake.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import structlog

from gpustack_operator.devicemanager.detectors.base import (
    DeviceSample,
    LibraryUnavailable,
    WarnOnce,
)
from gpustack_operator.devicemanager.libraries import NVML_LIBRARY
from gpustack_operator.domain.node.devices import DetectedDevice, DeviceGroup, group_devices

log = structlog.get_logger(__name__)

MIB = 1024 * 1024

# NVML return codes (nvml.h); read from the module when it has them.
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_RESET_REQUIRED = 16
_LIB_RM_VERSION_MISMATCH = 18


def format_cuda_version(version: int) -> str:
    """NVML's CUDA driver version integer as ``major.minor`` (``12040`` -> ``12.4``)."""
    if version <= 0:
        return ""
    return f"{version // 1000}.{(version % 1000) // 10}"


def family_from_compute_capability(major: int, minor: int) -> str:
    """The architecture family of a compute capability (docs/device-manager.md); ``""`` when
    unknown.

    11.x is listed with Blackwell as well: CUDA 13 renumbered Jetson Thor from 10.1 to 11.0.
    """
    if major == 7:
        return "Volta" if minor < 5 else "Turing"
    if major == 8:
        return "Ada-Lovelace" if minor == 9 else "Ampere"
    return {
        1: "Tesla",
        2: "Fermi",
        3: "Kepler",
        5: "Maxwell",
        6: "Pascal",
        9: "Hopper",
        10: "Blackwell",
        11: "Blackwell",
        12: "Blackwell",
    }.get(major, "")


def _text(value: Any) -> str:
    """NVML strings are ``str`` in current bindings and ``bytes`` in older ones."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").strip()
    return str(value).strip()


def _error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _describe(exc: BaseException) -> str:
    # NVMLError.__str__ asks the library for the message, which can itself fail.
    try:
        text = str(exc)
    except Exception:  # pragma: no cover - defensive
        text = ""
    code = _error_code(exc)
    return f"{text or type(exc).__name__} (NVML code {code})" if code is not None else text


def _init_failure(exc: BaseException) -> LibraryUnavailable:
    code = _error_code(exc)
    if code == _LIBRARY_NOT_FOUND:
        hint = (
            f"{NVML_LIBRARY} was not found: install the NVIDIA driver on the node and run the "
            "agent with the NVIDIA container runtime (or mount the driver libraries and set "
            "LD_LIBRARY_PATH)"
        )
    elif code == _DRIVER_NOT_LOADED:
        hint = "the NVIDIA kernel driver is not loaded: check `nvidia-smi` on the node"
    elif code == _NO_PERMISSION:
        hint = "no permission to open /dev/nvidia*: run the agent privileged or with the devices"
    elif code == _LIB_RM_VERSION_MISMATCH:
        hint = "the NVML library and the kernel driver differ in version: reboot or reload"
    else:
        hint = "check the driver with `nvidia-smi` on the node"
    return LibraryUnavailable(f"NVML initialisation failed: {_describe(exc)}; {hint}")


@dataclass
class _CardState:
    index: int
    lost: bool = False


class NvidiaDetector:
    """Detects NVIDIA cards and reads their live metrics through NVML."""

    source = "nvml"

    def __init__(
        self, nvml: Any | None = None, *, manufacturer: str = "nvidia", with_memory: bool = False
    ) -> None:
        self._nvml = nvml
        self._with_memory = with_memory
        self._manufacturer = manufacturer
        self._lock = threading.Lock()
        self._warn = WarnOnce(log)

    @property
    def manufacturer(self) -> str:
        return self._manufacturer

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml  # imported on first use: tests inject a fake instead
            except ImportError as exc:
                raise LibraryUnavailable(
                    "the nvidia-ml-py package (module pynvml) is not installed: "
                    "reinstall gpustack-operator with its dependencies"
                ) from exc
            self._nvml = pynvml
        return self._nvml

    @contextmanager
    def _session(self) -> Iterator[Any]:
        """``nvmlInit`` ... ``nvmlShutdown`` (NVML reference-counts nested sessions)."""
        nvml = self._module()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise _init_failure(exc) from exc
        try:
            yield nvml
        finally:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError as exc:
                log.debug("nvmlShutdown failed", error=_describe(exc))

    def _call(self, nvml: Any, card: _CardState | None, function: str, *args: Any) -> Any:
        """``nvml.<function>(*args)``, or ``None`` when it fails (see the module docstring)."""
        try:
            return getattr(nvml, function)(*args)
        except nvml.NVMLError as exc:
            code = _error_code(exc)
            if card is not None and code in (_GPU_IS_LOST, _RESET_REQUIRED):
                card.lost = True
            if code in (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND):
                log.debug("NVML query not supported", function=function, error=_describe(exc))
            else:
                self._warn(
                    (function, str(code)),
                    "NVML query failed; the value is left empty",
                    function=function,
                    error=_describe(exc),
                    device_index=None if card is None else card.index,
                )
            return None

    def _count(self, nvml: Any) -> int:
        try:
            return int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            raise LibraryUnavailable(
                f"NVML could not count the GPUs: {_describe(exc)}; check `nvidia-smi` on the node"
            ) from exc

    def detect(self) -> list[DeviceGroup]:
        with self._lock, self._session() as nvml:
            driver = self._call(nvml, None, "nvmlSystemGetDriverVersion")
            cuda = self._call(nvml, None, "nvmlSystemGetCudaDriverVersion")
            driver_version = _text(driver) if driver is not None else ""
            runtime_version = format_cuda_version(int(cuda)) if cuda is not None else ""
            devices: list[DetectedDevice] = []
            for index in range(self._count(nvml)):
                device = self._detect_card(nvml, index, driver_version, runtime_version)
                if device is not None:
                    devices.append(device)
        return group_devices(self._manufacturer, devices, with_memory=self._with_memory)

    def _detect_card(
        self, nvml: Any, index: int, driver_version: str, runtime_version: str
    ) -> DetectedDevice | None:
        card = _CardState(index)
        handle = self._call(nvml, card, "nvmlDeviceGetHandleByIndex", index)
        name = None if handle is None else self._call(nvml, card, "nvmlDeviceGetName", handle)
        if handle is None or name is None or not _text(name):
            self._warn(
                ("card-skipped", str(index)),
                "skipping a GPU NVML cannot name; it is left out of the labels",
                device_index=index,
            )
            return None
        memory = self._call(nvml, card, "nvmlDeviceGetMemoryInfo", handle)
        cores = self._call(nvml, card, "nvmlDeviceGetNumGpuCores", handle)
        capability = self._call(nvml, card, "nvmlDeviceGetCudaComputeCapability", handle)
        uuid = self._call(nvml, card, "nvmlDeviceGetUUID", handle)
        ecc = self._uncorrected_ecc_errors(nvml, card, handle)
        compute_capability = family = ""
        if capability is not None:
            major, minor = int(capability[0]), int(capability[1])
            compute_capability = f"{major}.{minor}"
            family = family_from_compute_capability(major, minor)
        return DetectedDevice(
            name=_text(name),
            memory_mib=int(memory.total) // MIB if memory is not None else 0,
            cores=int(cores) if cores is not None else 0,
            driver_version=driver_version,
            runtime_version=runtime_version,
            compute_capability=compute_capability,
            family=family,
            uuid=_text(uuid) if uuid is not None else "",
            index=index,
            unhealthy=card.lost or (ecc or 0) > 0,
        )

    def _uncorrected_ecc_errors(self, nvml: Any, card: _CardState, handle: Any) -> int | None:
        count = self._call(
            nvml,
            card,
            "nvmlDeviceGetTotalEccErrors",
            handle,
            getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
            getattr(nvml, "NVML_VOLATILE_ECC", 0),
        )
        return None if count is None else int(count)

    def sample(self) -> list[DeviceSample]:
        """Utilisation, memory, temperature, power and health of every card, for ``/metrics``."""
        samples: list[DeviceSample] = []
        with self._lock, self._session() as nvml:
            for index in range(self._count(nvml)):
                card = _CardState(index)
                handle = self._call(nvml, card, "nvmlDeviceGetHandleByIndex", index)
                if handle is None:
                    continue
                name = self._call(nvml, card, "nvmlDeviceGetName", handle)
                uuid = self._call(nvml, card, "nvmlDeviceGetUUID", handle)
                util = self._call(nvml, card, "nvmlDeviceGetUtilizationRates", handle)
                memory = self._call(nvml, card, "nvmlDeviceGetMemoryInfo", handle)
                sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
                temp = self._call(nvml, card, "nvmlDeviceGetTemperature", handle, sensor)
                power_mw = self._call(nvml, card, "nvmlDeviceGetPowerUsage", handle)
                ecc = self._uncorrected_ecc_errors(nvml, card, handle)
                samples.append(
                    DeviceSample(
                        manufacturer=self._manufacturer,
                        model=_text(name) if name is not None else "",
                        uuid=_text(uuid) if uuid is not None else "",
                        index=index,
                        utilization_percent=float(util.gpu) if util is not None else None,
                        memory_used_bytes=int(memory.used) if memory is not None else None,
                        memory_total_bytes=int(memory.total) if memory is not None else None,
                        temperature_celsius=float(temp) if temp is not None else None,
                        power_watts=float(power_mw) / 1000.0 if power_mw is not None else None,
                        healthy=not (card.lost or (ecc or 0) > 0),
                    )
                )
        return samples
