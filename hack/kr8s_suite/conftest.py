"""Root conftest for kr8s's own test suite run against ``gpustack-operator sim --serve``.

``hack/kr8s_suite.py`` copies this file over the root ``conftest.py`` of kr8s's source
distribution, whose ``k8s_cluster`` fixture would start a kind cluster. This one starts the
simulator instead, seeded as a fresh kind cluster is at start (``hack/kindlike.py``), and
offers the three things kr8s's fixtures use of a kind cluster: ``kubectl()``,
``kubectl_path`` and ``kubeconfig_path`` (docs/simulator.md, "Measured with outside clients").

The simulator's command line and the kubectl binary come from the environment that
``hack/kr8s_suite.py`` sets: ``SIM_COMMAND`` (JSON list) and ``SIM_KUBECTL``; it also puts
``hack/`` on ``PYTHONPATH`` for ``kindlike``.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import kindlike
import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    """kr8s's pyproject passes ``--keep-cluster`` (a pytest-kind option): accept it."""
    parser.addoption("--keep-cluster", action="store_true", default=False)


class SimulatedCluster:
    """What kr8s's fixtures use of pytest-kind's ``KindCluster``, for the simulator."""

    def __init__(self, kubectl_path: Path, kubeconfig_path: Path) -> None:
        self.kubectl_path = kubectl_path
        self.kubeconfig_path = kubeconfig_path
        self.kubectl = kindlike.kubectl_runner(kubectl_path, kubeconfig_path)


@pytest.fixture
def ensure_gc() -> Iterator[None]:
    """Garbage collection before and after the test (as kr8s's own conftest)."""
    gc.collect()
    yield
    gc.collect()


@pytest.fixture(scope="session", autouse=True)
def k8s_cluster() -> Iterator[SimulatedCluster]:
    command = json.loads(os.environ["SIM_COMMAND"])
    with tempfile.TemporaryDirectory(prefix="kr8s-sim-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig.yaml"
        with kindlike.simulator(command, kubeconfig):
            cluster = SimulatedCluster(Path(os.environ["SIM_KUBECTL"]), kubeconfig)
            kindlike.seed(cluster.kubectl)
            os.environ["KUBECONFIG"] = str(kubeconfig)
            yield cluster
            del os.environ["KUBECONFIG"]
