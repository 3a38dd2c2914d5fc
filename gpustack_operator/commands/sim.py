"""``gpustack-operator sim``: the entry of the simulated cluster (a test double and a demo).

Its code lives with the simulator, ``gpustack_sim.command`` in the gpustack-sim distribution
(``sim/`` in the repository), which neither the wheel nor the production image holds
(docs/simulator.md, "Where it runs"). Where it is installed, ``sim`` is its parser; where it
is not, ``sim`` takes any arguments and says how to get it (exit 2).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

SUMMARY = "run a simulated Kubernetes cluster with the operator (a test double and a demo)"
EXIT_BAD_INPUT = 2


def missing_simulator() -> str | None:
    """Why the simulator cannot run in this installation, or None when it can."""
    missing = [
        name
        for name, module in (
            ("the gpustack-sim distribution", "gpustack_sim"),
            ("the CEL binding (common-expression-language)", "cel"),
        )
        if importlib.util.find_spec(module) is None
    ]
    if not missing:
        return None
    return (
        f"this installation has no simulator ({' and '.join(missing)} missing): it is a "
        "distribution of its own, which the production image and the wheel leave out. Run it "
        "from a clone of the repository: `make demo`, or `make install` then "
        "`.venv/bin/gpustack-operator sim ...` (or `pip install ./sim` beside this install)"
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``sim``: the simulator's own parser, or one that says how to get it."""
    why = missing_simulator()
    if why is None:
        from gpustack_sim.command import register as register_simulator

        register_simulator(subparsers)
        return
    # No flag is known without the simulator: every argument is taken as it comes.
    parser = subparsers.add_parser("sim", help=SUMMARY, description=why, prefix_chars="\x00")
    parser.add_argument("arguments", nargs="*", help="the simulator's flags")
    parser.set_defaults(handler=lambda _: _say_missing(why))


def _say_missing(why: str) -> int:
    sys.stderr.write(f"gpustack-operator sim: error: {why}\n")
    return EXIT_BAD_INPUT
