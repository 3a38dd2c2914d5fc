"""Run mypy on the product as the wheel lays it out (``make lint``).

The wheel ships the repository's top-level ``controllers/`` as ``gpustack_operator/controllers``
(pyproject.toml's force-include) and a source checkout imports it through the package's own
finder (gpustack_operator/__init__.py); mypy resolves modules by directory and cannot follow
either. So this builds that layout under ``.cache/typecheck`` from links (every entry of
``gpustack_operator/`` and each mapped directory), type-checks it with the project's mypy
settings, and prints mypy's findings with the repository's own paths.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VIEW = REPO / ".cache" / "typecheck"


def build_view() -> dict[str, str]:
    """The view's package, and each of its paths -> the repository's path."""
    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    mapped: dict[str, str] = wheel["targets"]["wheel"].get("force-include", {})
    shutil.rmtree(VIEW, ignore_errors=True)
    package = VIEW / "gpustack_operator"
    package.mkdir(parents=True)
    for entry in (REPO / "gpustack_operator").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    paths = {"gpustack_operator/": "gpustack_operator/"}
    for source, target in mapped.items():
        (VIEW / target).symlink_to(REPO / source)
        paths[target.rstrip("/") + "/"] = source.rstrip("/") + "/"
    return paths


def main() -> int:
    paths = build_view()
    view = VIEW.relative_to(REPO).as_posix() + "/"
    command = [sys.executable, "-m", "mypy", view + "gpustack_operator", "sim/gpustack_sim"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    pattern = re.compile(
        re.escape(view) + "(" + "|".join(re.escape(p) for p in sorted(paths, key=len)[::-1]) + ")"
    )
    for stream, out in ((sys.stdout, done.stdout), (sys.stderr, done.stderr)):
        stream.write(pattern.sub(lambda m: paths[m.group(1)], out))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
