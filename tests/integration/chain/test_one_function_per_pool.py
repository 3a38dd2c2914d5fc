"""A node-derived pool's objects come from one function, for ``plan`` and the worker alike
(docs/architecture.md, "One function per pool").

The builders the per-pool functions of ``domain/chain/nodepool.py`` call (the pool's queue,
the teams' split, the Cohort's share, the flavor) are wrapped with counters that record
which module asked for the pool: under a policy with teams, ``desired_state`` and the
ClusterQueue, Cohort and ResourceFlavor reconcilers must each be seen, and nothing else.
``tests/unit/domain/test_nodepool.py`` shows no other product module calls the builders.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from gpustack_operator.domain.chain import nodepool
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.chain.test_plan_equals_worker_policies import NAMESPACES, TEAMS_DECLARED
from tests.integration.worker.support import fast_config

TIMEOUT = 60.0
SKIPPED = ("gpustack_operator.domain.chain.nodepool", "gpustack_operator.worker.poolqueue")
"""The per-pool function and the worker's reading of its caches for it: the module that
asked is the first one past them."""


def _asker() -> str:
    frame = sys._getframe(2)  # past the wrapper and the nodepool function calling it
    while frame is not None and frame.f_globals.get("__name__", "") in SKIPPED:
        frame = frame.f_back  # type: ignore[assignment]
    return str(frame.f_globals.get("__name__", "")) if frame is not None else ""


def _counted(
    original: Callable[..., Any], seen: defaultdict[str, set[str]], name: str
) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        seen[name].add(_asker().rpartition(".")[2])
        return original(*args, **kwargs)

    return wrapper


def test_plan_and_the_reconcilers_build_each_pool_with_the_one_function(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: defaultdict[str, set[str]] = defaultdict(set)
    for name in ("desired_cluster_queue", "split_pool", "cohort_resource_groups"):
        monkeypatch.setattr(nodepool, name, _counted(getattr(nodepool, name), seen, name))
    monkeypatch.setattr(
        nodepool,
        "desired_resource_flavor",
        _counted(nodepool.desired_resource_flavor, seen, "desired_resource_flavor"),
    )
    policy, nodes = TEAMS_DECLARED

    async def converge() -> None:
        config = fast_config(policy=policy)
        async with SimCluster(nodes, NAMESPACES, worker_config=config) as cluster:
            await cluster.converge(TIMEOUT)  # raises NotConverged naming what differs
            planned = cluster.expected()
            assert planned.team_splits, "the policy's teams divide some pool"

    anyio.run(converge)
    pools = {"desired", "clusterqueue", "cohort"}
    assert seen["desired_cluster_queue"] == pools
    assert seen["split_pool"] == pools
    assert seen["cohort_resource_groups"] == {"desired", "cohort"}
    assert seen["desired_resource_flavor"] == {"desired", "flavor"}
