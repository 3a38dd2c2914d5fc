"""The worker's per-Node cache, the one-node flavor/cohort rendering and the debounce."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.commands.plan import read_nodes_file
from gpustack_operator.controllers.common import Debounced, Debouncer
from gpustack_operator.controllers.nodefacts import FleetSettling, NodeFacts, node_view
from gpustack_operator.domain.desired import plan_state
from gpustack_operator.domain.flavors import (
    desired_resource_flavor,
    desired_resource_flavors,
    node_profile_names,
    node_profiles,
)
from gpustack_operator.domain.manufacturers import load_manufacturers
from gpustack_operator.domain.queues import desired_cohort, desired_cohorts
from gpustack_operator.runtime.controller import Request, Result

MFRS = load_manufacturers({})
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster.yaml"


def profiled_nodes() -> list[dict[str, Any]]:
    """The example cluster's Nodes as NFD leaves them (device and capacity labels merged),
    each with a uid and resourceVersion, in reverse name order."""
    raw, _ = read_nodes_file(EXAMPLE)
    nodes = plan_state([dict(n) for n in raw], [], manufacturers=MFRS).nodes
    for i, node in enumerate(nodes):
        node["metadata"] |= {"uid": f"uid-{i}", "resourceVersion": str(100 + i)}
    return sorted(nodes, key=lambda n: n["metadata"]["name"], reverse=True)


def test_one_node_renders_the_same_flavors_and_cohorts_as_all() -> None:
    nodes = profiled_nodes()
    facts = NodeFacts(MFRS)
    flavors = desired_resource_flavors(nodes, MFRS)
    cohorts = desired_cohorts(nodes, MFRS)
    assert len(flavors) > 5 and len(cohorts) > 5
    for name, want in flavors.items():
        members = [n for n in nodes if name in node_profile_names(n, MFRS, "flavor")]
        assert desired_resource_flavor(name, members, MFRS) == want
        assert desired_resource_flavor(name, nodes, MFRS, profiles_of=facts.profiles) == want
    for name, want in cohorts.items():
        assert desired_cohort(name, nodes, MFRS, profiles_of=facts.profiles) == want
    assert desired_resource_flavor("gpustack--nothing-1c-2g-3g", nodes, MFRS) is None
    assert desired_cohort("gpustack--nothing-1c-2g", nodes, MFRS) is None


def test_facts_equal_the_domain_and_are_computed_once_per_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = profiled_nodes()
    facts = NodeFacts(MFRS)
    for node in nodes:
        assert facts.profiles(node) == tuple(node_profiles(node, MFRS))
        assert facts.view(node) == node_view(node, MFRS)
        for part in ("flavor", "queue", "cohort"):
            assert facts.index_names(node, part) == node_profile_names(node, MFRS, part)
    calls = []
    monkeypatch.setattr(
        "gpustack_operator.controllers.nodefacts.node_profiles", lambda n, m: calls.append(n) or []
    )
    node = nodes[0]
    same = copy.deepcopy(node)  # a relist decodes the same version into a new object
    assert facts.profiles(same) == facts.profiles(node) != ()
    assert calls == []
    changed = copy.deepcopy(node)  # a hand-made object reusing the version is not trusted
    changed["metadata"]["labels"]["gpustack.ai/managed"] = "false"
    assert facts.profiles(changed) == ()
    assert calls == [changed]


def test_the_cache_is_bounded_by_generations() -> None:
    facts = NodeFacts(MFRS, size_hint=lambda: 10)
    node = profiled_nodes()[0]
    for version in range(5000):
        copy_ = {**node, "metadata": {**node["metadata"], "resourceVersion": str(version)}}
        facts.view(copy_)
    assert len(facts) <= 2 * 1024


def test_fleet_settling_follows_the_capacity_labels() -> None:
    nodes = profiled_nodes()
    facts = NodeFacts(MFRS)
    settling = FleetSettling(facts)
    bare = copy.deepcopy(nodes[0])
    bare["metadata"]["labels"] = {
        k: v
        for k, v in bare["metadata"]["labels"].items()
        if not k.endswith((".z-queue", ".z-flavor", ".z-cohort", ".cpu"))
    }
    bare["metadata"]["resourceVersion"] = "1"
    settling.on_add(bare)
    assert settling.busy()
    settling.on_update(bare, nodes[0])
    assert not settling.busy()
    settling.on_update(nodes[0], bare)
    settling.on_delete(bare)
    assert not settling.busy()


def test_a_node_that_is_never_labelled_does_not_keep_the_fleet_settling() -> None:
    clock = Clock()
    node = profiled_nodes()[0]
    bare = copy.deepcopy(node)
    bare["metadata"]["labels"] = {}
    settling = FleetSettling(NodeFacts(MFRS), stall=10.0, clock=clock)
    settling.on_add(bare)
    clock.now += 9.0
    assert settling.busy()
    clock.now += 2.0  # nothing moved for 11 s: NFD is not labelling it
    assert not settling.busy() and len(settling) == 1


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_debounce_waits_for_a_pause_but_not_longer_than_the_cap() -> None:
    clock = Clock()
    settling = [False]
    debounce = Debouncer(
        1.0, 10.0, settling=lambda: settling[0], settling_max_delay=30.0, clock=clock
    )
    assert debounce.remaining("q") == 0  # no burst: due at once
    debounce.touch("q")
    assert debounce.remaining("q") == pytest.approx(1.0)
    for _ in range(30):  # an event every half second
        clock.now += 0.5
        debounce.touch("q")
    assert debounce.remaining("q") == 0  # 15 s after the first event: over the cap
    assert debounce.remaining("q") == 0  # the burst was closed
    debounce.touch("q")  # a new burst at 15 s
    settling[0] = True
    clock.now += 5.0
    debounce.touch("q")
    clock.now += 5.0  # a pause means nothing while nodes are being labelled
    assert debounce.remaining("q") == pytest.approx(1.0)  # not due; look again soon
    clock.now += 19.5
    assert debounce.remaining("q") == pytest.approx(0.5)  # 30 s after the first event
    clock.now -= 19.5
    settling[0] = False
    assert debounce.remaining("q") == 0  # labelled: the pause counts again


@pytest.mark.anyio
async def test_a_debounced_reconciler_is_requeued_until_due() -> None:
    clock = Clock()
    debounce = Debouncer(1.0, 10.0, clock=clock)
    seen: list[str] = []

    async def reconcile(request: Request) -> Result | None:
        seen.append(request.key)
        return None

    wrapped = Debounced(reconcile, debounce)
    debounce.touch("q")
    result = await wrapped(Request("q"))
    assert result is not None and result.requeue_after == pytest.approx(1.0)
    assert seen == []
    clock.now += 1.0
    assert await wrapped(Request("q")) is None
    assert seen == ["q"]
