"""Run kr8s's own test suite, at the version uv.lock pins, against ``sim --serve``.

A measure of the simulator's fidelity with a client nobody here wrote (docs/simulator.md,
"Measured with outside clients"). The script

1. downloads kr8s's source distribution named in ``uv.lock`` (its sha256 checked) and unpacks
   it into the work directory; nothing of kr8s is kept in this repository;
2. makes a virtual environment there with uv: kr8s and the test tools of its ``dev`` group
   (not pytest-kind, whose kind cluster is what the simulator replaces, nor coverage or docs);
3. puts ``hack/kr8s_suite/conftest.py`` in place of kr8s's root conftest: it starts the
   simulator with this checkout's interpreter and seeds it like a fresh kind cluster
   (``hack/kindlike.py``);
4. runs ``pytest kr8s`` and prints the counts, then each failure: with its cause when
   ``hack/kr8s_suite/known-failures.txt`` names one, else as unexplained.

Usage: ``.venv/bin/python hack/kr8s_suite.py [--work-dir DIR] [-k EXPR] [--plain-http]``.
Exit 0 when every failure is a known one, 1 when one is not or a known one passes now.
Needs the network of the package registries (once, for the download and the environment).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent / "kr8s_suite"
# kr8s's dev group minus pytest-kind (replaced), coverage and documentation tools.
LEFT_OUT = ("pytest-kind", "pytest-cov", "sphinx", "myst", "furo", "taskipy")


@functools.cache
def locked_sdist() -> dict[str, str]:
    """version, url, sha256 and upload-time of the kr8s source distribution uv.lock pins."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    for package in lock["package"]:
        if package["name"] == "kr8s":
            sdist = package["sdist"]
            return {
                "version": package["version"],
                "url": sdist["url"],
                "sha256": sdist["hash"].removeprefix("sha256:"),
                "uploaded": sdist["upload-time"],
            }
    raise SystemExit("uv.lock pins no kr8s: add it to the dev group and run `uv lock`")


def unpack(work: Path) -> Path:
    """kr8s's source tree at the locked version under *work* (downloaded once)."""
    sdist = locked_sdist()
    version, url, sha256 = sdist["version"], sdist["url"], sdist["sha256"]
    tree = work / f"kr8s-{version}"
    if tree.exists():
        return tree
    archive = work / url.rsplit("/", 1)[1]
    if not archive.exists():
        with urllib.request.urlopen(url) as response:  # a pinned https URL
            archive.write_bytes(response.read())
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != sha256:
        archive.unlink()
        raise SystemExit(f"{archive.name}: sha256 {digest}, uv.lock says {sha256}")
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    return tree


def uv() -> str:
    """The uv of this checkout (``make install-dev`` bootstraps it), else the one on PATH."""
    local = ROOT / ".tools" / "bin" / "uv"
    found = str(local) if local.exists() else shutil.which("uv")
    if found is None:
        raise SystemExit("uv not found: run `make install-dev` first")
    return found


def test_requirements(tree: Path) -> list[str]:
    """The requirements of kr8s's ``dev`` group that its tests need."""
    project = tomllib.loads((tree / "pyproject.toml").read_text())
    dev = project["dependency-groups"]["dev"]
    return [req for req in dev if not req.startswith(LEFT_OUT)]


def environment(work: Path, tree: Path) -> Path:
    """A virtual environment with kr8s and its test tools (made once); its Python.

    The tools are resolved as of kr8s's release day (``--exclude-newer``), the versions its
    own CI ran with: later releases of the clients it compares itself with (the official
    ``kubernetes`` client among them) changed modules its tests import.
    """
    venv = work / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([uv(), "venv", "-q", "-p", sys.executable, str(venv)], check=True)
        subprocess.run(
            [
                uv(),
                "pip",
                "install",
                "-q",
                "-p",
                str(python),
                "--exclude-newer",
                locked_sdist()["uploaded"],
                str(tree),
                *test_requirements(tree),
            ],
            check=True,
        )
    return python


def known_failures() -> dict[str, str]:
    """``{test id: cause}`` from known-failures.txt (``id  # cause`` lines)."""
    known: dict[str, str] = {}
    for line in (HERE / "known-failures.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            test, _, cause = line.partition("#")
            known[test.strip()] = cause.strip()
    return known


SEVERITY = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """``{test id: (outcome, first line of its message)}`` from pytest's JUnit XML.

    A test reported twice (a teardown error after a pass) keeps its worse outcome.
    """
    results: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        outcome, message = "passed", ""
        for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            found = case.find(tag)
            if found is not None:
                outcome = name
                message = next(iter((found.get("message") or "").splitlines()), "")[:160]
        if test not in results or SEVERITY[outcome] > SEVERITY[results[test][0]]:
            results[test] = (outcome, message)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "kr8s-suite")
    parser.add_argument("-k", dest="select", help="run only the tests matching EXPR (pytest -k)")
    parser.add_argument(
        "--timeout",
        type=int,
        default=20,
        help="seconds a test may take (default: %(default)s; the tests that wait for a "
        "kubelet would otherwise each take kr8s's own 300 s)",
    )
    parser.add_argument("--plain-http", action="store_true", help="serve the simulator over HTTP")
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    tree = unpack(args.work_dir)
    python = environment(args.work_dir, tree)
    shutil.copy(HERE / "conftest.py", tree / "conftest.py")
    simulator = [sys.executable, "-m", "gpustack_operator", "sim", "--serve"]
    if args.plain_http:
        simulator.append("--plain-http")
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if kubectl is None:
        raise SystemExit("kubectl not found next to this Python: run `make install-dev`")
    env = {
        **os.environ,
        "SIM_COMMAND": json.dumps(simulator),
        "SIM_KUBECTL": kubectl,
        "PYTHONPATH": str(ROOT / "hack"),  # kindlike, for the conftest
    }
    env.pop("KUBECONFIG", None)
    junit = args.work_dir / "junit.xml"
    command = [
        str(python), "-m", "pytest", "kr8s", "-o", "addopts=", "-p", "no:cacheprovider",
        "-q", f"--timeout={args.timeout}", f"--junitxml={junit}",
    ]  # fmt: skip
    if args.select:
        command += ["-k", args.select]
    subprocess.run(command, cwd=tree, env=env, check=False)
    return report(outcomes(junit), known_failures())


def report(results: dict[str, tuple[str, str]], known: dict[str, str]) -> int:
    """Print the counts and every failure with its cause; 1 when something is unexplained."""
    counts: dict[str, int] = {}
    for outcome, _ in results.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    print(
        f"\nkr8s {locked_sdist()['version']} against the simulator: {len(results)} tests, "
        + ", ".join(
            f"{counts[name]} {name}"
            for name in ("passed", "failed", "error", "skipped")
            if name in counts
        )
    )
    unexplained = 0
    for test, (outcome, message) in sorted(results.items()):
        if outcome in ("failed", "error"):
            cause = known.get(test)
            unexplained += cause is None
            print(f"  {outcome:7} {test}\n          {cause or 'UNEXPLAINED: ' + message}")
    now_passing = [
        t
        for t, cause in known.items()
        if results.get(t, ("",))[0] == "passed" and not cause.startswith("timing:")
    ]
    for test in now_passing:
        print(f"  passes now, still listed in known-failures.txt: {test}")
    return 1 if unexplained or now_passing else 0


if __name__ == "__main__":
    sys.exit(main())
