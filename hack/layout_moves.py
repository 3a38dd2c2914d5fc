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
    # domain/ along the pipeline: what one Node is, the chain built from node models, and
    # the whole offline; the shared vocabulary stays at the domain's root.
    "gpustack_operator/domain/availability.py": "gpustack_operator/domain/node/availability.py",
    "gpustack_operator/domain/capacity.py": "gpustack_operator/domain/node/capacity.py",
    "gpustack_operator/domain/devices.py": "gpustack_operator/domain/node/devices.py",
    "gpustack_operator/domain/keys.py": "gpustack_operator/domain/node/keys.py",
    "gpustack_operator/domain/simdevices.py": "gpustack_operator/domain/node/simdevices.py",
    "gpustack_operator/domain/nodefeature.py": "gpustack_operator/domain/node/nodefeature.py",
    "gpustack_operator/domain/nodemodel.py": "gpustack_operator/domain/node/nodemodel.py",
    "gpustack_operator/domain/nodeprofiles.py": "gpustack_operator/domain/node/nodeprofiles.py",
    "gpustack_operator/domain/nodetopology.py": "gpustack_operator/domain/node/nodetopology.py",
    "gpustack_operator/domain/taints.py": "gpustack_operator/domain/node/taints.py",
    "gpustack_operator/domain/nodedevices.py": "gpustack_operator/domain/node/nodedevices.py",
    "gpustack_operator/domain/workertimers.py": "gpustack_operator/domain/node/workertimers.py",
    "gpustack_operator/domain/workerverdicts.py": "gpustack_operator/domain/node/workerverdicts.py",
    "gpustack_operator/domain/flavors.py": "gpustack_operator/domain/chain/flavors.py",
    "gpustack_operator/domain/queues.py": "gpustack_operator/domain/chain/queues.py",
    "gpustack_operator/domain/kueue.py": "gpustack_operator/domain/chain/kueue.py",
    "gpustack_operator/domain/kueueusage.py": "gpustack_operator/domain/chain/kueueusage.py",
    "gpustack_operator/domain/kueueconfig.py": "gpustack_operator/domain/chain/kueueconfig.py",
    "gpustack_operator/domain/topology.py": "gpustack_operator/domain/chain/topology.py",
    "gpustack_operator/domain/teams.py": "gpustack_operator/domain/chain/teams.py",
    "gpustack_operator/domain/tenancy.py": "gpustack_operator/domain/chain/tenancy.py",
    "gpustack_operator/domain/transition.py": "gpustack_operator/domain/chain/transition.py",
    "gpustack_operator/domain/declaredpools.py": "gpustack_operator/domain/chain/declaredpools.py",
    "gpustack_operator/domain/poolchain.py": "gpustack_operator/domain/chain/poolchain.py",
    "gpustack_operator/domain/poolinfo.py": "gpustack_operator/domain/chain/poolinfo.py",
    "gpustack_operator/domain/multikueue.py": "gpustack_operator/domain/chain/multikueue.py",
    "gpustack_operator/domain/explain.py": "gpustack_operator/domain/chain/explain.py",
    "gpustack_operator/domain/ec2gpus.py": "gpustack_operator/domain/chain/ec2gpus.py",
    "gpustack_operator/domain/policy.py": "gpustack_operator/domain/plan/policy.py",
    "gpustack_operator/domain/desired.py": "gpustack_operator/domain/plan/desired.py",
    "gpustack_operator/domain/plan.py": "gpustack_operator/domain/plan/plan.py",
}
MOVES.update(
    {
        f"gpustack_operator/domain/devicesources/{name}.py": (
            f"gpustack_operator/domain/node/devicesources/{name}.py"
        )
        for name in (
            "__init__",
            "amd",
            "common",
            "dra",
            "gaudi",
            "gfd",
            "gke",
            "karpenter",
            "merge",
            "model",
            "neuron",
            "unpooled",
        )
    }
)
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
    "gpustack_operator/domain/node/__init__.py": (
        '"""What one Node is: its raw reads made into profiles, capacity labels, devices,\n'
        "lifecycle signals, topology group and dedication taints, and the node model that holds\n"
        'them, built once per Node version (docs/architecture.md, "The house")."""\n'
    ),
    "gpustack_operator/domain/chain/__init__.py": (
        '"""The Kueue chain built from node models: flavors, Cohorts, ClusterQueues and\n'
        "LocalQueues, topologies, teams, tenants and declared pools, and why a node feeds the\n"
        'pools it does (docs/architecture.md, "The house")."""\n'
    ),
    "gpustack_operator/domain/plan/__init__.py": (
        '"""The whole chain offline: the one chain policy, the desired state of a cluster and\n'
        '``plan``\'s composition of it (docs/architecture.md, "The house")."""\n'
    ),
}

REWRITTEN = (".py", ".md", ".toml", ".cfg", ".yaml", ".yml")
REWRITTEN_NAMES = ("Makefile", "Dockerfile")
LEFT_AS_THEY_ARE = {"hack/layout_moves.py"}
_PACKAGE_DIR = "gpustack_operator/"


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
            # A module that became a package of the same name (domain/plan.py, now
            # domain/plan/plan.py) keeps the names of its new modules as they are, so that a
            # second run does not move them again.
            inside = sorted(
                m.removeprefix(old_module + ".")
                for m in filter(None, map(module_of, MOVES.values()))
                if m.startswith(old_module + ".")
            )
            kept = rf"(?!\.(?:{'|'.join(map(re.escape, inside))})(?!\w))" if inside else ""
            found.append((rf"(?<![\w.]){re.escape(old_module)}(?!\w){kept}", new_module))
        # Paths, also as the package spells them (gpustack_operator/controllers/...); a
        # mapped folder's modules also as the source tree names them (controllers.liveteams).
        spellings = {old}
        # The docs name the product's modules from inside the package (domain/flavors.py).
        if old.startswith(_PACKAGE_DIR) and new.startswith(_PACKAGE_DIR):
            short = old[len(_PACKAGE_DIR) :]
            found.append((rf"(?<![\w/.]){re.escape(short)}(?![\w]|:\d)", new[len(_PACKAGE_DIR) :]))
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
