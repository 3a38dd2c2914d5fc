"""A flavor Kueue still holds (its ``resource-in-use`` finalizer) leaves the queue first and
is recreated only once it is really gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    KUEUE,
    Running,
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

pytestmark = [
    pytest.mark.anyio,
]
IN_USE = "kueue.x-k8s.io/resource-in-use"


def profiled(running: Running, name: str) -> bool:
    """The worker's cache holds the Node with its profile labels (so the events that follow
    from them are queued)."""
    caches = running.worker.caches
    current = caches.nodes.indexer.get(name) if caches is not None else None
    labels = (current or {}).get("metadata", {}).get("labels", {})
    return any(key.endswith(".z-flavor") for key in labels)


def queue_flavors(sim: SimServer) -> list[str]:
    (queue,) = kueue_objects(sim, "ClusterQueue")
    return sorted(f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"])


async def test_a_flavor_in_use_leaves_the_queue_before_it_goes(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    config = fast_config()
    put_node(sim, node("small", cpu="16"))
    put_node(sim, node("big", cpu="32", memory="128Gi"))
    async with nfd_master(sim), worker_running(sim_kubeconfig, config) as running:
        await converged(sim, config)
        big_flavor = next(
            f["metadata"]["name"]
            for f in kueue_objects(sim, "ResourceFlavor")
            if "-32c-" in f["metadata"]["name"]
        )
        held = sim.store.get(KUEUE, "ResourceFlavor", big_flavor)
        assert held is not None
        held["metadata"]["finalizers"] = [IN_USE]  # what Kueue puts on a flavor it uses
        sim.store.update(held)

        sim.store.delete("v1", "Node", "big")
        # The flavor is being deleted but held; the queue drops it right away.
        await eventually(
            lambda: (
                (sim.store.get(KUEUE, "ResourceFlavor", big_flavor) or {})
                .get("metadata", {})
                .get("deletionTimestamp")
                is not None
            ),
            "the flavor to be marked for deletion",
        )
        await eventually(lambda: big_flavor not in queue_flavors(sim), "the queue to drop it")

        # The node comes back while Kueue still holds the old flavor: nothing is written to
        # the dying object; once Kueue lets go, the flavor is created anew.
        dying = sim.store.get(KUEUE, "ResourceFlavor", big_flavor)
        assert dying is not None
        put_node(sim, node("big", cpu="32", memory="128Gi"))
        await eventually(lambda: profiled(running, "big"), "the returning node to be profiled")
        await eventually(lambda: idle(running.manager), "the controllers to go idle")
        now = sim.store.get(KUEUE, "ResourceFlavor", big_flavor)
        assert now is not None
        assert now["metadata"]["resourceVersion"] == dying["metadata"]["resourceVersion"]
        dying["metadata"]["finalizers"] = []
        sim.store.update(dying)
        await converged(sim, config)
        assert big_flavor in queue_flavors(sim)
