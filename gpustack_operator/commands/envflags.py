"""Flags from the environment: ``GPUSTACK_<COMMAND>_<FLAG>`` (and, for the chain policy's
flags, ``GPUSTACK_<FLAG>``) become parser defaults (docs/configuration.md, "Flags from the
environment").

Here rather than in ``cli.py`` so that the commands, which name these variables in their
help, never import the console script that imports them.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

__all__ = ["SHARED_ENV", "apply_env_defaults", "env_var_for"]

SHARED_ENV = "shared_env"
"""Attribute of an action whose flag also comes from ``GPUSTACK_<FLAG>`` (the chain policy's,
``commands/policy_flags.py``), shared by every command that has it."""


def env_var_for(command_path: Sequence[str], option: str) -> str:
    """The environment variable that supplies *option* of the (sub)command *command_path*."""
    parts = [*command_path, option.lstrip("-")]
    return "GPUSTACK_" + "_".join(p.replace("-", "_").upper() for p in parts)


def apply_env_defaults(
    parser: argparse.ArgumentParser, command_path: Sequence[str], env: Mapping[str, str]
) -> None:
    """Turn ``GPUSTACK_<CMD>_<FLAG>`` variables into defaults of *parser*, recursively."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                apply_env_defaults(sub, [*command_path, name], env)
            continue
        long_opts = [o for o in action.option_strings if o.startswith("--")]
        if not long_opts or action.dest in ("help", "version"):
            continue
        # The chain policy's flags (commands/policy_flags.py) also read GPUSTACK_<FLAG>,
        # shared by every command that has them; the command's own variable wins.
        names = [env_var_for(command_path, long_opts[0])]
        if getattr(action, SHARED_ENV, False):
            names.insert(0, env_var_for([], long_opts[0]))
        present = [name for name in names if name in env]
        if not present:
            continue
        var = present[-1]
        raw = env[var]
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            truthy = raw.strip().lower() in ("1", "true", "yes", "on")
            value: object = truthy if isinstance(action, argparse._StoreTrueAction) else not truthy
        elif isinstance(action, argparse._AppendAction):
            value = [v.strip() for v in raw.split(",") if v.strip()]
        else:
            try:
                value = action.type(raw) if callable(action.type) else raw
            except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
                parser.error(
                    f"environment variable {var}={raw!r} is invalid for {long_opts[0]}: {exc}"
                )
            if action.choices is not None and value not in action.choices:
                allowed = ", ".join(map(str, action.choices))
                parser.error(
                    f"environment variable {var}={raw!r} is invalid for {long_opts[0]}: "
                    f"choose from {allowed}"
                )
        parser.set_defaults(**{action.dest: value})
        action.required = False
