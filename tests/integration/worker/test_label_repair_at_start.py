"""Label repair at start-up (docs/worker.md, "Label repair"): labels the worker's NodeFeature
publishes, taken from a Node while the worker was not running, are put back when it starts,
and nothing is deleted meanwhile.

Before, the worker only repaired labels an update took while it watched: after the restart
it converged with `gpustack.ai/managed` still missing, so the node's flavors (which select
`gpustack.ai/managed: "true"`) no longer matched it while its capacity still counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.domain.labels import LABEL_REPAIR_ANNOTATION
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    KUEUE,
    NFD,
    NS,
    A,
    converged,
    eventually,
    fast_config,
    nfd_master,
    node,
    put_node,
    relabel,
    worker_running,
)

pytestmark = pytest.mark.anyio

MANAGED = "gpustack.ai/managed"
CHAIN_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")


def labels(sim: SimServer, name: str) -> dict[str, str]:
    obj = sim.store.get("v1", "Node", name)
    assert obj is not None
    return dict(obj["metadata"].get("labels") or {})


def feature(sim: SimServer, name: str) -> dict[str, Any]:
    obj = sim.store.get(NFD, "NodeFeature", f"{name}-gpustack-worker", NS)
    assert obj is not None
    return obj


def published(sim: SimServer, name: str) -> dict[str, str]:
    return dict(feature(sim, name)["spec"]["labels"])


def repair_mark(sim: SimServer, name: str) -> str | None:
    annotations = feature(sim, name)["metadata"].get("annotations") or {}
    return annotations.get(LABEL_REPAIR_ANNOTATION)


async def test_labels_taken_while_the_worker_was_down_are_put_back_at_start(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    config = fast_config()
    put_node(sim, node("gpu", cards=("Tesla T4", 2)))
    put_node(sim, node("cpu"))
    async with nfd_master(sim):
        async with worker_running(sim_kubeconfig, config):
            await converged(sim, config)
            await eventually(
                lambda: labels(sim, "gpu").get(MANAGED) == "true", "NFD to merge the labels"
            )
        want = published(sim, "gpu")
        capacity = next(k for k in sorted(want) if k.startswith(A) and k.endswith(".cpu"))
        relabel(sim, "gpu", **{MANAGED: None, capacity: None})  # while no worker runs
        assert MANAGED not in labels(sim, "gpu") and capacity not in labels(sim, "gpu")

        deleted: list[tuple[str, str]] = []

        def count(event_type: str, obj: dict[str, Any]) -> None:
            if event_type == "DELETED" and obj.get("kind") in CHAIN_KINDS:
                deleted.append((obj["kind"], obj["metadata"]["name"]))

        unsubscribe = sim.store.subscribe(count)
        try:
            async with worker_running(sim_kubeconfig, config):
                await eventually(
                    lambda: all(labels(sim, "gpu").get(k) == v for k, v in want.items()),
                    "the taken labels back on the Node",
                )
                await converged(sim, config)
        finally:
            unsubscribe()
    assert deleted == []
    assert sim.store.list(KUEUE, "ResourceFlavor")
    # The gpu node's NodeFeature was rewritten (marked); the Node that lacked nothing was
    # left alone.
    assert repair_mark(sim, "gpu") and not repair_mark(sim, "cpu")
