"""Fixtures shared by every test package."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, settings

from gpustack_operator.runtime.cache import shared_values
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.crds import stand_in_crds

# Property tests judge the code, not the machine: a loaded 2-core CI box can make example
# generation slow enough to trip Hypothesis' "too slow" health check, which is no defect.
settings.register_profile(
    "suite", settings.get_profile("default"), suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("suite")


def shared_crds_dir() -> Path | None:
    """The real Kueue and NFD CRDs (../shared/crds next to the repo, or $GPUSTACK_SHARED_CRDS).

    Without them (a fresh clone), the simulator serves the stand-in CRDs of
    ``sim.crds`` (open schemas) and only the tests that check the real schemas skip.
    """
    override = os.environ.get("GPUSTACK_SHARED_CRDS")
    path = (
        Path(override)
        if override
        else Path(__file__).resolve().parents[1] / ".." / "shared" / "crds"
    )
    return path.resolve() if path.is_dir() else None


REAL_CRDS_MISSING = "checks the real Kueue/NFD CRD schemas: needs ../shared/crds (see README)"
"""Skip reason of the tests that need the real CRDs; every other test runs on stand-ins."""


HELM_MISSING = "needs Helm: run hack/helm.sh (installs the pinned Helm 4.1.4) or set HELM"
"""Skip reason of the chart's tests where Helm is absent (under CI they must run)."""


def helm_binary() -> Path | None:
    """The Helm the chart's tests run: $HELM, else where hack/helm.sh installs it."""
    override = os.environ.get("HELM")
    if override:
        return Path(override) if os.access(override, os.X_OK) else None
    repo = Path(__file__).resolve().parents[1]
    found = subprocess.run(
        ["bash", str(repo / "hack" / "helm.sh"), "path"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return Path(found) if found and os.access(found, os.X_OK) else None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def stand_in_crds_of(*kinds: str) -> list[dict[str, Any]]:
    """The stand-in CRDs (all, or those of *kinds*) the simulator serves without the real ones."""
    return [c for c in stand_in_crds() if not kinds or c["spec"]["names"]["kind"] in kinds]


def pytest_report_header() -> list[str]:
    """The versions the real-cluster tier runs against (docs/realcluster.md), or why not."""
    from tests.realcluster.controlplane import cached_binaries

    binaries = cached_binaries()
    if binaries is None:
        return ["real-cluster tier: no control plane built (make real-cluster)"]
    versions = ", ".join(f"{name} {version}" for name, version in binaries.versions.items())
    return [f"real-cluster tier: {versions}"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI the real CRDs must be present: the schema tests would otherwise skip silently."""
    if in_ci() and shared_crds_dir() is None:
        raise pytest.UsageError(
            "CI is set but the real Kueue and NFD CRDs were not found at ../shared/crds: "
            "provide them there or point GPUSTACK_SHARED_CRDS at them, or the tests that "
            "check the real schemas would be skipped"
        )
    if in_ci() and helm_binary() is None:
        raise pytest.UsageError(
            "CI is set but Helm was not found: run hack/helm.sh first (.ci/run does) or point "
            "HELM at a Helm 4 binary, or the chart's tests would be skipped"
        )


@pytest.fixture(autouse=True)
def _cached_objects_read_only() -> Iterator[None]:
    """No test's worker mutates a cached object: equal containers of cached objects are one
    object (``runtime/cache.py``, ``compact``), so a write through one Node would change
    every Node of its shape."""
    yield
    changed = shared_values().drop_changed()
    assert not changed, f"{changed} shared container(s) of cached objects were modified"


def _default_logging() -> None:
    """structlog's defaults, tracebacks plain as the product writes them (docs/runtime.md,
    "Logging"): its default renderer shows every frame's locals, with rich, which for an
    in-process worker's failed reconcile is thousands of lines and seconds of CPU each."""
    structlog.reset_defaults()
    *processors, renderer = structlog.get_config()["processors"]
    colors = renderer.colors if isinstance(renderer, structlog.dev.ConsoleRenderer) else False
    plain = structlog.dev.ConsoleRenderer(
        colors=colors, exception_formatter=structlog.dev.plain_traceback
    )
    structlog.configure(processors=[*processors, plain])


@pytest.fixture(autouse=True)
def _isolated_logging() -> Iterator[None]:
    """Undo any logging set-up a test made (``main()`` configures it process-wide).

    Without this, a test that runs the CLI at ``--log-level warning`` silently filters the
    debug events a later test captures with ``structlog.testing.capture_logs``.
    """
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    _default_logging()
    yield
    _default_logging()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (the product's loop), through anyio's pytest plugin."""
    return "asyncio"


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[SimServer]:
    """A started simulated API server serving the Kueue and NFD kinds: the real CRDs when
    ../shared/crds exists, else the stand-ins."""
    crds = shared_crds_dir()
    server = SimServer(crd_paths=[crds] if crds else ())
    if crds is None:
        server.load_crds(stand_in_crds())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def sim_kubeconfig(sim: SimServer, tmp_path: Path) -> Path:
    """A kubeconfig file (context "sim", no auth) pointing at the ``sim`` server."""
    return sim.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
async def kube(sim_kubeconfig: Path) -> AsyncIterator[object]:
    """A fresh ``kr8s.asyncio.Api`` bound to this test's ``sim`` (not kr8s' shared cache)."""
    from kr8s.asyncio import Api

    api = Api(kubeconfig=str(sim_kubeconfig), bypass_factory=True)
    await api
    try:
        yield api
    finally:
        session = getattr(api, "_session", None)  # kr8s's own httpx session, if it made one
        if session is not None:
            await session.aclose()
        for instances in Api._instances.values():
            for key in [k for k, v in list(instances.items()) if v is api]:
                instances.pop(key, None)
