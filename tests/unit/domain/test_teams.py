"""Teams (docs/teams.md): the declaration, each team's share of every pool, the Cohort's
remainder, LocalQueues in team namespaces, shares following the hardware, refusals."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.cli import main
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.teams import (
    POOL_ANNOTATION,
    TEAM_LABEL,
    PoolFacts,
    Teams,
    TeamsError,
    TeamsState,
    fair_sharing_weight,
    parse_teams,
    team_queue_name,
)
from gpustack_operator.domain.plan.desired import DesiredState
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.profiles import local_queue_name
from gpustack_operator.domain.quantities import parse_quantity

from . import test_crd_schemas as crds

REPO = Path(__file__).resolve().parents[3]
NODES = yaml.safe_load((REPO / "examples" / "cluster.yaml").read_text())["items"]
DECLARATION = (REPO / "examples" / "teams" / "teams.yaml").read_text()
NAMESPACES: list[str | Mapping[str, Any]] = [
    "default",
    "research",
    "serving",
    "serving-canary",
    {"metadata": {"name": "interns-1", "labels": {"gpustack.ai/team": "interns"}}},
]
POLICY = ChainPolicy()
H100_POOL = "gpustack--generic-16c-256g--nvidia-h100-80gb-hbm3-1d"


def _teams() -> Teams:
    return parse_teams(DECLARATION, POLICY.manufacturers)


def _state(nodes: list[Any] = NODES, teams: Teams | None = None, **kw: Any) -> DesiredState:
    policy = replace(POLICY, teams=teams if teams is not None else _teams(), **kw)
    return plan_state(copy.deepcopy(nodes), NAMESPACES, policy)


def _quotas(groups: list[Mapping[str, Any]]) -> dict[tuple[str, str], Fraction]:
    out: dict[tuple[str, str], Fraction] = {}
    for group in groups:
        for flavor in group["flavors"]:
            for res in flavor["resources"]:
                amount = parse_quantity(res["nominalQuota"])
                assert amount is not None
                out[(flavor["name"], res["name"])] = amount
    return out


def _by_name(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects}


def test_each_pool_cohort_holds_team_queues_summing_to_the_pool() -> None:
    plain = plan_state(copy.deepcopy(NODES), NAMESPACES, POLICY)
    state = _state()
    pools = _by_name(plain.cluster_queues)
    queues = _by_name(state.cluster_queues)
    cohorts = _by_name(state.cohorts)
    split = [s for splits in state.team_splits.values() for s in splits]
    assert {s.pool for s in split} == {
        n for n, q in pools.items() if PoolFacts.of(q).accelerated
    }, "every device pool has a team with a share of it"
    for s in split:
        pool = pools[s.pool]
        assert s.pool not in queues, "a shared pool has no queue of its own"
        members = [
            q
            for q in queues.values()
            if q["metadata"]["annotations"].get(POOL_ANNOTATION) == s.pool
        ]
        assert {q["metadata"]["labels"][TEAM_LABEL] for q in members} == set(s.shares)
        for q in members:
            assert q["spec"]["cohortName"] == pool["spec"]["cohortName"]
            assert q["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
        total = _quotas(pool["spec"]["resourceGroups"])
        remainder = _quotas(cohorts[s.cohort]["spec"]["resourceGroups"])
        for key, amount in total.items():
            given = sum((_quotas(q["spec"]["resourceGroups"])[key] for q in members), Fraction(0))
            assert given + remainder[key] == amount, (s.pool, key)
            assert remainder[key] >= 0


def test_worked_example_quotas_in_whole_devices() -> None:
    queues = _by_name(_state().cluster_queues)
    gpu = {
        team: _quotas(queues[team_queue_name(H100_POOL, team)]["spec"]["resourceGroups"])
        for team in ("research", "serving")
    }
    flavor = "gpustack--generic-128c-2048g-3072g--nvidia-h100-80gb-hbm3-8d"
    # 8 H100s: research 50% -> 4, serving 30% -> 2 (2.4 rounded down), 2 left at the Cohort.
    assert gpu["research"][(flavor, "nvidia.com/gpu")] == 4
    assert gpu["serving"][(flavor, "nvidia.com/gpu")] == 2
    assert gpu["research"][(flavor, "cpu")] == 64  # half of the flavor's 128 CPUs
    serving = queues[team_queue_name(H100_POOL, "serving")]
    resources = serving["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert all(r["borrowingLimit"] == "0" for r in resources), "serving does not borrow"


def test_weights_split_what_fractions_leave() -> None:
    queues = _by_name(_state().cluster_queues)
    ascend = "gpustack--generic-kunpeng-920-ln-a64-24c-192g--ascend-910b-1d"
    got = {
        team: _quotas(queues[team_queue_name(ascend, team)]["spec"]["resourceGroups"])
        for team in ("research", "serving", "interns")
    }
    npu = {t: sum(v for (_, r), v in q.items() if r == "huawei.com/npu") for t, q in got.items()}
    assert npu == {"research": 4, "serving": 2, "interns": 2}  # weights 2:1:1 of 8
    interns = queues[team_queue_name(ascend, "interns")]
    resources = interns["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert all(r["lendingLimit"] == "0" for r in resources), "interns do not lend"


def test_pools_without_teams_stay_as_they_are() -> None:
    plain = plan_state(copy.deepcopy(NODES), NAMESPACES, POLICY)
    state = _state()
    queues = _by_name(state.cluster_queues)
    for name, queue in _by_name(plain.cluster_queues).items():
        if not PoolFacts.of(queue).accelerated:
            assert queues[name] == queue
    plain_locals = {
        (q["metadata"]["namespace"], q["metadata"]["name"]): q for q in plain.local_queues
    }
    local = {(q["metadata"]["namespace"], q["metadata"]["name"]): q for q in state.local_queues}
    for key, lq in plain_locals.items():
        if lq["spec"]["clusterQueue"] in queues:
            assert local[key] == lq
    cohorts = _by_name(state.cohorts)
    for name, cohort in _by_name(plain.cohorts).items():
        if name not in state.team_splits:
            assert cohorts[name] == cohort
    # No teams declared: the chain is the one of old, object for object.
    assert _state(teams=Teams()).objects() == plain.objects()


def test_team_namespaces_get_the_pools_usual_local_queue_name() -> None:
    state = _state()
    local = {(q["metadata"]["namespace"], q["metadata"]["name"]): q for q in state.local_queues}
    teams = _teams()
    for splits in state.team_splits.values():
        for s in splits:
            name = local_queue_name(s.pool)
            for ns in ("research", "serving", "serving-canary", "interns-1"):
                labels = {"gpustack.ai/team": "interns"} if ns == "interns-1" else {}
                team = teams.team_of(ns, labels)
                assert team is not None
                lq = local.get((ns, name))
                if team.name in s.shares:
                    assert lq is not None, (ns, s.pool)
                    assert lq["spec"]["clusterQueue"] == team_queue_name(s.pool, team.name)
                else:
                    assert lq is None, (ns, s.pool)
            assert ("default", name) not in local, "a namespace of no team gets no shared pool"


def _with_h100_node(count: int) -> list[Any]:
    nodes = copy.deepcopy(NODES)
    h100 = next(n for n in nodes if n["metadata"]["name"] == "gpu-no-cpu-info")
    for i in range(count):
        extra = copy.deepcopy(h100)
        extra["metadata"]["name"] = f"gpu-h100-extra-{i}"
        nodes.append(extra)
    return nodes


def test_a_joining_node_changes_each_share_in_proportion() -> None:
    def gpus(state: DesiredState) -> dict[str, int]:
        queues = _by_name(state.cluster_queues)
        out = {}
        for team in ("research", "serving"):
            quotas = _quotas(queues[team_queue_name(H100_POOL, team)]["spec"]["resourceGroups"])
            out[team] = int(sum(v for (_, r), v in quotas.items() if r == "nvidia.com/gpu"))
        cohort = _by_name(state.cohorts)[H100_POOL]
        rest = _quotas(cohort["spec"]["resourceGroups"])
        out["cohort"] = int(sum(v for (_, r), v in rest.items() if r == "nvidia.com/gpu"))
        return out

    assert gpus(_state()) == {"research": 4, "serving": 2, "cohort": 2}
    # 8 -> 16 H100s: 50% = 8, 30% of 16 = 4.8 -> 4, 4 left at the Cohort.
    assert gpus(_state(_with_h100_node(1))) == {"research": 8, "serving": 4, "cohort": 4}
    assert gpus(_state(_with_h100_node(4))) == {"research": 20, "serving": 12, "cohort": 8}


def _h100_gpus(state: DesiredState) -> dict[str, int]:
    queues = _by_name(state.cluster_queues)
    out = {}
    for team in ("research", "serving"):
        quotas = _quotas(queues[team_queue_name(H100_POOL, team)]["spec"]["resourceGroups"])
        out[team] = int(sum(v for (_, r), v in quotas.items() if r == "nvidia.com/gpu"))
    rest = _quotas(_by_name(state.cohorts)[H100_POOL]["spec"]["resourceGroups"])
    out["cohort"] = int(sum(v for (_, r), v in rest.items() if r == "nvidia.com/gpu"))
    return out


def _second_h100(change: str) -> list[Any]:
    nodes = _with_h100_node(1)
    node = nodes[-1]
    labels = node["metadata"].setdefault("labels", {})
    if change == "driver-upgrade":
        labels["nvidia.com/gpu-driver-upgrade-state"] = "cordon-required"
    elif change == "mig-change":
        labels["nvidia.com/mig.config.state"] = "pending"
    elif change == "cordon":
        node.setdefault("spec", {})["unschedulable"] = True
    elif change == "not-ready":
        node.setdefault("status", {})["conditions"] = [
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]
    elif change == "out-of-service":
        node.setdefault("spec", {})["taints"] = [
            {"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}
        ]
    return nodes


@pytest.mark.parametrize("change", ["driver-upgrade", "mig-change", "cordon"])
def test_team_quotas_hold_through_planned_maintenance(change: str) -> None:
    """docs/node-lifecycle.md, "Team quotas through maintenance": one of two H100 nodes
    away for maintenance leaves every team its quota, so none is above it and a target of
    its siblings' reclaim; the team queues say why."""
    state = _state(_second_h100(change))
    assert _h100_gpus(state) == {"research": 8, "serving": 4, "cohort": 4}
    queues = _by_name(state.cluster_queues)
    note = queues[team_queue_name(H100_POOL, "research")]["metadata"]["annotations"]
    assert "team quotas kept through maintenance" in note["note.gpustack.ai/team-hold"]
    assert "stopPolicy" not in queues[team_queue_name(H100_POOL, "research")]["spec"]


