"""The worker tests run with authorization on: the worker's token is its ServiceAccount and
only deploy/base/rbac.yaml is installed, so a request outside it is a 403 and fails the test
(docs/security.md, "How the RBAC is checked"). They talk HTTPS, checking the server against
the cluster's CA in the kubeconfig, as against a real cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.crds import stand_in_crds
from tests.conftest import shared_crds_dir
from tests.integration.bootstrap.support import NS, WORKER_TOKEN, worker_rbac


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[SimServer]:
    """A simulated API server over HTTPS with the Kueue and NFD CRDs (the stand-ins on a fresh
    clone), authorization on, the worker's RBAC installed."""
    auth = TokenAuthenticator()
    auth.add(WORKER_TOKEN, f"system:serviceaccount:{NS}:gpustack-operator-worker")
    crds = shared_crds_dir()
    server = SimServer(crd_paths=[crds] if crds else (), authenticator=auth, tls=True)
    if crds is None:
        server.load_crds(stand_in_crds())
    for obj in worker_rbac():
        server.store.create(obj)
    await server.start()
    try:
        yield server
        denied = list(server.authorizer.denials)
        assert not denied, "requests outside the worker's RBAC:\n" + "\n".join(denied)
    finally:
        await server.stop()


@pytest.fixture
def sim_kubeconfig(sim: SimServer, tmp_path: Path) -> Path:
    """A kubeconfig whose requests carry the worker's token."""
    return sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
