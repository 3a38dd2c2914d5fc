"""The worker builds one node model per Node version, for all of its controllers together.

Every Node-watching controller (capacity, unpooled, the queue controllers, topology,
declared pools), the Node indexes and the availability tracker read the worker's one store
(docs/worker.md, "One model per Node version"): counted here against the Node versions the
informer delivered, through convergence, a forced resync and a relabelled node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.domain.node import nodemodel
from gpustack_operator.runtime.informer import HandlerFuncs
from gpustack_operator.runtime.resources import NODES
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    converged,
    eventually,
    fast_config,
    idle,
    nfd_master,
    node,
    put_node,
    relabel,
    worker_running,
)

pytestmark = [pytest.mark.anyio]


async def test_one_model_per_node_version_for_the_whole_worker(
    sim: SimServer, sim_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = fast_config()
    planned = [0]  # the models the test's own plan (``converged``) builds

    def plan_model(node: Any, settings: Any) -> nodemodel.NodeModel:
        planned[0] += 1
        return nodemodel.node_model(node, settings)

    monkeypatch.setattr("gpustack_operator.domain.plan.desired.node_model", plan_model)
    put_node(sim, node("cpu-a"))
    put_node(sim, node("gpu-t4", cpu="32", memory="128Gi", cards=("Tesla T4", 2)))
    put_node(sim, node("gpu-a10g", cpu="48", memory="192Gi", cards=("A10G", 4)))
    versions: set[tuple[str, str]] = set()

    def seen(obj: dict[str, Any], *_: Any) -> None:
        new = _[-1] if _ else obj  # update(old, new)
        meta = new["metadata"]
        versions.add((meta["uid"], meta["resourceVersion"]))

    before = nodemodel.BUILT[0]
    async with nfd_master(sim), worker_running(sim_kubeconfig, config) as running:
        running.manager.informer(NODES).add_event_handler(HandlerFuncs(add=seen, update=seen))
        await converged(sim, config)
        await eventually(lambda: idle(running.manager), "the controllers to go idle")
        store = running.worker.facts
        assert store.built == len(versions) >= 6  # 3 nodes, before and after their labels
        # One model kept per cached Node: the version its update replaced is released.
        assert len(store) == 3

        for informer in running.manager.informers.informers:
            informer.resync()  # every cached Node to every controller again: nothing new
        await eventually(lambda: idle(running.manager), "the resync to be handled")
        assert store.built == len(versions)

        relabel(sim, "gpu-t4", **{"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"})
        changed = sim.store.get("v1", "Node", "gpu-t4")
        assert changed is not None
        meta = changed["metadata"]
        await eventually(
            lambda: (meta["uid"], meta["resourceVersion"]) in versions and idle(running.manager),
            "the relabelled node to be handled",
        )
        await converged(sim, config)
        assert store.built == len(versions) >= 7
        assert len(store) == 3
    # No controller built a model of its own: every one the process built is the store's.
    assert nodemodel.BUILT[0] - before - planned[0] == store.built
