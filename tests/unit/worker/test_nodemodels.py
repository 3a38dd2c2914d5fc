"""The worker's per-Node cache, the one-node flavor/cohort rendering and the fleet-settling
hold."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.commands.plan import read_nodes_file
from gpustack_operator.domain.chain.flavors import desired_resource_flavor
from gpustack_operator.domain.chain.queues import desired_cohort, desired_cohorts
from gpustack_operator.domain.node.capacity import (
    capacity_labels_and_devices,
    worker_capacity_labels,
)
from gpustack_operator.domain.node.nodemodel import UNREAD_LABELS, node_view
from gpustack_operator.domain.node.nodeprofiles import node_profile_names, node_profiles
from gpustack_operator.domain.nodeview import labels_of, status_field
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.runtime.cache import Indexer
from gpustack_operator.runtime.coalesce import IndexHold
from gpustack_operator.worker.caches import AWAITING_LABELS, add_node_indexes, fleet_settling
from gpustack_operator.worker.nodemodels import NodeModels
from tests.unit.domain.nodes import planned_flavors

MFRS = load_manufacturers({})
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster.yaml"


def profiled_nodes() -> list[dict[str, Any]]:
    """The example cluster's Nodes as NFD leaves them (device and capacity labels merged),
    each with a uid and resourceVersion, in reverse name order."""
    raw, _ = read_nodes_file(EXAMPLE)
    nodes = plan_state([dict(n) for n in raw], [], ChainPolicy(manufacturers=MFRS)).nodes
    for i, node in enumerate(nodes):
        node["metadata"] |= {"uid": f"uid-{i}", "resourceVersion": str(100 + i)}
    return sorted(nodes, key=lambda n: n["metadata"]["name"], reverse=True)


def test_one_node_renders_the_same_flavors_and_cohorts_as_all() -> None:
    nodes = profiled_nodes()
    facts = NodeModels(MFRS)
    flavors = planned_flavors(nodes, MFRS)
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


def _read_labels(node: Any) -> dict[str, str]:
    """What the shared derivations read of *node*'s labels (domain/node/nodemodel.py)."""
    return {k: v for k, v in labels_of(node).items() if k not in UNREAD_LABELS}


def test_facts_equal_the_domain_and_are_computed_once_per_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = profiled_nodes()
    facts = NodeModels(MFRS)
    for node in nodes:
        assert facts.profiles(node) == tuple(node_profiles(node, MFRS))
        assert facts.view(node) == node_view(node, MFRS)
        for part in ("flavor", "queue", "cohort"):
            assert facts.index_names(node, part) == node_profile_names(node, MFRS, part)
    calls = []
    monkeypatch.setattr(
        "gpustack_operator.domain.node.nodemodel.node_profiles", lambda n, m: calls.append(n) or []
    )
    node = nodes[0]
    same = copy.deepcopy(node)  # a relist decodes the same version into a new object
    assert facts.profiles(same) == facts.profiles(node) != ()
    assert calls == []
    changed = copy.deepcopy(node)  # a hand-made object reusing the version is not trusted
    changed["metadata"]["labels"]["gpustack.ai/managed"] = "false"
    assert facts.profiles(changed) == ()
    # derived once, from its inputs (its labels but the unread ones), not from the Node
    assert [labels_of(c) for c in calls] == [_read_labels(changed)]


