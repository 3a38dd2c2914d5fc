"""``gpustack-operator device-manager detect`` end to end (no cluster, no GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpustack_operator.cli import build_parser, main

from .fakes import PCI_IDS_SAMPLE, make_pci_device

P = "acceleratable.feature.gpustack.ai/"
T4 = json.dumps([{"manufacturer": "nvidia", "name": "Tesla T4", "memoryMiB": 15360, "count": 2}])


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GPUSTACK_PCI_IDS", "GPUSTACK_PCI_CLASS_PREFIXES"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def ascend_node(tmp_path: Path) -> Path:
    root = tmp_path / "pci"
    make_pci_device(root, "0000:81:00.0", "19e5", "d801", "120000")
    make_pci_device(root, "0000:82:00.0", "19e5", "d801", "120000")
    return root


def test_a_machine_without_accelerators_says_so_and_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["device-manager", "detect", "-o", "json", "--pci-root", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0
    document = json.loads(out)
    assert document["groups"] == []
    assert document["labels"] == {}
    assert {m["source"] for m in document["manufacturers"]} == {"none"}
    assert len(document["manufacturers"]) == 9
    assert "no accelerator found" in err


def test_pci_only_vendors_are_printed_with_their_labels(
    ascend_node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = tmp_path / "pci.ids"
    ids.write_text(PCI_IDS_SAMPLE)
    argv = ["device-manager", "detect", "--manufacturer", "ascend", "--pci-root", str(ascend_node)]
    code = main([*argv, "--pci-ids", str(ids)])
    document = yaml.safe_load(capsys.readouterr().out)
    assert code == 0
    assert document["groups"][0]["name"] == "Ascend 910"
    assert document["labels"][P + "ascend-910.count"] == "2"
    assert document["labels"][P + "ascend-910.product"] == "Ascend-910"


def test_sim_devices_print_as_a_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(
        [
            "device-manager",
            "detect",
            "-o",
            "table",
            "--sim-devices",
            T4,
            "--pci-root",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "nvidia-tesla-t4" in out
    assert f"{P}nvidia-tesla-t4.memory=15Gi" in out
    header = next(line for line in out.splitlines() if line.startswith("KEY"))
    assert header.split() == [
        "KEY",
        "PRODUCT",
        "MEMORY",
        "COUNT",
        "UNHEALTHY",
        "DRIVER",
        "RUNTIME",
        "CC",
    ]


def test_flags_come_from_the_environment(
    ascend_node: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUSTACK_DEVICE_MANAGER_MANUFACTURER", "ascend,nvidia")
    monkeypatch.setenv("GPUSTACK_DEVICE_MANAGER_PCI_ROOT", "/nonexistent")
    monkeypatch.setenv("GPUSTACK_DEVICE_MANAGER_DETECT_PCI_ROOT", str(ascend_node))  # wins
    monkeypatch.setenv("GPUSTACK_DEVICE_MANAGER_DETECT_OUTPUT", "json")
    assert main(["device-manager", "detect"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in document["manufacturers"]] == ["ascend", "nvidia"]
    assert document["labels"][P + "ascend-19e5d801.count"] == "2"


def test_an_unknown_manufacturer_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["device-manager", "detect", "--manufacturer", "intel"]) == 2
    assert "unknown manufacturer(s) intel" in capsys.readouterr().err


def test_one_manufacturer_and_nothing_found_fails_fast_unless_told_not_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["device-manager", "detect", "--manufacturer", "nvidia", "--pci-root", str(tmp_path)]
    assert main(argv) == 1
    assert "--no-fast-failed" in capsys.readouterr().err
    assert main([*argv, "--no-fast-failed"]) == 0


def test_stdout_stays_valid_json_when_real_vendor_libraries_are_probed(tmp_path: Path) -> None:
    """--no-pci-check makes the real NVML and amdsmi load; neither may write to stdout."""
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "gpustack_operator", "--log-format", "json"),
            *("device-manager", "detect", "-o", "json", "--no-pci-check"),
            *("--pci-root", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    sources = {m["name"]: m["source"] for m in document["manufacturers"]}
    assert sources["ascend"] == "pci"
    assert sources["nvidia"] in ("nvml", "pci")
    assert sources["amd"] in ("amdsmi", "pci")


def test_serve_needs_a_node_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_NODE_NAME", raising=False)
    monkeypatch.delenv("GPUSTACK_DEVICE_MANAGER_NODE_NAME", raising=False)
    assert main(["device-manager", "serve"]) == 2
    assert "KUBERNETES_NODE_NAME" in capsys.readouterr().err


def test_serve_flags_come_from_the_spec_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_NODE_NAME", "node-7")
    monkeypatch.setenv("KUBERNETES_POD_NAMESPACE", "gpu-system")
    monkeypatch.setenv("GPUSTACK_DEVICE_MANAGER_MONITOR_PERIOD", "2.5")
    args = build_parser().parse_args(["device-manager", "serve"])
    assert (args.node_name, args.system_namespace, args.monitor_period) == (
        "node-7",
        "gpu-system",
        2.5,
    )
    assert args.health_probe_bind_address == ":8081"
    assert args.metrics_bind_address == ":8080"


@pytest.mark.parametrize("period", ["1", "0.5", "-3"])
def test_the_monitor_period_must_exceed_one_second(
    period: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser(env={}).parse_args(["device-manager", "serve", "--monitor-period", period])
    assert "more than 1s" in capsys.readouterr().err


def test_serve_refuses_a_bad_bind_address_before_connecting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["device-manager", "serve", "--node-name", "n", "--metrics-bind-address", "bogus"]
    assert main([*argv, "--kubeconfig", str(tmp_path / "absent")]) == 2
    assert "has no port" in capsys.readouterr().err
