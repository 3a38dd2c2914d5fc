"""AMD GPUs through ROCm's ``amdsmi`` Python binding (the ``amd`` extra).

Importing ``amdsmi`` is hostile when ROCm is absent: it prints to *stdout* and then raises a
``KeyError`` rather than an ``ImportError``. ``load_amdsmi`` therefore locates
``libamd_smi.so`` itself (paths: docs/configuration.md), preloads it so the binding's own
lookup finds it, imports with stdout captured (``detect -o json`` must stay valid JSON), and
turns any failure into ``LibraryUnavailable``. The outcome is cached: a failed import is not
retried, so the warning is not repeated on every detection.

Mapping: name = ASIC market name; memory = VRAM size (MiB); cores = compute units;
compute capability = the gfx target (``gfx942``); driver version = amdgpu driver version;
runtime version = ROCm version when ``librocm-core`` reports it; unhealthy when the card
reports uncorrectable ECC errors; family is not known to amdsmi and stays empty.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import io
import threading
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

import structlog

from gpustack_operator.devicemanager.detectors.base import (
    DeviceSample,
    LibraryUnavailable,
    WarnOnce,
)
from gpustack_operator.devicemanager.libraries import (
    AMD_SMI_LIBRARY,
    amd_library_dirs,
    find_library,
)
from gpustack_operator.domain.node.devices import DetectedDevice, DeviceGroup, group_devices

log = structlog.get_logger(__name__)

MIB = 1024 * 1024
_NOT_SUPPORTED = 2  # AMDSMI_STATUS_NOT_SUPPORTED
_NOT_AVAILABLE = "N/A"  # what the binding returns for a value the card does not report

_load_lock = threading.Lock()
_loaded: ModuleType | LibraryUnavailable | None = None


def load_amdsmi(env: Mapping[str, str] | None = None) -> ModuleType:
    """The imported ``amdsmi`` module, or ``LibraryUnavailable`` saying why not (cached)."""
    global _loaded
    with _load_lock:
        if _loaded is None:
            _loaded = _import_amdsmi(env)
        if isinstance(_loaded, LibraryUnavailable):
            raise _loaded
        return _loaded


def _import_amdsmi(env: Mapping[str, str] | None) -> ModuleType | LibraryUnavailable:
    dirs = amd_library_dirs(env)
    library = find_library(AMD_SMI_LIBRARY, dirs)
    if library is not None:
        # amdsmi dlopens the bare soname as one of its candidates; a library already loaded
        # with that soname satisfies it, which is how AMD_SMI_LIB_PATH & co. take effect.
        try:
            ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            return LibraryUnavailable(
                f"{library} could not be loaded ({exc}): check that ROCm matches the driver"
            )
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            module = importlib.import_module("amdsmi")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the binding raises KeyError; see below for SystemExit
        # SystemExit is caught on purpose: here it can only come from the library giving up
        # at import, and the agent must degrade to PCI detection rather than exit.
        where = f"found at {library}" if library else "not found in " + ", ".join(map(str, dirs))
        return LibraryUnavailable(
            f"the amdsmi binding could not be loaded ({type(exc).__name__}: {exc}); "
            f"{AMD_SMI_LIBRARY} was {where}: "
            "install ROCm (amd-smi-lib) on the node and set ROCM_PATH or AMD_SMI_LIB_PATH"
        )
    finally:
        if captured.getvalue().strip():
            log.debug("amdsmi printed while importing", output=captured.getvalue().strip())
    return module


def _number(value: Any) -> int | None:
    """An integer reading, or ``None`` for the binding's ``"N/A"`` and other non-numbers."""
    if isinstance(value, bool) or value is None or value == _NOT_AVAILABLE:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str:
    text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
    text = text.strip()
    return "" if text == _NOT_AVAILABLE else text