def test_capacity_labels_equal_the_domain_and_are_derived_once_per_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The awaiting-labels index and the capacity reconciler share one derivation."""
    nodes = profiled_nodes()
    facts = NodeModels(MFRS)
    for node in nodes:
        assert facts.capacity_labels(node) == worker_capacity_labels(node, MFRS)
    calls = []

    def counted(node: Any, manufacturers: Any, **kwargs: Any) -> Any:
        calls.append(node)
        return capacity_labels_and_devices(node, manufacturers, **kwargs)

    monkeypatch.setattr(
        "gpustack_operator.domain.node.nodemodel.capacity_labels_and_devices", counted
    )
    node = nodes[0]
    facts.awaits_labels(copy.deepcopy(node))
    facts.capacity_labels(node)
    assert calls == []
    relabelled = copy.deepcopy(node)
    relabelled["metadata"]["resourceVersion"] = "999"
    relabelled["metadata"]["labels"]["gpustack.ai/managed"] = "paused"  # echoed back
    assert facts.capacity_labels(relabelled)["gpustack.ai/managed"] == "paused"
    assert facts.capacity_labels(node)["gpustack.ai/managed"] == "true"
    assert [labels_of(c) for c in calls] == [_read_labels(relabelled)]
    assert [status_field(c, "capacity") for c in calls] == [status_field(relabelled, "capacity")]


def test_the_cache_keeps_two_versions_per_node_and_forgets_deleted_nodes() -> None:
    facts = NodeModels(MFRS, size_hint=lambda: 10)
    node = profiled_nodes()[0]
    versions = [
        {**node, "metadata": {**node["metadata"], "resourceVersion": str(version)}}
        for version in range(50)
    ]
    for version in versions:
        facts.view(version)
    assert len(facts) == 2  # an update compares the last two; older ones are let go
    first = facts.view(versions[-2])
    assert facts.view(versions[-2]) is first and facts.view(versions[-1]) is not None
    for uid in range(5000):  # nodes that come and go
        facts.view({**node, "metadata": {**node["metadata"], "uid": f"gone-{uid}"}})
    assert len(facts) <= 2 * 1024


def test_a_cached_node_is_found_by_identity_without_reading_its_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dozens of questions per Node version (every predicate, mapping and index) cost one
    dict lookup each once the version's model is filed (docs/performance.md)."""
    facts = NodeModels(MFRS, size_hint=lambda: 10)
    node = profiled_nodes()[0]
    model = facts.model(node)
    reads: list[object] = []

    def counted(obj: object) -> Any:
        reads.append(obj)
        return node["metadata"]

    monkeypatch.setattr("gpustack_operator.worker.nodemodels.metadata", counted)
    for _ in range(3):
        assert facts.model(node) is model
        assert facts.view(node) == model.view
        assert facts.names(node, "flavor") == list(model.names["flavor"])
    assert reads == []
    again = copy.deepcopy(node)  # the same version decoded again: found by equality, once
    assert facts.model(again) is model and facts.model(again) is model
    assert reads == [again]


def test_the_identity_lookup_forgets_what_the_store_forgets() -> None:
    facts = NodeModels(MFRS, size_hint=lambda: 10)
    node = profiled_nodes()[0]
    for version in range(50):
        facts.view({**node, "metadata": {**node["metadata"], "resourceVersion": str(version)}})
    for uid in range(5000):
        facts.view({**node, "metadata": {**node["metadata"], "uid": f"gone-{uid}"}})
    assert len(facts._ids) == len(facts) <= 2 * 1024
    kept = {**node, "metadata": {**node["metadata"], "uid": "kept"}}
    model = facts.model(kept)
    for uid in range(5000):  # generations turn over while the kept node is asked about
        facts.view({**node, "metadata": {**node["metadata"], "uid": f"later-{uid}"}})
        assert facts.model(kept) is model
    assert facts.built == 50 + 5000 + 1 + 5000


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class NodeCache:
    """The part of a Node informer the indexes and the hold use."""

    def __init__(self) -> None:
        self.indexer = Indexer()

    def add_index(self, name: str, fn: Any) -> None:
        self.indexer.add_index(name, fn)


def unlabelled(node: dict[str, Any], version: str = "1") -> dict[str, Any]:
    """*node* before NFD merged the capacity labels the worker published for it."""
    bare = copy.deepcopy(node)
    bare["metadata"]["labels"] = {
        k: v
        for k, v in bare["metadata"]["labels"].items()
        if not k.endswith((".z-queue", ".z-flavor", ".z-cohort", ".cpu"))
    }
    bare["metadata"]["resourceVersion"] = version
    return bare


