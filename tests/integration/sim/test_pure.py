"""The simulator's pure helpers: patches, selectors, names, managedFields encoding."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpustack_sim.apiserver import apply as ssa
from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.kinds import BUILTIN_KINDS
from gpustack_sim.apiserver.names import metadata_errors, name_errors
from gpustack_sim.apiserver.patches import json_patch, merge_patch
from gpustack_sim.apiserver.selectors import parse_field_selector, parse_label_selector

CONFIGMAP = next(k for k in BUILTIN_KINDS if k.kind == "ConfigMap")


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [  # RFC 7386 appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_rfc7386_examples(target, patch, expected):
    assert merge_patch(target, patch) == expected


def test_merge_patch_does_not_alias_its_inputs():
    target, patch = {"a": {"b": [1]}}, {"c": {"d": [2]}}
    out = merge_patch(target, patch)
    out["a"]["b"].append(9)
    out["c"]["d"].append(9)
    assert target == {"a": {"b": [1]}} and patch == {"c": {"d": [2]}}


def test_json_patch_operations():
    doc = {"a": [1, 2], "b": {"c/d": 1, "e~f": 2}}
    ops = [
        {"op": "add", "path": "/a/-", "value": 3},
        {"op": "add", "path": "/a/0", "value": 0},
        {"op": "move", "from": "/b/c~1d", "path": "/moved"},
        {"op": "copy", "from": "/b/e~0f", "path": "/copied"},
        {"op": "test", "path": "/a", "value": [0, 1, 2, 3]},
        {"op": "replace", "path": "/a/1", "value": 10},
        {"op": "remove", "path": "/a/3"},
    ]
    assert json_patch(doc, ops) == {"a": [0, 10, 2], "b": {"e~f": 2}, "moved": 1, "copied": 2}
    assert doc == {"a": [1, 2], "b": {"c/d": 1, "e~f": 2}}


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([{"op": "remove", "path": "/missing"}], 422),
        ([{"op": "replace", "path": "/x/y", "value": 1}], 422),
        ([{"op": "add", "path": "/a/9", "value": 1}], 422),
        ([{"op": "test", "path": "/a", "value": []}], 422),
        ([{"op": "nope", "path": "/a"}], 400),
        ({"op": "add"}, 400),
    ],
)
def test_json_patch_failures(ops, code):
    with pytest.raises(ApiError) as exc:
        json_patch({"a": [1]}, ops)
    assert exc.value.code == code


def test_label_selector_grammar():
    reqs = parse_label_selector("a, !b, c=1, d==2, e!=3, f in (x, y), g notin (z), h>4, i<5")
    assert [(r.key, r.op, r.values) for r in reqs] == [
        ("a", "exists", ()),
        ("b", "!exists", ()),
        ("c", "=", ("1",)),
        ("d", "=", ("2",)),
        ("e", "!=", ("3",)),
        ("f", "in", ("x", "y")),
        ("g", "notin", ("z",)),
        ("h", "gt", ("4",)),
        ("i", "lt", ("5",)),
    ]
    labels = {"a": "", "c": "1", "d": "2", "f": "y", "h": "7", "i": "1"}
    assert all(r.matches(labels) for r in reqs)
    (empty,) = parse_label_selector("example.com/key=")
    assert (empty.key, empty.op, empty.values) == ("example.com/key", "=", ("",))
    assert empty.matches({"example.com/key": ""}) and not empty.matches({})


def test_field_selector_fields():
    (req,) = parse_field_selector("spec.nodeName=n1", "Pod")
    assert req.matches({"spec": {"nodeName": "n1"}})
    with pytest.raises(ApiError):
        parse_field_selector("spec.nodeName=n1", "Node")


def test_name_and_label_rules():
    assert name_errors(CONFIGMAP, "a.b-c") == []
    assert name_errors(CONFIGMAP, "-a")
    assert name_errors(CONFIGMAP, "A")
    ok = {"name": "x", "labels": {"a.b/c_d": "E.f-G"}, "annotations": {"k8s.io/x": "any value!"}}
    assert metadata_errors(CONFIGMAP, ok) == []
    bad = {"name": "x", "labels": {"a/b/c": "v"}, "annotations": {"": "v"}}
    assert {f for f, _ in metadata_errors(CONFIGMAP, bad)} == {
        "metadata.labels",
        "metadata.annotations",
    }


_keys = st.sampled_from(["a", "b", "c", "d", "example.com/e", "f.io/g"])
_values = st.sampled_from(["1", "2", "x"])
_label_maps = st.dictionaries(_keys, _values, max_size=6)


def _cm(labels: dict[str, str], data: dict[str, str] | None = None) -> dict:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": labels}}
    if data is not None:
        obj["data"] = data
    return obj


@settings(max_examples=200, deadline=None)
@given(first=_label_maps, second=_label_maps, other=_label_maps)
def test_apply_converges_to_the_latest_config_plus_what_others_own(first, second, other):
    # another manager owns keys of its own (disjoint from ours, to avoid conflicts)
    other = {f"other/{k.rpartition('/')[2]}": v for k, v in other.items()}
    live = ssa.apply(None, _cm(first, {"k": "v"}), "op", CONFIGMAP, None, False)
    live = ssa.apply(live, _cm(other), "them", CONFIGMAP, None, False)
    live = ssa.apply(live, _cm(second), "op", CONFIGMAP, None, False)
    assert (live["metadata"].get("labels") or {}) == {**second, **other}
    assert "data" not in live  # dropped from the config, owned by no one else
    owned = {e["manager"]: e["fieldsV1"] for e in live["metadata"].get("managedFields", [])}
    mine = owned.get("op", {}).get("f:metadata", {}).get("f:labels", {})
    assert set(mine) == {f"f:{k}" for k in second}


@settings(max_examples=300, deadline=None)
@given(first=_label_maps, second=_label_maps, other=_label_maps)
def test_apply_conflicts_exactly_when_another_owner_disagrees(first, second, other):
    live = ssa.apply(None, _cm(first), "op", CONFIGMAP, None, False)
    try:
        live = ssa.apply(live, _cm(other), "them", CONFIGMAP, None, False)
    except ApiError:
        assume(False)
    disagree = {k for k in second if k in other and other[k] != second[k]}
    try:
        after = ssa.apply(live, _cm(second), "op", CONFIGMAP, None, False)
    except ApiError as exc:
        assert exc.code == 409 and disagree
        fields = {c["field"] for c in exc.status["details"]["causes"]}
        assert fields == {f".metadata.labels.{k}" for k in disagree}
        forced = ssa.apply(live, _cm(second), "op", CONFIGMAP, None, True)
        assert (forced["metadata"].get("labels") or {}) == {**other, **second}
        return
    assert not disagree
    assert (after["metadata"].get("labels") or {}) == {**other, **second}
