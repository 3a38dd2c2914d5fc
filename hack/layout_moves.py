"""Move modules to their place in the house (docs/architecture.md, "The house"), as pure moves.

Each entry of MOVES is `git mv`-ed (a folder gets the package face written in PACKAGES), then
every import, dotted name and path of a moved module is rewritten in the tracked Python,
Markdown, TOML and build files, and ruff sorts the imports it touched. Nothing else changes,
so the script can run again after another branch that edited the old files is merged: an
entry whose source is gone and whose target exists is already done.

    .venv/bin/python hack/layout_moves.py          # move, rewrite, sort imports
    .venv/bin/python hack/layout_moves.py --check  # exit 1 while a move is left to do

A path followed by ``:<line>`` is left as it is: a profile's row names the tree it measured.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MOVES: dict[str, str] = {
    # The worker's state and the helpers its reconcilers share: not reconcilers.
    "controllers/availability.py": "gpustack_operator/worker/availability.py",
    "controllers/caches.py": "gpustack_operator/worker/caches.py",
    "controllers/common.py": "gpustack_operator/worker/common.py",
    "controllers/declarations.py": "gpustack_operator/worker/declarations.py",
    "controllers/liveteams.py": "gpustack_operator/worker/liveteams.py",
    "controllers/nodefacts.py": "gpustack_operator/worker/nodemodels.py",
    "controllers/poolqueue.py": "gpustack_operator/worker/poolqueue.py",
    "controllers/prerequisites.py": "gpustack_operator/worker/prerequisites.py",
    "controllers/tenantview.py": "gpustack_operator/worker/tenantview.py",
    # Shared by the device-manager agent and the capacity reconciler.
    "controllers/labelrepair.py": "gpustack_operator/labelrepair.py",
    # The wiring sits above the reconcilers it connects.
    "controllers/worker.py": "gpustack_operator/wiring.py",
    # Their tests follow.
    "tests/unit/reconcilers/test_nodefacts.py": "tests/unit/worker/test_nodemodels.py",
    "tests/unit/reconcilers/test_liveteams.py": "tests/unit/worker/test_liveteams.py",
    "tests/unit/reconcilers/test_labelrepair.py": "tests/unit/test_labelrepair.py",
    # The `sim` subcommand's code lives with the simulator; the product keeps a new, small
    # entry at the old path (what to do when the simulator is not installed).
    "gpustack_operator/commands/sim.py": "sim/gpustack_sim/command.py",
}
LEFT_AN_ENTRY: frozenset[str] = frozenset({"gpustack_operator/commands/sim.py"})
"""Moved modules whose old path holds a new module afterwards: the move is done once the
target exists."""

PACKAGES: dict[str, str] = {
    "gpustack_operator/worker/__init__.py": (
        '"""The worker\'s state and the helpers its reconcilers share: the node-model store,\n'
        "the shared caches and indexes, the availability tracker, the declarations in force, the\n"
        'pool queue and the writer (docs/architecture.md, "The house")."""\n'
    ),
    "tests/unit/worker/__init__.py": "",
}

REWRITTEN = (".py", ".md", ".toml", ".cfg", ".yaml", ".yml")
REWRITTEN_NAMES = ("Makefile", "Dockerfile")
LEFT_AS_THEY_ARE = {"hack/layout_moves.py"}


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout


def mapped_dirs() -> dict[str, str]:
    """Source folder -> the package path the wheel places it at (pyproject's force-include)."""
    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    return dict(wheel["targets"]["wheel"].get("force-include", {}))


def module_of(path: str) -> str | None:
    """The dotted module name of a source path (``None`` outside the packages)."""
    for source, target in mapped_dirs().items():
        if path.startswith(source.rstrip("/") + "/"):
            path = target.rstrip("/") + path[len(source.rstrip("/")) :]
    if not path.endswith(".py"):
        return None
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def pending() -> dict[str, str]:
    """The moves not done yet."""
    left = {}
    for old, new in MOVES.items():
        if old in LEFT_AN_ENTRY and (REPO / new).exists():
            continue
        if (REPO / old).exists():
            if (REPO / new).exists():
                raise SystemExit(f"{old} and {new} both exist: merge them by hand, then rerun")
            left[old] = new
    return left


def move(moves: dict[str, str]) -> None:
    for face, text in PACKAGES.items():
        if not (REPO / face).exists() and any(
            n.startswith(face.rpartition("/")[0] + "/") for n in moves.values()
        ):
            (REPO / face).parent.mkdir(parents=True, exist_ok=True)
            (REPO / face).write_text(text, encoding="utf-8")
            git("add", face)
    for old, new in moves.items():
        (REPO / new).parent.mkdir(parents=True, exist_ok=True)
        git("mv", old, new)


def rewrites() -> list[tuple[re.Pattern[str], str]]:
    """Every dotted name and path of a moved module, longest first."""
    found: list[tuple[str, str]] = []
    for old, new in MOVES.items():
        old_module, new_module = module_of(old), module_of(new)
        if old_module and new_module and not old.startswith("tests/") and old not in LEFT_AN_ENTRY:
            found.append((rf"(?<![\w.]){re.escape(old_module)}(?!\w)", new_module))
        # Paths, also as the package spells them (gpustack_operator/controllers/...); a
        # mapped folder's modules also as the source tree names them (controllers.liveteams).
        spellings = {old}
        for source, target in mapped_dirs().items():
            if old.startswith(source.rstrip("/") + "/"):
                spellings.add(target.rstrip("/") + old[len(source.rstrip("/")) :])
                bare = old[: -len(".py")].replace("/", ".")
                if new_module:
                    found.append((rf"(?<![\w.]){re.escape(bare)}(?![\w/])", new_module))
        for spelling in spellings if old not in LEFT_AN_ENTRY else ():
            # Not file:line (a profile's row names the file it measured).
            found.append((rf"(?<![\w/.]){re.escape(spelling)}(?![\w]|:\d)", new))
    found.sort(key=lambda pair: -len(pair[0]))
    return [(re.compile(pattern), replacement) for pattern, replacement in found]


def rewrite_files() -> list[str]:
    patterns = rewrites()
    changed = []
    for name in git("ls-files").splitlines():
        path = REPO / name
        if name in LEFT_AS_THEY_ARE or not path.is_file() or path.is_symlink():
            continue
        if not (name.endswith(REWRITTEN) or path.name in REWRITTEN_NAMES):
            continue
        text = path.read_text(encoding="utf-8")
        new = text
        for pattern, replacement in patterns:
            new = pattern.sub(replacement, new)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(name)
    return changed


def main() -> int:
    moves = pending()
    if "--check" in sys.argv:
        for old, new in moves.items():
            print(f"left to move: {old} -> {new}")
        return 1 if moves else 0
    move(moves)
    changed = [n for n in rewrite_files() if n.endswith(".py")]
    if changed:
        ruff = str(REPO / ".venv" / "bin" / "ruff")
        subprocess.run(
            [ruff, "check", "--select", "I", "--fix", "-q", *changed], cwd=REPO, check=False
        )
        subprocess.run([ruff, "format", "-q", *changed], cwd=REPO, check=False)
    for old, new in moves.items():
        print(f"moved {old} -> {new}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
