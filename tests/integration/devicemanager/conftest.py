"""The agent tests run with authorization on: the agent's token is the device manager's
ServiceAccount and only its shipped RBAC (deploy/base/device-manager.yaml) is installed, so a
request outside it is a 403 and fails the test (docs/security.md, "How the RBAC is checked")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpustack_operator.domain.bootstrap import BootstrapSettings, device_manager_prerequisites
from gpustack_operator.sim.authn import TokenAuthenticator
from gpustack_operator.sim.server import SimServer
from tests.conftest import shared_crds_dir

AGENT_TOKEN = "device-manager-token"
ADMIN_TOKEN = "admin-token"


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[SimServer]:
    """A simulated API server with the NFD CRDs, authorization on and the agent's RBAC."""
    auth = TokenAuthenticator()
    settings = BootstrapSettings()
    auth.add(ADMIN_TOKEN, "cluster-admin", groups=["system:masters"])
    auth.add(
        AGENT_TOKEN, f"system:serviceaccount:{settings.namespace}:gpustack-operator-device-manager"
    )
    crds = shared_crds_dir()
    server = SimServer(crd_paths=[crds] if crds else (), authenticator=auth)
    for obj in device_manager_prerequisites(settings):
        server.store.create(obj)
    await server.start()
    try:
        yield server
        denied = list(server.authorizer.denials)
        assert not denied, "requests outside the device manager's RBAC:\n" + "\n".join(denied)
    finally:
        await server.stop()


@pytest.fixture
def sim_kubeconfig(sim: SimServer, tmp_path: Path) -> Path:
    """A kubeconfig whose requests carry the device manager's token."""
    return sim.write_kubeconfig(tmp_path / "kubeconfig", token=AGENT_TOKEN)


@pytest.fixture
def admin_kubeconfig(sim: SimServer, tmp_path: Path) -> Path:
    """For the tests' own steps (creating Nodes, reading NodeFeatures): a cluster admin."""
    return sim.write_kubeconfig(tmp_path / "admin.kubeconfig", token=ADMIN_TOKEN)
