"""Teams in a running cluster (docs/teams.md): the worker converges to ``plan``'s team
queues, shares follow a joining node in one write per queue, and the ConfigMap the worker
watches is taken when good and refused, with the last good one kept, when bad."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.cli import main
from gpustack_operator.domain.chain.teams import (
    POOL_ANNOTATION,
    TEAMS_CONFIGMAP,
    TEAMS_KEY,
    parse_teams,
)
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.chain.support import example_nodes
from tests.integration.worker.support import eventually, fast_config

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[3]
DECLARATION = (REPO / "examples" / "teams" / "teams.yaml").read_text()
TIMEOUT = 30.0
H100_POOL = "gpustack--generic-16c-256g--nvidia-h100-80gb-hbm3-1d"
SLICED_POOL = "gpustack--amd-25-1-ln-x64-12c-47g--nvidia-a10g-1d-8s"
SYSTEM = "gpustack-system"
NAMESPACES: list[Any] = [
    "default",
    "research",
    "serving",
    "serving-canary",
    {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "interns-1", "labels": {"gpustack.ai/team": "interns"}},
    },
]


def _policy(with_teams: bool) -> ChainPolicy:
    policy = ChainPolicy(load_manufacturers())
    if not with_teams:
        return policy
    return replace(policy, teams=parse_teams(DECLARATION, policy.manufacturers))


def _names(chain: Any, kind: str) -> set[str]:
    return {
        f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
        for o in chain.objects()
        if o["kind"] == kind
    }


def _team_queues(cluster: SimCluster, pool: str) -> dict[str, dict[str, Any]]:
    return {
        q["metadata"]["name"]: q
        for q in cluster.sim.store.list("kueue.x-k8s.io/v1beta2", "ClusterQueue")
        if (q["metadata"].get("annotations") or {}).get(POOL_ANNOTATION) == pool
    }


async def test_the_worker_builds_the_team_queues_plan_shows_and_follows_a_new_node() -> None:
    policy = _policy(with_teams=True)
    nodes = example_nodes()
    async with SimCluster(nodes, NAMESPACES, worker_config=fast_config(policy=policy)) as cluster:
        await cluster.converge(TIMEOUT)  # raises NotConverged naming what differs
        planned = cluster.expected()
        actual = await cluster.read_back()
        for kind in ("Cohort", "ClusterQueue", "LocalQueue"):
            assert _names(actual, kind) == _names(planned, kind), kind
        before = _team_queues(cluster, H100_POOL)
        assert set(before) == {f"{H100_POOL}-research", f"{H100_POOL}-serving"}

        # A second H100 node joins: each team's quota grows in proportion, one write each.
        extra = copy.deepcopy(next(n for n in nodes if n["metadata"]["name"] == "gpu-no-cpu-info"))
        extra["metadata"]["name"] = "gpu-h100-2"
        cluster.sim.counters.reset()
        cluster.add_node(extra)
        await cluster.converge(TIMEOUT)
        after = _team_queues(cluster, H100_POOL)
        assert cluster.sim.counters.writes("ClusterQueue") == len(after) == 2
        assert cluster.sim.counters.writes("Cohort") == 1  # the Cohort's remainder
        assert cluster.sim.counters.writes("LocalQueue") == 0
        for name, queue in after.items():
            assert queue["metadata"]["generation"] == before[name]["metadata"]["generation"] + 1
        gpus = {
            name: [
                r["nominalQuota"]
                for r in q["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
                if r["name"] == "nvidia.com/gpu"
            ]
            for name, q in after.items()
        }
        # 16 H100s: research 50% -> 8, serving 30% -> 4 (4.8 rounded down), 4 at the Cohort.
        assert gpus == {f"{H100_POOL}-research": ["8"], f"{H100_POOL}-serving": ["4"]}


def _configmap(text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": TEAMS_CONFIGMAP, "namespace": SYSTEM},
        "data": {TEAMS_KEY: text},
    }


def _refusals(cluster: SimCluster) -> list[str]:
    return [
        str(e.get("message") or e.get("note") or "")
        for e in cluster.sim.store.list("v1", "Event", SYSTEM)
        if e.get("reason") == "TeamsDeclarationRefused"
    ]


async def test_the_configmap_is_taken_refused_with_its_message_and_removed() -> None:
    plain = _policy(with_teams=False)
    teams = _policy(with_teams=True)
    config = fast_config(policy=plain)
    async with SimCluster(example_nodes(), NAMESPACES, worker_config=config) as cluster:
        await cluster.converge(TIMEOUT)
        store = cluster.sim.store
        store.create(_configmap(DECLARATION))
        cluster.policy = teams  # what plan shows with the same declaration
        await cluster.converge(TIMEOUT)
        assert _team_queues(cluster, H100_POOL)

        bad = DECLARATION.replace("share: 30%", "share: 60%")  # nvidia: 50% + 60%
        edited = store.get("v1", "ConfigMap", TEAMS_CONFIGMAP, SYSTEM)
        assert edited is not None
        edited["data"] = {TEAMS_KEY: bad}
        store.update(edited)
        await eventually(lambda: bool(_refusals(cluster)), "a Warning Event on the ConfigMap")
        message = _refusals(cluster)[0]
        assert "add up to 110%: lower them to 100% in all" in message, message
        assert "the last good declaration stays in force" in message
        await cluster.converge(TIMEOUT)  # still the good declaration's chain

        store.delete("v1", "ConfigMap", TEAMS_CONFIGMAP, SYSTEM)
        cluster.policy = plain  # no ConfigMap, no --teams: every pool one queue again
        await cluster.converge(TIMEOUT)
        assert not _team_queues(cluster, H100_POOL)


def test_the_documented_team_demo(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/teams.md, "See it in the simulator": the command there, its outcome."""
    code = main(
        [
            "--log-level",
            "warning",
            "sim",
            "--cluster",
            str(REPO / "examples" / "cluster.yaml"),
            "--teams",
            str(REPO / "examples" / "teams" / "teams.yaml"),
            "--namespaces",
            "research,serving",
            "-o",
            "table",
            "--demo-jobs",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    # The sliced A10G pool: research reaches 32 slices, its own 16, the 9 serving lends and
    # the Cohort's remainder of 7 (its team queues do not take the pool's borrowingLimit 0).
    demo = out.split(f"Teams (--demo-jobs; docs/teams.md): pool {SLICED_POOL}\n", 1)[1]
    lines = [line.strip() for line in demo.splitlines()]
    assert lines[0].startswith("demo-borrow  queue ") and "in research" in lines[0]
    assert "nvidia.com/gpu=32" in lines[0]
    assert lines[1].startswith(f"admitted to ClusterQueue {SLICED_POOL}-research, flavor ")
    assert lines[2] == "borrowing 16 nvidia.com/gpu its team does not own"
    assert "in serving" in lines[3] and "nvidia.com/gpu=9" in lines[3]
    assert lines[4].startswith(f"admitted to ClusterQueue {SLICED_POOL}-serving, flavor ")
    assert lines[5].startswith("demo-borrow  then preempted (InCohortReclamation): Preempted to")


async def test_teams_on_off_on_keeps_every_pool_queue() -> None:
    """Teams declared, removed and declared again: the pools' team queues come back, as
    ``plan`` shows them (once, the second declaration found the team queues' first creation
    remembered, created none and deleted the pools' own queues for good)."""
    plain = _policy(with_teams=False)
    teams = _policy(with_teams=True)
    config = fast_config(policy=plain)
    async with SimCluster(example_nodes(), NAMESPACES, worker_config=config) as cluster:
        await cluster.converge(TIMEOUT)
        store = cluster.sim.store
        for round_ in range(2):
            store.create(_configmap(DECLARATION))
            cluster.policy = teams
            await cluster.converge(TIMEOUT)
            assert set(_team_queues(cluster, H100_POOL)) == {
                f"{H100_POOL}-research",
                f"{H100_POOL}-serving",
            }, round_
            store.delete("v1", "ConfigMap", TEAMS_CONFIGMAP, SYSTEM)
            cluster.policy = plain
            await cluster.converge(TIMEOUT)
            assert not _team_queues(cluster, H100_POOL)


async def test_a_team_queue_deleted_by_hand_comes_back() -> None:
    """docs/worker.md, "Chain objects deleted by hand": a team's ClusterQueue comes back as a
    pool's does (it was never put back while the worker remembered having written it)."""
    policy = _policy(with_teams=True)
    async with SimCluster(
        example_nodes(), NAMESPACES, worker_config=fast_config(policy=policy)
    ) as cluster:
        await cluster.converge(TIMEOUT)
        name = f"{H100_POOL}-research"
        gone = cluster.sim.store.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", name)
        assert gone is not None
        cluster.sim.store.delete("kueue.x-k8s.io/v1beta2", "ClusterQueue", name)
        await eventually(
            lambda: (
                (q := cluster.sim.store.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", name))
                is not None
                and q["metadata"]["uid"] != gone["metadata"]["uid"]
            ),
            "the team queue created again",
        )
        await cluster.converge(TIMEOUT)


async def test_teams_off_removes_the_cohorts_own_quota_and_gives_the_pool_back() -> None:
    """docs/teams.md, "Moving a pool to teams, and back": with teams the H100 Cohort holds
    what research's 50% and serving's 30% leave over; once teams are off the quota is gone
    from the Cohort and the pool's own queue has all eight cards. (Applying the Cohort's spec
    without its one field is refused as ``spec: null`` by the API server, docs/worker.md
    "Writes and ownership": the quota stayed and the pool's queue stayed two cards short.)"""
    plain = _policy(with_teams=False)
    async with SimCluster(
        example_nodes(), NAMESPACES, worker_config=fast_config(policy=plain)
    ) as cluster:
        store = cluster.sim.store
        store.create(_configmap(DECLARATION))
        cluster.policy = _policy(with_teams=True)
        await cluster.converge(TIMEOUT)
        held = store.get("kueue.x-k8s.io/v1beta2", "Cohort", H100_POOL)
        assert held is not None and held["spec"].get("resourceGroups"), held
        store.delete("v1", "ConfigMap", TEAMS_CONFIGMAP, SYSTEM)
        cluster.policy = plain
        await cluster.converge(TIMEOUT)
        cohort = store.get("kueue.x-k8s.io/v1beta2", "Cohort", H100_POOL)
        assert cohort is not None and cohort["spec"] == {}, cohort
        queue = store.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", H100_POOL)
        assert queue is not None
        quotas = {
            r["name"]: r["nominalQuota"]
            for group in queue["spec"]["resourceGroups"]
            for flavor in group["flavors"]
            for r in flavor["resources"]
        }
        assert quotas["nvidia.com/gpu"] == "8", quotas
