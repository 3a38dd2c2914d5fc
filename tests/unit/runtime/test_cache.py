"""The informer's store: keys, named indexes and the default memory-saving transform."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_operator.runtime.cache import (
    LAST_APPLIED_ANNOTATION,
    Indexer,
    SharedValues,
    _same_scalars,
    compact,
    namespace_index,
    object_key,
    strip_managed_fields,
)


def obj(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def by_label(key: str):  # type: ignore[no-untyped-def]
    def index(o: dict[str, Any]) -> list[str]:
        value = o["metadata"].get("labels", {}).get(key)
        return [value] if value is not None else []

    return index


def test_object_key_is_namespace_slash_name_or_name() -> None:
    assert object_key(obj("a", "ns")) == "ns/a"
    assert object_key(obj("node-1")) == "node-1"
    assert object_key({}) == ""


def test_upsert_get_list_delete() -> None:
    store = Indexer()
    assert store.upsert(obj("a", "ns")) is None
    first = store.get("ns/a")
    assert first is not None
    replaced = store.upsert(obj("a", "ns", x="1"))
    assert replaced is first
    assert store.keys() == ["ns/a"]
    assert len(store) == 1 and "ns/a" in store
    assert store.delete("ns/a") is not None
    assert store.delete("ns/a") is None
    assert store.list() == []


def test_index_follows_updates_and_deletes() -> None:
    store = Indexer()
    store.add_index("zone", by_label("zone"))
    store.upsert(obj("a", zone="z1"))
    store.upsert(obj("b", zone="z1"))
    store.upsert(obj("c", zone="z2"))
    store.upsert(obj("d"))  # filed under nothing
    assert [o["metadata"]["name"] for o in store.by_index("zone", "z1")] == ["a", "b"]
    store.upsert(obj("a", zone="z2"))
    assert store.index_keys("zone", "z1") == ["b"]
    assert store.index_keys("zone", "z2") == ["a", "c"]
    store.delete("c")
    store.delete("b")
    assert store.index_keys("zone", "z1") == []
    assert store.index_values("zone") == ["z2"]


def test_index_added_late_indexes_existing_objects() -> None:
    store = Indexer()
    store.upsert(obj("a", "ns1"))
    store.upsert(obj("b", "ns2"))
    store.add_index("namespace", namespace_index)
    assert store.index_keys("namespace", "ns2") == ["ns2/b"]
    with pytest.raises(ValueError, match="already exists"):
        store.add_index("namespace", namespace_index)


def test_multi_valued_index_files_object_under_each_value() -> None:
    store = Indexer()
    store.add_index("owners", lambda o: o["metadata"].get("owners", []))
    item = obj("a")
    item["metadata"]["owners"] = ["x", "y", "x"]
    store.upsert(item)
    assert store.index_keys("owners", "x") == ["a"]
    assert store.index_keys("owners", "y") == ["a"]


def test_unknown_index_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="no index named 'nope'"):
        Indexer().by_index("nope", "v")


def test_failing_index_function_does_not_lose_the_object() -> None:
    store = Indexer()

    def broken(o: dict[str, Any]) -> list[str]:
        raise RuntimeError("boom")

    store.add_index("broken", broken)
    store.upsert(obj("a"))
    assert store.get("a") is not None
    assert store.index_keys("broken", "anything") == []


def test_strip_managed_fields_drops_managed_fields_and_last_applied() -> None:
    original = obj("a", "ns")
    original["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    original["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: "{...}", "keep": "me"}
    before = copy.deepcopy(original)
    stripped = strip_managed_fields(original)
    assert "managedFields" not in stripped["metadata"]
    assert stripped["metadata"]["annotations"] == {"keep": "me"}
    assert stripped["metadata"]["labels"] == {}
    assert original == before, "the input must be left intact"


def test_strip_managed_fields_returns_clean_objects_unchanged() -> None:
    clean = obj("a")
    assert strip_managed_fields(clean) is clean
    assert strip_managed_fields({"kind": "Weird"}) == {"kind": "Weird"}


def test_index_count_and_generation_move_only_with_membership() -> None:
    """What a hold asks on every event: how many are filed, and did that change."""
    store = Indexer()
    store.add_index("team", by_label("team"))
    assert (store.index_count("team", "a"), store.index_generation("team")) == (0, 0)
    store.upsert(obj("x", team="a"))
    store.upsert(obj("y", team="a"))
    assert store.index_count("team", "a") == 2
    moved = store.index_generation("team")
    store.upsert(obj("x", team="a", other="1"))  # filed where it already was
    assert store.index_generation("team") == moved
    store.upsert(obj("x", team="b"))
    assert (store.index_count("team", "a"), store.index_count("team", "b")) == (1, 1)
    assert store.index_generation("team") > moved
    moved = store.index_generation("team")
    store.delete("y")
    assert store.index_count("team", "a") == 0 and store.index_generation("team") > moved
    assert store.index_keys("team", "b") == ["x"]


def test_strip_managed_fields_shares_label_strings_between_objects() -> None:
    import json

    decoded = [json.loads(json.dumps(obj(name, zone="eu-west-1a"))) for name in ("a", "b")]
    first, second = (strip_managed_fields(o) for o in decoded)
    (key_a, value_a), (key_b, value_b) = (
        next(iter(o["metadata"]["labels"].items())) for o in (first, second)
    )
    assert decoded[0]["metadata"]["labels"] == first["metadata"]["labels"]
    assert key_a is key_b and value_a is value_b


def test_strip_managed_fields_shares_node_feature_label_strings_and_keeps_the_input() -> None:
    import json

    feature = {
        "kind": "NodeFeature",
        "metadata": {"name": "f"},
        "spec": {"labels": {"gpustack.ai/managed": "true"}},
    }
    decoded = [json.loads(json.dumps(feature)) for _ in range(2)]
    before = copy.deepcopy(decoded[0])
    first, second = (strip_managed_fields(o) for o in decoded)
    assert first == before and decoded[0] == before
    key_a, key_b = (next(iter(o["spec"]["labels"])) for o in (first, second))
    assert key_a is key_b


def test_compact_keeps_the_value_and_shares_every_string_between_objects() -> None:
    """Two objects decoded apart hold one copy of each string they share, keys and values,
    at any depth; the copy equals the input and the input is left intact."""
    import json

    node = {
        "metadata": {"name": "n", "annotations": {"cpu-name": "AMD EPYC 7763"}},
        "status": {
            "capacity": {"cpu": "64", "memory": "263781504Ki"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "unschedulable": False},
        "count": 3,
    }
    decoded = [json.loads(json.dumps(node)) for _ in range(2)]
    before = copy.deepcopy(decoded[0])
    first, second = (compact(o) for o in decoded)
    assert first == node and decoded[0] == before
    assert first["status"] is not decoded[0]["status"]  # copied, not shared
    a, b = first, second
    pairs = [
        (next(iter(a["metadata"])), next(iter(b["metadata"]))),
        (a["metadata"]["annotations"]["cpu-name"], b["metadata"]["annotations"]["cpu-name"]),
        (a["status"]["capacity"]["memory"], b["status"]["capacity"]["memory"]),
        (a["status"]["conditions"][0]["status"], b["status"]["conditions"][0]["status"]),
        (a["spec"]["taints"][0]["effect"], b["spec"]["taints"][0]["effect"]),
    ]
    assert all(x is y for x, y in pairs)


def _node(name: str, cpu: str, ready: bool = True) -> dict[str, Any]:
    """A Node as the worker's transform keeps it, decoded on its own."""
    import json

    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
            "annotations": {"feature.gpustack.ai/cpu-name": "AMD EPYC 7763"},
        },
        "status": {
            "capacity": {"cpu": cpu, "memory": "263781504Ki"},
            "allocatable": {"cpu": cpu, "memory": "263781504Ki"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
    }
    return json.loads(json.dumps(node))


def test_nodes_of_one_shape_share_their_equal_maps_and_lists() -> None:
    """docs/performance.md, "Memory per node": the capacity, allocatable, annotations, Ready
    condition and taints of two Nodes of one shape are one object each; what names a Node
    (its metadata, its labels) stays its own, and a different value is not shared."""
    a, b, c = compact(_node("a", "64")), compact(_node("b", "64")), compact(_node("c", "32"))
    assert a == _node("a", "64")
    for path in (
        ("status", "capacity"),
        ("status", "allocatable"),
        ("status", "conditions"),
        ("spec", "taints"),
        ("metadata", "annotations"),
    ):
        x, y = a, b
        for part in path:
            x, y = x[part], y[part]
        assert x is y, path
    assert a["status"] is b["status"]
    assert a["metadata"] is not b["metadata"]
    assert a["metadata"]["labels"] is not b["metadata"]["labels"]
    assert a["status"]["capacity"] is not c["status"]["capacity"]
    assert a["status"]["conditions"] is c["status"]["conditions"]
    assert (
        compact(_node("d", "64", ready=False))["status"]["conditions"]
        is not (a["status"]["conditions"])
    )


def test_shared_values_are_equal_in_type_and_order_too() -> None:
    """``1 == True`` and ``{"a": 1, "b": 2} == {"b": 2, "a": 1}``: neither is given the
    other's object, so a reader sees exactly what was decoded."""
    number, flag = compact({"s": {"v": 1}}), compact({"s": {"v": True}})
    assert type(number["s"]["v"]) is int and type(flag["s"]["v"]) is bool
    ab, ba = compact({"s": {"a": "1", "b": "2"}}), compact({"s": {"b": "2", "a": "1"}})
    assert list(ab["s"]) == ["a", "b"] and list(ba["s"]) == ["b", "a"]


def test_lists_of_scalars_are_shared_only_when_equal_in_type_too() -> None:
    """The scalars-only path (hash and comparison over the items in C) keeps the types:
    ``[1] == [True] == [1.0]`` and all three hash alike."""
    ints, flags, floats = (compact({"s": [v, "x"]}) for v in (1, True, 1.0))
    assert [type(o["s"][0]) for o in (ints, flags, floats)] == [int, bool, float]
    again = compact({"s": [1, "x"]})
    assert again["s"] is ints["s"]
    # a held container with a child container is never taken for one of scalars only
    table = SharedValues()
    child = table.share({"k": "v"})
    nested = {"a": child}
    assert not _same_scalars(nested, {"a": "v"}) and not _same_scalars([child], ["v"])
    assert _same_scalars({"a": "v", "n": None}, {"a": "v", "n": None})


def test_shared_values_follow_the_cache_not_its_history() -> None:
    """An equal container no cached object holds any more leaves the table at a sweep, so a
    churning cluster's table does not grow with every value it ever saw."""
    table = SharedValues()
    kept = [table.share({"k": str(i)}) for i in range(10)]
    for i in range(3000):
        table.share({"gone": str(i)})
    assert len(table) < 2048
    assert all(table.share({"k": str(i)}) is kept[i] for i in range(10))


def test_a_mutated_shared_value_is_found() -> None:
    """The read-only contract's check (every test runs it: tests/conftest.py)."""
    table = SharedValues()
    held = table.share({"cpu": "64"})
    assert table.drop_changed() == 0
    held["cpu"] = "32"
    assert table.drop_changed() == 1 and len(table) == 0


def test_an_index_files_one_value_once_for_all_its_objects() -> None:
    """docs/performance.md, "Memory per node": thousands of Nodes filed under one flavor
    hold one string of its name between them, and a single value is not wrapped in a tuple
    per object; filing and unfiling behave as before."""
    indexer = Indexer()
    indexer.add_index("flavor", lambda o: ["-".join(("flavor", o["metadata"]["labels"]["f"]))])
    for name in ("a", "b"):
        indexer.upsert(obj(name, f="x"))
    filed = indexer._filed["flavor"]
    assert filed["a"] is filed["b"] and filed["a"] == "flavor-x"
    indexer.upsert(obj("b", f="y"))
    assert indexer.index_keys("flavor", "flavor-x") == ["a"]
    assert indexer.index_keys("flavor", "flavor-y") == ["b"]
    indexer.delete("a")
    assert indexer.index_values("flavor") == ["flavor-y"]


def test_an_empty_index_value_moves_the_generation_when_it_is_unfiled() -> None:
    """A value filed as itself may be the empty string: unfiling it still counts as a
    change of the index (``index_generation``)."""
    indexer = Indexer()
    indexer.add_index("f", lambda o: [o["metadata"]["labels"]["f"]])
    indexer.upsert(obj("a", f=""))
    before = indexer.index_generation("f")
    indexer.delete("a")
    assert indexer.index_generation("f") == before + 1
    assert indexer.index_values("f") == []


def test_strip_managed_fields_leaves_the_interning_to_compact_when_told() -> None:
    """The worker's transform interns every string in ``compact``: the labels are not
    interned (and copied) a second time before it."""
    source = obj("a", app="x")
    source["metadata"]["managedFields"] = [{"manager": "m"}]
    stripped = strip_managed_fields(source, intern=False)
    assert "managedFields" not in stripped["metadata"]
    assert stripped["metadata"]["labels"] is source["metadata"]["labels"]
    assert "managedFields" in source["metadata"]
    plain = obj("b", app="x")
    assert strip_managed_fields(plain, intern=False) is plain
    assert strip_managed_fields(plain)["metadata"]["labels"] is not plain["metadata"]["labels"]
