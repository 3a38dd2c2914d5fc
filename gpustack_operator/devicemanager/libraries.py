"""Where the vendor management libraries are looked for (docs/configuration.md).

NVML (``libnvidia-ml.so.1``) is found by the dynamic loader the way the NVIDIA container
toolkit arranges it, so only ``LD_LIBRARY_PATH`` matters there. ROCm's ``libamd_smi.so`` lives
under the ROCm root, which installations move around: ``AMD_SMI_LIB_PATH`` and
``ROCM_SMI_LIB_PATH`` (directories searched first), then ``ROCM_HOME``, ``ROCM_PATH`` (default
``/opt/rocm``) ``/lib``, then ``LD_LIBRARY_PATH``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

NVML_LIBRARY = "libnvidia-ml.so.1"
AMD_SMI_LIBRARY = "libamd_smi.so"
DEFAULT_ROCM_PATH = "/opt/rocm"


def _split_path_list(value: str | None) -> list[Path]:
    return [Path(p) for p in (value or "").split(os.pathsep) if p.strip()]


def rocm_root(env: Mapping[str, str] | None = None) -> Path:
    """``ROCM_HOME``, else ``ROCM_PATH``, else ``/opt/rocm`` (empty values count as unset)."""
    environ = os.environ if env is None else env
    return Path(environ.get("ROCM_HOME") or environ.get("ROCM_PATH") or DEFAULT_ROCM_PATH)


def amd_library_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """Directories searched for ``libamd_smi.so``, most specific first, without duplicates."""
    environ = os.environ if env is None else env
    dirs = [
        *_split_path_list(environ.get("AMD_SMI_LIB_PATH")),
        *_split_path_list(environ.get("ROCM_SMI_LIB_PATH")),
        rocm_root(environ) / "lib",
        *_split_path_list(environ.get("LD_LIBRARY_PATH")),
    ]
    unique: list[Path] = []
    for d in dirs:
        if d not in unique:
            unique.append(d)
    return unique


def find_library(filename: str, dirs: list[Path]) -> Path | None:
    """The first ``<dir>/<filename>`` that exists (versioned names like ``.so.1`` accepted)."""
    for directory in dirs:
        candidate = directory / filename
        if candidate.exists():
            return candidate
        try:
            versioned = sorted(directory.glob(f"{filename}.*"))
        except OSError:
            continue
        if versioned:
            return versioned[0]
    return None
