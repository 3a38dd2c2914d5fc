"""Without Kueue the worker profiles nodes, says what is missing and is not ready; once the
Kueue CRDs appear it becomes ready and builds the chain."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from structlog.testing import capture_logs

from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.plan.desired import desired_state
from gpustack_operator.wiring import KUEUE_MISSING_MESSAGE, TAS_UNSERVED
from gpustack_sim.apiserver.server import SimServer
from tests.conftest import shared_crds_dir, stand_in_crds_of
from tests.integration.worker.support import (
    NFD,
    NS,
    WRITE_KINDS,
    converged,
    eventually,
    fast_config,
    idle,
    kueue_objects,
    nfd_master,
    node,
    put_node,
    worker_running,
)

CRDS = shared_crds_dir()
pytestmark = [
    pytest.mark.anyio,
]


@pytest.fixture
async def nfd_only_sim(anyio_backend: str) -> AsyncIterator[SimServer]:
    """A simulated cluster with NFD's CRDs and no Kueue."""
    server = SimServer(crd_paths=[CRDS / "nfd-v0.19.0"] if CRDS else ())
    if CRDS is None:
        server.load_crds(stand_in_crds_of("NodeFeature"))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def kueue_crds() -> list[dict[str, Any]]:
    """Kueue's CRDs: the real ones of ../shared/crds, else the stand-ins."""
    if CRDS is None:
        return stand_in_crds_of("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")
    docs: list[dict[str, Any]] = []
    for path in sorted((CRDS / "kueue-v0.19.2").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


async def readyz(url: str) -> tuple[int, str]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{url}/readyz?verbose")
    return response.status_code, response.text


async def test_waits_for_kueue_then_builds_the_chain(
    nfd_only_sim: SimServer, tmp_path: Path
) -> None:
    sim = nfd_only_sim
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    config = fast_config(kueue_version=None)
    put_node(sim, node("one", cards=("Tesla T4", 1)))
    with capture_logs() as logs:
        async with nfd_master(sim), worker_running(kubeconfig, config, health=True) as running:
            # Capacity profiling needs no Kueue.
            await eventually(
                lambda: sim.store.get(NFD, "NodeFeature", "one-gpustack-worker", NS) is not None,
                "the worker NodeFeature",
            )
            await eventually(lambda: running.manager.health_server is not None, "probes")
            server = running.manager.health_server
            assert server is not None
            status, body = await readyz(server.url)
            assert status == 500 and "kueue" in body
            await eventually(
                lambda: sum(e.get("event") == KUEUE_MISSING_MESSAGE for e in logs) == 1,
                "the missing-Kueue log line",
            )

            sim.load_crds(kueue_crds())
            await converged(sim, config)
            assert kueue_objects(sim, "ClusterQueue")
            status, body = await readyz(server.url)
            assert status == 200, body
    # One error line for the whole wait, not one per attempt.
    assert sum(e.get("event") == KUEUE_MISSING_MESSAGE for e in logs) == 1


async def test_a_kueue_without_topologies_installed_late_gets_the_chain_without_tas(
    nfd_only_sim: SimServer, tmp_path: Path
) -> None:
    """A Kueue installed after the worker started that serves no ``topologies`` (older than
    0.14): no Topology informer waits on a kind that is not there, the chain is built without
    TAS, and that is said once (docs/topology.md, "The switch")."""
    sim = nfd_only_sim
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    config = fast_config(kueue_version=None)
    put_node(sim, node("one", cards=("Tesla T4", 1)))
    with capture_logs() as logs:
        async with nfd_master(sim), worker_running(kubeconfig, config) as running:
            sim.load_crds([d for d in kueue_crds() if d["spec"]["names"]["kind"] != "Topology"])
            await converged(sim, config)
            assert running.worker.kueue is not None
            assert running.worker.kueue.topologies is None
    assert sum(e.get("event") == TAS_UNSERVED for e in logs) == 1


def v1beta1_only(doc: dict[str, Any]) -> dict[str, Any]:
    """A Kueue CRD as an older Kueue serves it: v1beta1 only, stored as v1beta1."""
    versions = [v for v in doc["spec"]["versions"] if v["name"] == "v1beta1"]
    for version in versions:
        version["storage"] = True
    doc["spec"]["versions"] = versions
    doc["spec"].pop("conversion", None)
    return doc


async def test_a_cluster_serving_only_v1beta1_gets_v1beta1_objects(
    nfd_only_sim: SimServer, tmp_path: Path
) -> None:
    sim = nfd_only_sim
    sim.load_crds([v1beta1_only(d) for d in kueue_crds()])
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    config = fast_config(kueue_version=None)
    put_node(sim, node("one", cards=("Tesla T4", 2)))
    v1beta1 = "kueue.x-k8s.io/v1beta1"

    def local_queues() -> list[dict[str, Any]]:
        return sim.store.list(v1beta1, "LocalQueue")

    async with nfd_master(sim), worker_running(kubeconfig, config) as running:
        await eventually(lambda: len(local_queues()) == 2, "a LocalQueue per ClusterQueue")
        assert running.worker.kueue is not None
        assert running.worker.kueue.version.value == "v1beta1"
        want = desired_state(
            sim.store.list("v1", "Node"),
            ["default"],
            replace(config.policy, kueue_version=KueueVersion.V1BETA1),
        )
        queues = sim.store.list(v1beta1, "ClusterQueue")
        assert sorted(q["metadata"]["name"] for q in queues) == sorted(
            q["metadata"]["name"] for q in want.cluster_queues
        )
        assert all(q["spec"]["cohort"] for q in queues)
        await eventually(lambda: idle(running.manager), "the controllers to go idle")
        sim.counters.reset()
        for informer in running.manager.informers.informers:
            informer.resync()
        await eventually(lambda: idle(running.manager), "the resync to be processed")
        written = {kind: sim.counters.writes(kind) for kind in WRITE_KINDS}
        assert not any(written.values()), f"writes after a resync: {written}"
