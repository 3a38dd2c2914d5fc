"""The agent tests run with authorization on: the agent's token is the device manager's
ServiceAccount and only its shipped RBAC (deploy/base/device-manager.yaml) is installed, so a
request outside it is a 403 and fails the test (docs/security.md, "How the RBAC is checked").
The token is bound to node-a, the node the tests run the agent for, as a Pod's projected token
is, and the shipped policy that holds an agent to its own node
(deploy/components/node-bound-agents) is evaluated on every write."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from gpustack_operator.domain.bootstrap import BootstrapSettings, device_manager_prerequisites
from gpustack_sim.apiserver.authn import NODE_NAME_EXTRA, TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.crds import stand_in_crds
from tests.conftest import shared_crds_dir

AGENT_TOKEN = "device-manager-token"
ADMIN_TOKEN = "admin-token"
AGENT_NODE = "node-a"
NODE_BOUND_POLICY = (
    Path(__file__).resolve().parents[3]
    / "deploy"
    / "components"
    / "node-bound-agents"
    / "device-manager-own-node.yaml"
)


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[SimServer]:
    """A simulated API server with the NFD CRDs (the stand-ins on a fresh clone), authorization
    on and the agent's RBAC."""
    auth = TokenAuthenticator()
    settings = BootstrapSettings()
    auth.add(ADMIN_TOKEN, "cluster-admin", groups=["system:masters"])
    auth.add(
        AGENT_TOKEN,
        f"system:serviceaccount:{settings.namespace}:gpustack-operator-device-manager",
        extra={NODE_NAME_EXTRA: [AGENT_NODE]},
    )
    crds = shared_crds_dir()
    server = SimServer(crd_paths=[crds] if crds else (), authenticator=auth)
    if crds is None:
        server.load_crds(stand_in_crds())
    policy = [d for d in yaml.safe_load_all(NODE_BOUND_POLICY.read_text()) if d]
    for obj in [*device_manager_prerequisites(settings), *policy]:
        server.store.create(obj)
    await server.start()
    try:
        yield server
        denied = list(server.authorizer.denials)
        assert not denied, "requests outside the device manager's RBAC:\n" + "\n".join(denied)
        refused = list(server.policies.denials)
        assert not refused, "writes the node-bound policy refused:\n" + "\n".join(refused)
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