@pytest.mark.parametrize("change", ["not-ready", "out-of-service"])
def test_a_failing_node_still_lowers_team_quotas(change: str) -> None:
    """Only maintenance holds: a node that fails or leaves lowers every share as before."""
    state = _state(_second_h100(change))
    assert _h100_gpus(state) == {"research": 4, "serving": 2, "cohort": 2}
    queue = _by_name(state.cluster_queues)[team_queue_name(H100_POOL, "research")]
    assert "note.gpustack.ai/team-hold" not in queue["metadata"]["annotations"]


def test_a_pool_without_teams_still_withholds_a_node_in_maintenance() -> None:
    """Without teams nothing changes: the node's devices leave the pool's quota."""
    state = plan_state(copy.deepcopy(_second_h100("driver-upgrade")), NAMESPACES, POLICY)
    quotas = _quotas(_by_name(state.cluster_queues)[H100_POOL]["spec"]["resourceGroups"])
    assert sum(v for (_, r), v in quotas.items() if r == "nvidia.com/gpu") == 8


_SELECTOR = (
    "teams:\n- {{name: a, namespaceSelector: {}, "
    "shares: [{{pools: {{manufacturer: nvidia}}, share: 10%}}]}}\n"
)
BAD = [
    pytest.param(
        "teams:\n"
        "- {name: a, namespaces: [a], shares: [{pools: {manufacturer: nvidia}, share: 70%}]}\n"
        "- {name: b, namespaces: [b], shares: [{pools: {manufacturer: nvidia}, share: 40%}]}\n",
        "add up to 110%: lower them to 100% in all, or give weights instead",
        id="shares-above-100",
    ),
    pytest.param(
        "teams:\n"
        "- {name: a, namespaces: [a], shares: [{pools: {manufacturer: nvidia}, share: 70%}]}\n"
        "- {name: b, namespaces: [b], shares: [{pools: {model: tesla-t4}, share: 40%}]}\n",
        "is shared out 110% (a 70%, b 40%): lower the shares to 100% in all",
        id="shares-above-100-across-selectors",
    ),
    pytest.param(
        "teams:\n"
        "- {name: a, namespaces: [ml], shares: [{pools: {manufacturer: nvidia}, share: 10%}]}\n"
        "- {name: b, namespaces: [ml], shares: [{pools: {manufacturer: amd}, share: 10%}]}\n",
        "namespace ml is in two teams (a and b): keep it in one",
        id="namespace-in-two-teams",
    ),
    pytest.param(
        "teams:\n- {name: a, namespaces: [a], shares: [{pools: {gpu: h100}, share: 10%}]}\n",
        "unknown pool selector gpu: select pools by pool, model, manufacturer",
        id="unknown-pool-selector",
    ),
    pytest.param(
        "teams:\n"
        "- {name: a, namespaces: [a], shares: [{pools: {manufacturer: nvida}, share: 10%}]}\n",
        "unknown manufacturer 'nvida' in pools.manufacturer: use one of",
        id="unknown-manufacturer",
    ),
    pytest.param(
        "teams:\n- {name: a, namespaces: [a], shares: [{pools: {model: t4}, share: 150%}]}\n",
        "outside (0%, 100%]",
        id="share-above-whole",
    ),
    pytest.param("teams: [", "not valid YAML", id="not-yaml"),
    pytest.param(
        "teams:\n- {name: tas, namespaces: [a], shares: [{pools: {model: t4}, share: 10%}]}\n",
        "the name 'tas' is taken by the queues of topology-aware pools",
        id="team-named-tas",
    ),
    pytest.param(DECLARATION + "\x00", "not valid YAML", id="nul-bytes"),
    pytest.param("teams: " + "[" * 10_000 + "]" * 10_000, "nests deeper than 16", id="deep"),
    pytest.param(
        'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
        + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n"
            for i in range(8)
        ),
        "more than 20000 values (aliases expanded)",
        id="alias-bomb",
    ),
    pytest.param("teams: []\n#" + "x" * (1024 * 1024), "256 KiB allowed", id="1-MiB"),
    pytest.param(
        _SELECTOR.format("[a, b]"),
        "namespaceSelector is a list of 2, not a label selector",
        id="selector-list",
    ),
    pytest.param(
        _SELECTOR.format("team=a"),
        "namespaceSelector is 'team=a', not a label selector",
        id="selector-string",
    ),
    pytest.param(
        _SELECTOR.format("{matchLabel: {a: b}}"), "unknown field matchLabel", id="selector-key"
    ),
    pytest.param(
        _SELECTOR.format("{matchExpressions: [{key: a, operator: Like, values: [b]}]}"),
        "operator 'Like' is not one of In, NotIn, Exists, DoesNotExist",
        id="selector-operator",
    ),
    pytest.param(
        _SELECTOR.format("{matchExpressions: [{key: a, operator: In}]}"),
        "operator In needs a non-empty list of values",
        id="selector-in-without-values",
    ),
    pytest.param(
        _SELECTOR.format("{matchExpressions: [{key: a, operator: Exists, values: [b]}]}"),
        "operator Exists takes no values",
        id="selector-exists-with-values",
    ),
    pytest.param(
        _SELECTOR.format("{matchLabels: {a: 1}}"), "is not a label value", id="selector-number"
    ),
    pytest.param(
        _SELECTOR.format("{matchLabels: {'bad key!': x}}"), "is not a label key", id="label-key"
    ),
    pytest.param(_SELECTOR.format("{}"), "selects every namespace", id="selector-empty"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_declarations_are_refused_and_the_last_good_one_stays(text: str, message: str) -> None:
    plain = plan_state(copy.deepcopy(NODES), NAMESPACES, POLICY)
    pools = [PoolFacts.of(q) for q in plain.cluster_queues]
    state = TeamsState()
    assert state.offer(DECLARATION, POLICY.manufacturers, pools, NAMESPACES, revision="1")
    good = state.teams
    assert not state.offer(text, POLICY.manufacturers, pools, NAMESPACES, revision="2")
    assert message in state.error, state.error
    assert state.teams is good and state.revision == "1"
    with pytest.raises(TeamsError) as refused:
        parse_teams(text, POLICY.manufacturers, pools)
    assert message in str(refused.value)


def test_a_namespace_two_selectors_claim_is_refused() -> None:
    text = (
        "teams:\n- {name: a, namespaceSelector: {matchLabels: {tier: x}}, "
        "shares: [{pools: {manufacturer: nvidia}, share: 10%}]}\n"
        "- {name: b, namespaces: [shared], shares: [{pools: {manufacturer: amd}, share: 10%}]}\n"
    )
    state = TeamsState()
    ns = {"metadata": {"name": "shared", "labels": {"tier": "x"}}}
    assert not state.offer(text, POLICY.manufacturers, (), [ns])
    assert "namespace shared is in two teams (a and b)" in state.error


def test_removing_the_declaration_turns_teams_off() -> None:
    state = TeamsState()
    assert state.offer(DECLARATION, POLICY.manufacturers)
    assert not state.offer(DECLARATION, POLICY.manufacturers), "the same text changes nothing"
    assert state.offer(None, POLICY.manufacturers)
    assert state.teams is None and not state.error


def test_a_long_pool_name_gives_a_valid_team_queue_name() -> None:
    pool = "gpustack--" + "x" * 240
    name = team_queue_name(pool, "research")
    assert len(name) <= 253 and name.endswith("-research")
    assert name != team_queue_name(pool + "y", "research")


@pytest.mark.skipif(crds.CRDS is None, reason="real CRDs not found: put them in ../shared/crds")
@pytest.mark.parametrize("version", list(KueueVersion))
def test_team_chain_validates_against_kueue_crds(version: KueueVersion) -> None:
    state = _state(kueue_version=version)
    for obj in state.objects():
        crds.validate(obj)


def test_plan_takes_teams_from_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    example = str(REPO / "examples" / "cluster.yaml")
    teams = str(REPO / "examples" / "teams" / "teams.yaml")
    code = main(["plan", "--nodes", example, "--teams", teams, "--namespaces", "research,serving"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"team research: 50% of pool {H100_POOL}" in out
    assert "own quota (borrowable by its teams)" in out
    bad = tmp_path / "teams.yaml"
    bad.write_text(BAD[3].values[0])  # type: ignore[index]
    code = main(["plan", "--nodes", example, "--teams", str(bad)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert f"--teams {bad}: " in err and "unknown pool selector gpu" in err
    bad.write_bytes(b"\xff\xfe teams")
    code = main(["plan", "--nodes", example, "--teams", str(bad)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert f"--teams {bad}: the teams declaration is not UTF-8 text" in err


SLICED_POOL = "gpustack--amd-25-1-ln-x64-12c-47g--nvidia-a10g-1d-8s"
SLICED_FLAVOR = "gpustack--amd-25-1-ln-x64-48c-188g-196g--nvidia-a10g-4d-8s"


def test_the_cohorts_remainder_of_a_sliced_pool_is_borrowable() -> None:
    """A sliced pool's own queue has ``borrowingLimit: 0``; its team queues must not inherit
    it, or the slices no team was given (7 of 32 here) could never be used by anyone."""
    state = _state()
    queues = _by_name(state.cluster_queues)
    cohort = _by_name(state.cohorts)[
        queues[team_queue_name(SLICED_POOL, "research")]["spec"]["cohortName"]
    ]
    remainder = _quotas(cohort["spec"]["resourceGroups"])
    assert remainder[(SLICED_FLAVOR, "nvidia.com/gpu")] == 7  # 32 - 16 - 9
    research = queues[team_queue_name(SLICED_POOL, "research")]
    resources = research["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert [r for r in resources if "borrowingLimit" in r] == [], "research borrows"
    serving = queues[team_queue_name(SLICED_POOL, "serving")]
    resources = serving["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert all(r["borrowingLimit"] == "0" for r in resources), "serving says borrow: false"


def test_team_queues_carry_their_share_as_fair_sharing_weight() -> None:
    """With Kueue's fair sharing on, preemption and borrowing follow each queue's
    ``fairSharing.weight`` (default 1): the team's share is written there."""
    queues = _by_name(_state().cluster_queues)
    weights = {
        team: queues[team_queue_name(H100_POOL, team)]["spec"]["fairSharing"]["weight"]
        for team in ("research", "serving")
    }
    assert weights == {"research": "500m", "serving": "300m"}
    ascend = "gpustack--generic-kunpeng-920-ln-a64-24c-192g--ascend-910b-1d"
    interns = queues[team_queue_name(ascend, "interns")]["spec"]["fairSharing"]
    assert interns == {"weight": "250m"}  # weight 1 of 4
    assert fair_sharing_weight(Fraction(1)) == "1"
    assert fair_sharing_weight(Fraction(1, 3)) == "333m"
    assert fair_sharing_weight(Fraction(1, 10_000)) == "1m"


def test_plan_and_sim_refuse_what_the_worker_refuses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """One validation (docs/teams.md, "Refused declarations"): a file shared out above 100%
    through two selectors, or claiming a namespace twice, is refused by ``plan`` and ``sim``
    as by the worker (they used to accept it and scale the shares down)."""
    example = str(REPO / "examples" / "cluster.yaml")
    across = tmp_path / "across.yaml"
    across.write_text(BAD[1].values[0])  # type: ignore[index]
    for command in (["plan", "--nodes", example], ["sim", "--cluster", example]):
        code = main([*command, "--teams", str(across), "--namespaces", "a,b"])
        _, err = capsys.readouterr()
        assert code == 2, (command, err)
        assert "is shared out 110% (a 70%, b 40%)" in err, err
    twice = tmp_path / "twice.yaml"
    twice.write_text(
        "teams:\n- {name: a, namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: b}},"
        " shares: [{pools: {manufacturer: nvidia}, share: 10%}]}\n"
        "- {name: b, namespaces: [b], shares: [{pools: {manufacturer: nvidia}, share: 10%}]}\n"
    )
    code = main(["plan", "--nodes", example, "--teams", str(twice), "--namespaces", "a,b"])
    _, err = capsys.readouterr()
    assert code == 2 and "namespace b is in two teams (a and b)" in err, err
