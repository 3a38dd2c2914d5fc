"""Fixtures of the real-cluster tier: one plane per test module and backend.

A module that sets ``PLANES = ("real", "sim")`` runs each of its tests on both backends: the
real control plane (``controlplane.py``) and ``sim --serve`` (``simplane.py``); without it a
module runs on the real one alone. Without Go, or without ``../shared`` (the real CRDs and
Kueue's webhook manifests), the real backend skips with one line saying what to install; the
simulated one needs ``../shared`` alone. ``GPUSTACK_REALCLUSTER_PLANES=sim`` (or ``real``)
runs the scenarios on that backend only. With Go, ``make test`` builds the binaries first
(``make real-cluster``, cached); under ``CI=true`` a missing build is an error, never a skip.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from gpustack_operator.environment import load_manufacturers
from tests.realcluster.cluster import Operator
from tests.realcluster.controlplane import (
    Binaries,
    ControlPlane,
    LoopbackPlane,
    cached_binaries,
    port_in_use,
    shared_dir,
)
from tests.realcluster.nodes import NodeAgents
from tests.realcluster.reaper import left_behind
from tests.realcluster.simplane import SimPlane

_IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    if shutil.which("go") is None:
        pytest.skip(
            "real-cluster tier: Go is not installed (install Go >= 1.26, then `make real-cluster`)"
        )
    if shared_dir() is None:
        pytest.skip(
            "real-cluster tier: needs ../shared (the real Kueue CRDs and webhook manifests)"
        )
    found = cached_binaries()
    if found is None:
        message = "real-cluster tier: the control plane is not built: run `make real-cluster`"
        if _IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return found


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each test that uses ``plane`` runs once per backend its module lists in ``PLANES``."""
    if "plane" in metafunc.fixturenames:
        kinds = getattr(metafunc.module, "PLANES", ("real",))
        chosen = os.environ.get("GPUSTACK_REALCLUSTER_PLANES")
        if chosen:  # e.g. "sim" or "real": run the scenarios on that backend only
            kinds = tuple(k for k in kinds if k in chosen.split(","))
        metafunc.parametrize("plane", kinds, indirect=True, scope="module")


@pytest.fixture(scope="module")
def plane(request: pytest.FixtureRequest) -> Iterator[LoopbackPlane]:
    """A fresh plane for the module: the real control plane or ``sim --serve``; stopping it
    must leave no process (``reaper.left_behind``) or port. A test run killed before this
    teardown leaves none either: the reaper ends them (``reaper.py``). Its folder (logs,
    certificates) stays for a look after a failure; etcd's data goes."""
    kind = getattr(request, "param", "real")
    if kind == "real":
        binaries: Binaries = request.getfixturevalue("binaries")
    shared = shared_dir()
    if shared is None:
        pytest.skip("real-cluster tier: needs ../shared (the real Kueue CRDs and NFD's)")
    workdir = Path(tempfile.mkdtemp(prefix=f"gpustack-{kind}cluster-"))
    control_plane: LoopbackPlane = (
        ControlPlane(binaries, workdir, shared) if kind == "real" else SimPlane(workdir, shared)
    )
    assert isinstance(control_plane, ControlPlane | SimPlane)
    control_plane.start(extra_crds=[shared / "crds" / "cluster-autoscaler-1.36.1"])
    try:
        yield control_plane
    finally:
        control_plane.stop()
        shutil.rmtree(workdir / "etcd", ignore_errors=True)
        left = [p for p in control_plane.all_ports if port_in_use(p)]
        assert left == [], f"ports still open after the control plane stopped: {left}"
        running = [n for n, p in control_plane.processes.items() if p.exited() is None]
        assert running == [], f"processes still running: {running}"
        # Whatever a process started, and whatever its parent became: none of the plane's.
        left_processes = left_behind(control_plane.logs)
        assert left_processes == [], f"processes of the plane left behind: {left_processes}"


@pytest.fixture(scope="module")
def portal() -> Iterator[BlockingPortal]:
    """An event loop in a thread for the node agents (the tier's tests are synchronous)."""
    with start_blocking_portal() as running:
        yield running


@pytest.fixture(scope="module")
def agents(plane: LoopbackPlane, portal: BlockingPortal) -> Iterator[NodeAgents]:
    node_agents = NodeAgents(
        plane.server,
        plane.admin_tls(),
        load_manufacturers(),
        pods_and_features=plane.kind == "real",
    )
    future = portal.start_task_soon(node_agents.run)
    try:
        yield node_agents
    finally:
        future.cancel()
        portal.call(node_agents.aclose)


@pytest.fixture(scope="module")
def operator(plane: LoopbackPlane) -> Iterator[Operator]:
    deployed = Operator(plane)
    try:
        yield deployed
    finally:
        deployed.stop_worker()
        for name in list(deployed.agents):
            deployed.agents.pop(name).stop()


def register(portal: BlockingPortal, agents: NodeAgents, nodes: list[dict[str, Any]]) -> None:
    portal.call(agents.register, nodes)