def test_fleet_settling_follows_the_awaiting_labels_index() -> None:
    nodes = profiled_nodes()
    cache = NodeCache()
    add_node_indexes(cache, NodeModels(MFRS))  # type: ignore[arg-type]
    settling = fleet_settling(cache)  # type: ignore[arg-type]
    cache.indexer.upsert(unlabelled(nodes[0]))
    assert settling.active()
    cache.indexer.upsert(nodes[0])
    assert not settling.active()
    cache.indexer.upsert(unlabelled(nodes[0], "7"))
    cache.indexer.delete(nodes[0]["metadata"]["name"])
    assert not settling.active()


def test_a_node_that_is_never_labelled_does_not_keep_the_fleet_settling() -> None:
    clock = Clock()
    cache = NodeCache()
    add_node_indexes(cache, NodeModels(MFRS))  # type: ignore[arg-type]
    settling = IndexHold(cache, AWAITING_LABELS, "yes", stall=10.0, clock=clock)
    bare = copy.deepcopy(profiled_nodes()[0])
    bare["metadata"]["labels"] = {}
    cache.indexer.upsert(bare)
    assert settling.active()
    clock.now += 9.0
    assert settling.active()
    clock.now += 2.0  # nothing moved for 11 s: NFD is not labelling it
    assert not settling.active()
    assert cache.indexer.index_keys(AWAITING_LABELS, "yes") == [bare["metadata"]["name"]]


def test_models_of_nodes_of_one_shape_share_their_equal_parts() -> None:
    """Two Nodes of one shape hold one copy of what their models have in common, and each
    model equals the one the domain builds for its Node alone."""
    from gpustack_operator.domain.node.nodemodel import node_model

    node = next(n for n in profiled_nodes() if node_profiles(n, MFRS))
    node["metadata"]["labels"]["kubernetes.io/hostname"] = node["metadata"]["name"]
    twin = copy.deepcopy(node)
    twin["metadata"] |= {"name": "twin", "uid": "uid-twin"}
    twin["metadata"]["labels"] = {**node["metadata"]["labels"], "kubernetes.io/hostname": "twin"}
    # TAS on: the hostname is a topology level, so each node's labels view differs in it
    facts = NodeModels(MFRS, topology=ChainPolicy(manufacturers=MFRS).topology)
    first, second = facts.model(node), facts.model(twin)
    assert first == node_model(node, facts.settings)
    assert second == node_model(twin, facts.settings)
    assert first.capacity_labels is second.capacity_labels
    assert first.names is second.names
    pairs = list(zip(first.view[2], second.view[2], strict=True))  # the selected labels
    assert [a for a, b in pairs if a is not b] == [
        ("kubernetes.io/hostname", node["metadata"]["name"])
    ]
    assert first.dedication_taints is second.dedication_taints
    assert first.profiles[0].flavor is second.profiles[0].flavor
    assert not hasattr(first.profiles[0], "__dict__")  # slots: no dict per profile


class _Pools:
    """A declared pool claiming the Node versions in *versions* (``PoolClaims``)."""

    def __init__(self) -> None:
        self.version = 0
        self.versions: set[str] = set()

    def claim(self, node: object) -> str:
        version = node["metadata"]["resourceVersion"] if isinstance(node, dict) else ""
        return "pool-a" if version in self.versions else ""


def test_a_view_comparison_is_answered_once_per_event_and_again_after_the_pools_change() -> None:
    node, other = profiled_nodes()[:2]
    relabelled = copy.deepcopy(node)
    relabelled["metadata"]["resourceVersion"] += "1"
    relabelled["metadata"]["labels"]["example.com/unread"] = "x"  # not in the view
    facts = NodeModels(MFRS)
    pools = _Pools()
    facts.pools = pools
    assert facts.view_changed(node, relabelled) is False
    assert facts.view_changed(node, relabelled) is False  # the same event, another controller
    # the pools changed (the claim is in the view): the same pair is compared again
    pools.versions, pools.version = {node["metadata"]["resourceVersion"]}, 1
    assert facts.view_changed(node, relabelled) is True
    # another pair is not answered from the last one
    assert facts.view_changed(relabelled, relabelled) is False
    assert facts.view_changed(relabelled, other) is True
    assert facts.view_changed(other, relabelled) is True
