"""The console script's shared plumbing: version, help, flags from the environment."""

from __future__ import annotations

import argparse

import pytest

from gpustack_operator import __version__
from gpustack_operator.cli import apply_env_defaults, build_parser, env_var_for, main


def test_version_flag_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_a_subcommand_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser(env={}).parse_args([])
    assert exc.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_env_var_names_use_underscores_for_dashes() -> None:
    assert (
        env_var_for(["device-manager"], "--monitor-period")
        == "GPUSTACK_DEVICE_MANAGER_MONITOR_PERIOD"
    )


def _toy_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toy")
    subs = parser.add_subparsers(dest="command")
    serve = subs.add_parser("device-manager")
    serve.add_argument("--monitor-period", type=float, default=5.0)
    serve.add_argument("--no-pci-check", action="store_true")
    serve.add_argument("--manufacturer", action="append")
    serve.add_argument("--node-name", required=True)
    return parser


def test_environment_supplies_defaults_and_the_command_line_wins() -> None:
    parser = _toy_parser()
    apply_env_defaults(
        parser,
        [],
        {
            "GPUSTACK_DEVICE_MANAGER_MONITOR_PERIOD": "2.5",
            "GPUSTACK_DEVICE_MANAGER_NO_PCI_CHECK": "true",
            "GPUSTACK_DEVICE_MANAGER_MANUFACTURER": "nvidia, amd",
            "GPUSTACK_DEVICE_MANAGER_NODE_NAME": "node-a",
        },
    )
    args = parser.parse_args(["device-manager"])
    assert args.monitor_period == 2.5
    assert args.no_pci_check is True
    assert args.manufacturer == ["nvidia", "amd"]
    assert args.node_name == "node-a"
    args = parser.parse_args(["device-manager", "--monitor-period", "9", "--node-name", "b"])
    assert args.monitor_period == 9.0
    assert args.node_name == "b"


def test_an_invalid_environment_value_names_the_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = _toy_parser()
    with pytest.raises(SystemExit):
        apply_env_defaults(parser, [], {"GPUSTACK_DEVICE_MANAGER_MONITOR_PERIOD": "soon"})
    assert "GPUSTACK_DEVICE_MANAGER_MONITOR_PERIOD" in capsys.readouterr().err
