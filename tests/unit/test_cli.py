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


def test_every_subcommand_is_listed_and_only_the_chosen_one_is_imported() -> None:
    import sys

    from gpustack_operator.cli import COMMANDS, chosen_command

    assert chosen_command(["--log-level", "debug", "plan", "--nodes", "x"]) == "plan"
    assert chosen_command(["--version"]) is None
    for command in COMMANDS:
        sys.modules.pop(f"gpustack_operator.commands.{command.module}", None)
    parser = build_parser(env={}, only="plan")
    help_text = parser.format_help()
    for command in COMMANDS:
        assert command.name in help_text
    assert "gpustack_operator.commands.plan" in sys.modules
    assert "gpustack_operator.commands.worker" not in sys.modules


def test_every_subcommand_module_registers_the_name_cli_lists() -> None:
    """The static table and the modules agree: each registers its name with a handler."""
    from gpustack_operator.cli import COMMANDS

    for command in COMMANDS:
        parser = build_parser(env={}, only=command.name)
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        assert _handlers_everywhere(subparsers.choices[command.name]), command.name


def _handlers_everywhere(parser: argparse.ArgumentParser) -> bool:
    """A parser runs a handler, or every one of its own subcommands does."""
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not nested:
        return callable(parser.get_default("handler"))
    return nested[0].required and all(_handlers_everywhere(p) for p in nested[0].choices.values())


def test_an_environment_value_outside_the_choices_names_the_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser(env={"GPUSTACK_LOG_LEVEL": "bogus"})
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "GPUSTACK_LOG_LEVEL='bogus'" in err
    assert "debug" in err
