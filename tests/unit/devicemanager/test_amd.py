"""amdsmi -> device groups, and the guarded import of a binding that misbehaves."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gpustack_operator.devicemanager.detectors import amd
from gpustack_operator.devicemanager.detectors.amd import AmdDetector, load_amdsmi
from gpustack_operator.devicemanager.detectors.base import LibraryUnavailable
from gpustack_operator.devicemanager.libraries import amd_library_dirs, find_library, rocm_root
from gpustack_operator.domain.node.devices import device_labels

from .fakes import FakeAmdGpu, FakeAmdSmi

P = "acceleratable.feature.gpustack.ai/"


def mi300x(uuid: str = "amd-0", **kw: object) -> FakeAmdGpu:
    return FakeAmdGpu("AMD Instinct MI300X", 196592, uuid=uuid, **kw)  # type: ignore[arg-type]


def test_mi300x_maps_to_groups_and_labels() -> None:
    smi = FakeAmdSmi([mi300x("a0"), mi300x("a1", uncorrectable=2)])
    (group,) = AmdDetector(smi).detect()
    assert group.key == "amd-instinct-mi300x"
    assert (group.memory_mib, group.cores, group.compute_capability) == (196592, 304, "gfx942")
    assert (group.driver_version, group.runtime_version) == ("6.8.5", "6.4.1")
    assert [(a.id, a.unhealthy) for a in group.accelerators] == [("a0", False), ("a1", True)]
    labels = device_labels([group])
    assert labels[P + "amd-instinct-mi300x.memory"] == "192Gi"
    assert labels[P + "amd-instinct-mi300x.count"] == "2"
    assert labels[P + "amd.runtime-version"] == "6.4.1"
    assert P + "amd-instinct-mi300x.family" not in labels
    assert smi.initialised == 0


def test_values_the_card_cannot_report_stay_empty() -> None:
    gpu = mi300x(compute_units="N/A", failures={"amdsmi_get_gpu_vram_info": 2})
    (group,) = AmdDetector(FakeAmdSmi([gpu])).detect()
    assert (group.cores, group.memory_mib) == (0, 0)


def test_a_card_without_a_name_is_skipped() -> None:
    smi = FakeAmdSmi([mi300x(failures={"amdsmi_get_gpu_asic_info": 8}), mi300x("ok")])
    (group,) = AmdDetector(smi).detect()
    assert [a.id for a in group.accelerators] == ["ok"]


def test_samples_use_the_hotspot_sensor_when_there_is_no_edge_sensor() -> None:
    (sample,) = AmdDetector(FakeAmdSmi([mi300x(edge_temperature=None)])).sample()
    assert sample.temperature_celsius == 60.0
    assert sample.utilization_percent == 37.0
    assert sample.memory_used_bytes == 1024 * 2**20
    assert sample.power_watts == 350.0
    assert sample.healthy is True


# ------------------------------------------------------------------ guarded import


@pytest.fixture
def hostile_amdsmi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An ``amdsmi`` package on sys.path that behaves like the real one without ROCm."""
    package = tmp_path / "site" / "amdsmi"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import os\n"
        "print('/opt/rocm/lib/libamd_smi.so: cannot open shared object file')\n"
        "n = int(os.environ.get('FAKE_AMDSMI_IMPORTS', 0))\n"
        "os.environ['FAKE_AMDSMI_IMPORTS'] = str(n + 1)\n"
        "raise KeyError('libamd_smi.so')\n"
    )
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.setattr(amd, "_loaded", None)
    monkeypatch.setenv("FAKE_AMDSMI_IMPORTS", "0")
    yield package
    sys.modules.pop("amdsmi", None)


def test_a_hostile_import_prints_nothing_and_is_not_retried(
    hostile_amdsmi: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = {"ROCM_PATH": str(tmp_path / "rocm")}
    with capture_logs() as logs:
        with pytest.raises(LibraryUnavailable, match=r"KeyError.*ROCM_PATH or AMD_SMI_LIB_PATH"):
            load_amdsmi(env)
        with pytest.raises(LibraryUnavailable):
            AmdDetector(env=env).detect()
    assert capsys.readouterr().out == ""
    # what it printed is kept for debugging, not lost
    assert any("cannot open shared object" in str(e.get("output")) for e in logs)
    assert os.environ["FAKE_AMDSMI_IMPORTS"] == "1"


def test_a_binding_that_exits_at_import_degrades_instead(
    hostile_amdsmi: Path, tmp_path: Path
) -> None:
    (hostile_amdsmi / "__init__.py").write_text("raise SystemExit(3)\n")
    with pytest.raises(LibraryUnavailable, match="SystemExit"):
        load_amdsmi({"ROCM_PATH": str(tmp_path)})


def test_ctrl_c_during_the_import_is_not_swallowed(hostile_amdsmi: Path, tmp_path: Path) -> None:
    (hostile_amdsmi / "__init__.py").write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_amdsmi({"ROCM_PATH": str(tmp_path)})


def test_library_search_follows_the_rocm_variables(tmp_path: Path) -> None:
    env = {
        "AMD_SMI_LIB_PATH": str(tmp_path / "smi"),
        "ROCM_SMI_LIB_PATH": str(tmp_path / "rsmi"),
        "ROCM_PATH": str(tmp_path / "rocm"),
        "LD_LIBRARY_PATH": f"{tmp_path / 'ld'}:{tmp_path / 'smi'}",
    }
    assert amd_library_dirs(env) == [
        tmp_path / "smi",
        tmp_path / "rsmi",
        tmp_path / "rocm" / "lib",
        tmp_path / "ld",
    ]
    assert rocm_root({"ROCM_HOME": "/x", "ROCM_PATH": "/y"}) == Path("/x")
    assert rocm_root({}) == Path("/opt/rocm")
    (tmp_path / "ld").mkdir()
    (tmp_path / "ld" / "libamd_smi.so.25").write_text("")
    assert (
        find_library("libamd_smi.so", amd_library_dirs(env)) == tmp_path / "ld" / "libamd_smi.so.25"
    )