class AmdDetector:
    """Detects AMD GPUs and reads their live metrics through amdsmi."""

    source = "amdsmi"

    def __init__(
        self,
        amdsmi: Any | None = None,
        *,
        manufacturer: str = "amd",
        env: Mapping[str, str] | None = None,
        with_memory: bool = False,
    ) -> None:
        self._amdsmi = amdsmi
        self._env = env
        self._manufacturer = manufacturer
        self._with_memory = with_memory
        self._lock = threading.Lock()
        self._warn = WarnOnce(log)

    @property
    def manufacturer(self) -> str:
        return self._manufacturer

    @contextlib.contextmanager
    def _session(self) -> Iterator[Any]:
        smi = self._amdsmi if self._amdsmi is not None else load_amdsmi(self._env)
        try:
            smi.amdsmi_init()
        except smi.AmdSmiException as exc:
            raise LibraryUnavailable(
                f"amdsmi initialisation failed: {exc}; check that the amdgpu driver is loaded "
                "and that /dev/kfd and /dev/dri are available to the agent"
            ) from exc
        try:
            yield smi
        finally:
            try:
                smi.amdsmi_shut_down()
            except smi.AmdSmiException as exc:
                log.debug("amdsmi_shut_down failed", error=str(exc))

    def _call(self, smi: Any, function: str, *args: Any, index: int | None = None) -> Any:
        """``smi.<function>(*args)``, or ``None`` when it fails (one warning per failure kind)."""
        try:
            return getattr(smi, function)(*args)
        except smi.AmdSmiException as exc:
            code = getattr(exc, "err_code", None)
            if code == _NOT_SUPPORTED:
                log.debug("amdsmi query not supported", function=function, error=str(exc))
            else:
                self._warn(
                    (function, str(code)),
                    "amdsmi query failed; the value is left empty",
                    function=function,
                    error=str(exc).replace("\n", " ").replace("\t", ""),
                    device_index=index,
                )
            return None

    def _handles(self, smi: Any) -> list[Any]:
        try:
            return list(smi.amdsmi_get_processor_handles())
        except smi.AmdSmiException as exc:
            raise LibraryUnavailable(
                f"amdsmi could not list the GPUs: {exc}; check `amd-smi list` on the node"
            ) from exc

    def _runtime_version(self, smi: Any) -> str:
        getter = getattr(smi, "amdsmi_get_rocm_version", None)
        if getter is None:
            return ""
        try:
            ok, version = getter()
        except Exception as exc:  # it loads librocm-core itself; any failure = unknown
            log.debug("ROCm version unknown", error=str(exc))
            return ""
        return _text(version) if ok else ""

    def detect(self) -> list[DeviceGroup]:
        with self._lock, self._session() as smi:
            runtime_version = self._runtime_version(smi)
            devices: list[DetectedDevice] = []
            for index, handle in enumerate(self._handles(smi)):
                device = self._detect_card(smi, index, handle, runtime_version)
                if device is not None:
                    devices.append(device)
        return group_devices(self._manufacturer, devices, with_memory=self._with_memory)

    def _detect_card(
        self, smi: Any, index: int, handle: Any, runtime_version: str
    ) -> DetectedDevice | None:
        asic = self._call(smi, "amdsmi_get_gpu_asic_info", handle, index=index) or {}
        name = _text(asic.get("market_name", ""))
        if not name:
            self._warn(
                ("card-skipped", str(index)),
                "skipping a GPU amdsmi cannot name; it is left out of the labels",
                device_index=index,
            )
            return None
        vram = self._call(smi, "amdsmi_get_gpu_vram_info", handle, index=index) or {}
        driver = self._call(smi, "amdsmi_get_gpu_driver_info", handle, index=index) or {}
        uuid = self._call(smi, "amdsmi_get_gpu_device_uuid", handle, index=index)
        ecc = self._call(smi, "amdsmi_get_gpu_total_ecc_count", handle, index=index) or {}
        return DetectedDevice(
            name=name,
            memory_mib=_number(vram.get("vram_size")) or 0,
            cores=_number(asic.get("num_compute_units")) or 0,
            driver_version=_text(driver.get("driver_version", "")),
            runtime_version=runtime_version,
            compute_capability=_text(asic.get("target_graphics_version", "")),
            uuid=_text(uuid) if uuid is not None else "",
            index=index,
            unhealthy=(_number(ecc.get("uncorrectable_count")) or 0) > 0,
        )

    def sample(self) -> list[DeviceSample]:
        """Utilisation, VRAM, temperature, power and health of every GPU, for ``/metrics``."""
        samples: list[DeviceSample] = []
        with self._lock, self._session() as smi:
            for index, handle in enumerate(self._handles(smi)):
                asic = self._call(smi, "amdsmi_get_gpu_asic_info", handle, index=index) or {}
                uuid = self._call(smi, "amdsmi_get_gpu_device_uuid", handle, index=index)
                activity = self._call(smi, "amdsmi_get_gpu_activity", handle, index=index) or {}
                usage = self._call(smi, "amdsmi_get_gpu_vram_usage", handle, index=index) or {}
                power = self._call(smi, "amdsmi_get_power_info", handle, index=index) or {}
                ecc = self._call(smi, "amdsmi_get_gpu_total_ecc_count", handle, index=index)
                temp = self._temperature(smi, handle, index)
                util = _number(activity.get("gfx_activity"))
                used = _number(usage.get("vram_used"))
                total = _number(usage.get("vram_total"))
                watts = _number(power.get("current_socket_power"))
                if watts is None:
                    watts = _number(power.get("average_socket_power"))
                samples.append(
                    DeviceSample(
                        manufacturer=self._manufacturer,
                        model=_text(asic.get("market_name", "")),
                        uuid=_text(uuid) if uuid is not None else "",
                        index=index,
                        utilization_percent=None if util is None else float(util),
                        memory_used_bytes=None if used is None else used * MIB,
                        memory_total_bytes=None if total is None else total * MIB,
                        temperature_celsius=None if temp is None else float(temp),
                        power_watts=None if watts is None else float(watts),
                        healthy=None
                        if ecc is None
                        else (_number(ecc.get("uncorrectable_count")) or 0) == 0,
                    )
                )
        return samples

    def _temperature(self, smi: Any, handle: Any, index: int) -> int | None:
        """The edge sensor, or the hotspot (junction) sensor on cards without one (MI300)."""
        kinds = getattr(smi, "AmdSmiTemperatureType", None)
        metrics = getattr(smi, "AmdSmiTemperatureMetric", None)
        if kinds is None or metrics is None:
            return None
        for sensor in (kinds.EDGE, kinds.HOTSPOT):
            value = _number(
                self._call(
                    smi, "amdsmi_get_temp_metric", handle, sensor, metrics.CURRENT, index=index
                )
            )
            if value is not None:
                return value
        return None
