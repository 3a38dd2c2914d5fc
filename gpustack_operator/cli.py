"""The ``gpustack-operator`` console script: argument parsing only.

Each subcommand lives in ``gpustack_operator.commands.<module>`` and exposes
``register(subparsers)``, which adds its parser and sets ``handler`` — a function taking the
parsed namespace and returning an exit code. Only the module of the subcommand being run is
imported (the others pull in aiohttp and the controllers, most of start-up); the
top-level ``--help`` lists every subcommand from :data:`COMMANDS`.

Any flag can also come from the environment as ``GPUSTACK_<SUBCOMMAND>_<FLAG>``, e.g.
``GPUSTACK_DEVICE_MANAGER_MONITOR_PERIOD``, and the chain policy's flags from
``GPUSTACK_<FLAG>`` too (docs/configuration.md, "Chain policy"); a flag given on the command
line wins, then the subcommand's variable.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpustack_operator import __version__
from gpustack_operator.commands.envflags import apply_env_defaults
from gpustack_operator.commands.envflags import env_var_for as env_var_for
from gpustack_operator.runtime.logs import LOG_LEVELS, configure_logging


@dataclass(frozen=True)
class Command:
    """A subcommand as the top-level parser lists it, before its module is imported."""

    name: str
    module: str
    summary: str


# In the order `--help` lists them. A subcommand is listed only once it works end to end.
COMMANDS: tuple[Command, ...] = (
    Command(
        "worker",
        "worker",
        "run the controllers: node capacity profiles and the Kueue queue chain",
    ),
    Command(
        "worker-gateway",
        "worker_gateway",
        "serve one read-only API over the Kueue queues of several clusters",
    ),
    Command(
        "device-manager",
        "device_manager",
        "detect accelerators on this node and report them as node labels",
    ),
    Command(
        "sim",
        "sim",
        "run a simulated Kubernetes cluster with the operator (a test double and a demo)",
    ),
    Command(
        "queues",
        "queues",
        "list the pools a namespace can submit to: device, unit, quota, usage, LocalQueue",
    ),
    Command(
        "plan",
        "plan",
        "print the Kueue chain the worker would build for some nodes (writes nothing)",
    ),
)


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named in *argv* (the first argument that is one), else ``None``."""
    names = {command.name for command in COMMANDS}
    return next((arg for arg in argv if arg in names), None)


def build_parser(
    env: Mapping[str, str] | None = None, *, only: str | None = None
) -> argparse.ArgumentParser:
    """The full parser; with *only*, the other subcommands are listed but not imported."""
    parser = argparse.ArgumentParser(
        prog="gpustack-operator",
        description="Turns node hardware into a Kueue scheduling chain for GPU/NPU workloads.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, default="info", help="log verbosity (default: info)"
    )
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        default="auto",
        help="auto: console on a terminal, JSON otherwise (default: auto)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        if only is None or command.name == only:
            module = importlib.import_module(f"gpustack_operator.commands.{command.module}")
            module.register(subparsers)
        else:
            subparsers.add_parser(command.name, help=command.summary, add_help=False)
    apply_env_defaults(parser, [], os.environ if env is None else env)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(only=chosen_command(arguments) or "")
    args = parser.parse_args(arguments)
    configure_logging(args.log_level, args.log_format)
    try:
        code = args.handler(args)
    except KeyboardInterrupt:
        return 130
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
