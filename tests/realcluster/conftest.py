"""Fixtures of the real-cluster tier: one real control plane per test module.

Without Go, or without ``../shared`` (the real CRDs and Kueue's webhook manifests), the tier
skips with one line saying what to install. With Go, ``make test`` builds the binaries first
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
    cached_binaries,
    port_in_use,
    shared_dir,
)
from tests.realcluster.nodes import NodeAgents

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


@pytest.fixture(scope="module")
def plane(binaries: Binaries) -> Iterator[ControlPlane]:
    """A fresh control plane for the module; stopping it must leave no process or port. Its
    folder (logs, certificates) stays for a look after a failure; etcd's data goes."""
    shared = shared_dir()
    assert shared is not None
    workdir = Path(tempfile.mkdtemp(prefix="gpustack-realcluster-"))
    control_plane = ControlPlane(binaries, workdir, shared)
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


@pytest.fixture(scope="module")
def portal() -> Iterator[BlockingPortal]:
    """An event loop in a thread for the node agents (the tier's tests are synchronous)."""
    with start_blocking_portal() as running:
        yield running


@pytest.fixture(scope="module")
def agents(plane: ControlPlane, portal: BlockingPortal) -> Iterator[NodeAgents]:
    node_agents = NodeAgents(
        plane.server,
        plane.admin_tls(),
        load_manufacturers(),
    )
    future = portal.start_task_soon(node_agents.run)
    try:
        yield node_agents
    finally:
        future.cancel()
        portal.call(node_agents.aclose)


@pytest.fixture(scope="module")
def operator(plane: ControlPlane) -> Iterator[Operator]:
    deployed = Operator(plane)
    try:
        yield deployed
    finally:
        deployed.stop_worker()
        for name in list(deployed.agents):
            deployed.agents.pop(name).stop()


def register(portal: BlockingPortal, agents: NodeAgents, nodes: list[dict[str, Any]]) -> None:
    portal.call(agents.register, nodes)
