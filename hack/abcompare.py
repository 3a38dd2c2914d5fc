"""A/B benchmark runs against another commit: its own checkout and environment, interleaved
rounds, the median of the per-round ratios.

Absolute figures do not compare across machines, nor across an hour on one shared machine
(docs/performance.md, "Comparing: A/B against a baseline commit"); a ratio of two runs taken
one right after the other does. ``hack/bench_worker.py --ab COMMIT`` and
``hack/bench_client.py --ab COMMIT`` use this module:

- :func:`baseline` checks COMMIT out once as a git worktree under ``.cache/ab/<sha>`` and
  gives it its own virtual environment (``uv sync --frozen`` from that commit's lock, the
  runtime dependencies and its simulator), reused by later runs;
- :func:`interleave` runs the two sides alternately (A B, B A, A B, ...), so a machine that
  gets busier or quieter during the run weighs on both alike;
- :func:`report` prints each round, each side's median and the median of the per-round ratios
  (this tree / baseline: below 1.00 this tree costs less).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "ab"


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a checkout and the interpreter of its environment."""

    name: str
    repo: Path
    python: Path


def this_tree(python: str) -> Side:
    return Side("this tree", REPO, Path(python))


def both(commit: str, python: str) -> tuple[Side, Side]:
    """The baseline and this tree, both compiled to bytecode."""
    this = this_tree(python)
    compile_bytecode(this)
    return baseline(commit), this


def _uv() -> str:
    found = shutil.which("uv") or str(REPO / ".tools" / "bin" / "uv")
    if not Path(found).exists():
        raise SystemExit("uv not found: run `make install` first (it bootstraps uv into .tools/)")
    return found


def baseline(commit: str) -> Side:
    """COMMIT's own checkout and environment, made on first use and kept in ``.cache/ab``."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{commit}^{{commit}}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if sha.returncode != 0:
        raise SystemExit(f"--ab {commit}: not a commit of this repository ({sha.stderr.strip()})")
    full = sha.stdout.strip()
    where = CACHE / full[:12]
    if not (where / ".git").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--force", str(where), full],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
    python = where / ".venv" / "bin" / "python"
    if not python.exists():
        print(f"ab: making the environment of {commit} in {where}/.venv (once)", flush=True)
        subprocess.run(
            [_uv(), "sync", "--frozen", "--no-default-groups", *_simulator_args(where), "--quiet"],
            cwd=where,
            check=True,
            env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
        )
    side = Side(f"{commit} ({full[:7]})", where, python)
    compile_bytecode(side)
    return side


def _simulator_args(checkout: Path) -> list[str]:
    """How that commit installs its simulator: its own workspace member (``sim/``) where the
    commit has one, else the product's former ``sim`` extra."""
    pyproject = (checkout / "pyproject.toml").read_text()
    return ["--all-packages"] if "[tool.uv.workspace]" in pyproject else ["--extra", "sim"]


def compile_bytecode(side: Side) -> None:
    """Compile the side's sources and installed packages once, as the image does
    (``UV_COMPILE_BYTECODE=1``): where ``PYTHONDONTWRITEBYTECODE`` is set, a side without
    ``__pycache__`` would otherwise compile every module in every run (0.3 s and more)."""
    subprocess.run(
        [
            str(side.python),
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            str(side.repo / "gpustack_operator"),
            str(side.repo / "controllers"),
            *_site_packages(side),
        ],
        check=False,
        capture_output=True,
    )


def _site_packages(side: Side) -> list[str]:
    found = subprocess.run(
        [str(side.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [found.stdout.strip()]


def interleave(
    rounds: int, sides: tuple[Side, Side], measure: Callable[[Side], Mapping[str, float]]
) -> list[dict[str, Mapping[str, float]]]:
    """*rounds* rounds of both sides, alternating which goes first; each round's figures by
    side name, printed as they come."""
    results: list[dict[str, Mapping[str, float]]] = []
    for n in range(rounds):
        order = sides if n % 2 == 0 else sides[::-1]
        taken: dict[str, Mapping[str, float]] = {}
        for side in order:
            taken[side.name] = measure(side)
            load = os.getloadavg()[0]
            figures = ", ".join(f"{k} {v:.4g}" for k, v in taken[side.name].items())
            print(f"ab: round {n + 1}, {side.name}: {figures} (load {load:.1f})", flush=True)
        results.append(taken)
    return results


def report(
    results: Sequence[Mapping[str, Mapping[str, float]]],
    sides: tuple[Side, Side],
    keys: Sequence[str],
) -> dict[str, float]:
    """Print and return, per key, the median of the per-round ratios this tree / baseline."""
    base, this = sides
    ratios: dict[str, float] = {}
    print(f"ab: {len(results)} interleaved rounds, this tree / {base.name}")
    for key in keys:
        per_round = [r[this.name][key] / r[base.name][key] for r in results if r[base.name][key]]
        if not per_round:
            continue
        ratios[key] = statistics.median(per_round)
        print(
            f"ab: {key}: median ratio {ratios[key]:.3f} "
            f"(rounds {', '.join(f'{x:.3f}' for x in per_round)}); "
            f"medians {statistics.median(r[this.name][key] for r in results):.4g} this tree, "
            f"{statistics.median(r[base.name][key] for r in results):.4g} {base.name}"
        )
    return ratios
