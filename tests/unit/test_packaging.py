"""The built wheel installs one top-level package, gpustack_operator, with the reconcilers
inside it (README.md, "Layout"): nothing generic such as ``controllers`` lands in
site-packages."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def uv() -> str | None:
    found = shutil.which("uv")
    local = ROOT / ".tools" / "bin" / "uv"
    return found or (str(local) if local.exists() else None)


def test_the_wheel_holds_gpustack_operator_alone(tmp_path: Path) -> None:
    binary = uv()
    if binary is None:
        pytest.skip("uv is not installed (make install puts it in .tools/bin)")
    built = subprocess.run(
        [binary, "build", "--wheel", "--offline", "--out-dir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if built.returncode != 0 and "offline" in built.stderr.lower():
        pytest.skip(f"the build backend is not in uv's cache (run uv build once): {built.stderr}")
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    metadata = {name for name in top if name.endswith(".dist-info")}
    assert len(metadata) == 1
    assert top - metadata == {"gpustack_operator"}
    expected = {
        f"gpustack_operator/controllers/{p.name}" for p in (ROOT / "controllers").glob("*.py")
    }
    assert expected <= set(names)
