"""A delete answered 409 is retried, not taken for "already gone" (no orphan is left).

A 409 on DELETE means the uid precondition failed or something (a webhook, an injected
fault) refused: the object may still be there. Only a 404 means gone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    converged,
    fast_config,
    kueue_objects,
    nfd_master,
    node,
    put_node,
    worker_running,
)

pytestmark = [
    pytest.mark.anyio,
]


@pytest.mark.parametrize("kind", ["ResourceFlavor", "ClusterQueue", "Cohort"])
async def test_a_delete_answered_409_once_is_retried(
    sim: SimServer, sim_kubeconfig: Path, kind: str
) -> None:
    config = fast_config()
    put_node(sim, node("small", cpu="16"))
    put_node(sim, node("gpu", cards=("Tesla T4", 2)))
    async with nfd_master(sim), worker_running(sim_kubeconfig, config):
        await converged(sim, config)
        before = {o["metadata"]["name"] for o in kueue_objects(sim, kind)}
        fault = sim.faults.add(verb="delete", kind=kind, status=409, count=1)
        sim.store.delete("v1", "Node", "gpu")  # its accelerated chain must go
        await converged(sim, config)
        after = {o["metadata"]["name"] for o in kueue_objects(sim, kind)}
        assert fault.fired == 1, f"no {kind} delete was attempted"
        assert after < before
