"""The environment-variable note every subcommand's ``--help`` ends with.

``cli.apply_env_defaults`` lets any long option come from ``GPUSTACK_<COMMAND>_<OPTION>``;
without this note the only place an operator could learn that is the source.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpustack_operator.commands.envflags import env_var_for


def env_epilog(
    command_path: Sequence[str],
    example_option: str,
    example_value: str,
    *,
    narrower: Sequence[str] = (),
) -> str:
    """One paragraph naming the variable prefix of *command_path*, with a worked example.

    *narrower* is a longer command path whose own variables apply to it alone and win
    (``device-manager serve`` reads both ``..._DEVICE_MANAGER_`` and ``..._SERVE_``).
    """
    prefix = env_var_for(command_path, "OPTION").removesuffix("OPTION")
    example = env_var_for(command_path, example_option)
    text = (
        f"Every option can also be set in the environment as {prefix}<OPTION> (upper case, "
        f"dashes as underscores), e.g. {example}={example_value}; repeatable options take a "
        "comma list there."
    )
    if narrower:
        own = env_var_for(narrower, "OPTION").removesuffix("OPTION")
        text += f" {own}<OPTION> applies to {' '.join(narrower)} alone and wins over it."
    return text + " An option given on the command line wins over the environment."
