"""Structural-schema pruning, defaulting and validation against real CRD schemas."""

# ruff: noqa: E501  (expected messages are kept whole so they read like the apiserver's)

from __future__ import annotations

import copy
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest

from gpustack_sim.apiserver.kinds import KindInfo, kinds_from_crd
from gpustack_sim.apiserver.validation import (
    apply_defaults,
    find_unknown_fields,
    prune_unknown_fields,
    validate_object,
    validation_causes,
)

CrdDocs = dict[str, list[dict[str, Any]]]


def crd_kind(crd_docs: CrdDocs, file: str, version: str) -> KindInfo:
    for doc in crd_docs.get(file, []):
        for info in kinds_from_crd(doc):
            if info.version == version:
                return info
    raise AssertionError(f"{file} {version} not found in the shared CRDs")


@pytest.fixture(scope="module")
def cluster_queue(crd_docs: CrdDocs) -> KindInfo:
    return crd_kind(crd_docs, "kueue.x-k8s.io_clusterqueues.yaml", "v1beta2")


@pytest.fixture(scope="module")
def resource_flavor(crd_docs: CrdDocs) -> KindInfo:
    return crd_kind(crd_docs, "kueue.x-k8s.io_resourceflavors.yaml", "v1beta2")


VALID_CQ: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ClusterQueue",
    "metadata": {"name": "gpu-t4", "labels": {"gpustack.ai/managed": "true"}},
    "spec": {
        "cohortName": "gpustack",
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "t4",
                        "resources": [
                            {"name": "cpu", "nominalQuota": 16},
                            {"name": "memory", "nominalQuota": "32Gi"},
                            {"name": "nvidia.com/gpu", "nominalQuota": "1", "borrowingLimit": 0},
                        ],
                    }
                ],
            }
        ],
    },
}


def test_valid_cluster_queue_passes(cluster_queue: KindInfo) -> None:
    assert validate_object(cluster_queue, VALID_CQ) == []


def test_invalid_cluster_queue_reports_readable_errors(cluster_queue: KindInfo) -> None:
    bad = copy.deepcopy(VALID_CQ)
    bad["spec"]["queueingStrategy"] = "Random"
    bad["spec"]["cohortName"] = "Not_A_Name"
    group = bad["spec"]["resourceGroups"][0]
    del group["flavors"][0]["name"]
    group["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    group["coveredResources"] = []
    bad["spec"]["resourceGroups"].extend([copy.deepcopy(group)] * 16)

    errors = validate_object(cluster_queue, bad)

    assert (
        'spec.queueingStrategy: Unsupported value: "Random": supported values: '
        '"StrictFIFO", "BestEffortFIFO"'
    ) in errors
    assert any(e.startswith('spec.cohortName: Invalid value: "Not_A_Name"') for e in errors)
    assert "spec.resourceGroups[0].flavors[0].name: Required value" in errors
    assert any(
        e.startswith(
            'spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Invalid value: "lots"'
        )
        for e in errors
    )
    assert any(
        e.startswith("spec.resourceGroups[0].coveredResources: Invalid value: 0") for e in errors
    )
    assert "spec.resourceGroups: Too many: 17: must have at most 16 items" in errors
    causes = validation_causes(cluster_queue, bad)
    assert ("spec.resourceGroups[0].flavors[0].name", "Required value") in causes


def test_type_errors_use_apiserver_wording(resource_flavor: KindInfo) -> None:
    bad = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "f"},
        "spec": {"nodeLabels": "not-a-map"},
    }
    assert validate_object(resource_flavor, bad) == [
        'spec.nodeLabels: Invalid value: "string": spec.nodeLabels in body must be of type '
        'object: "string"'
    ]


def test_pruning_drops_unknown_fields_but_keeps_metadata(cluster_queue: KindInfo) -> None:
    obj = copy.deepcopy(VALID_CQ)
    obj["spec"]["bogus"] = {"x": 1}
    obj["spec"]["resourceGroups"][0]["flavors"][0]["extra"] = True
    obj["status"] = {"unknownStatus": 1}
    obj["metadata"]["annotations"] = {"a": "b"}
    obj["spec"]["cohortName"] = None

    assert find_unknown_fields(cluster_queue, obj) == [
        "spec.bogus",
        "spec.resourceGroups[0].flavors[0].extra",
        "status.unknownStatus",
    ]
    pruned = prune_unknown_fields(cluster_queue, obj)
    assert "bogus" not in pruned["spec"]
    assert "extra" not in pruned["spec"]["resourceGroups"][0]["flavors"][0]
    assert pruned["status"] == {}
    assert "cohortName" not in pruned["spec"]  # null in a non-nullable field is pruned
    assert pruned["metadata"]["annotations"] == {"a": "b"}
    assert obj["spec"]["bogus"] == {"x": 1}  # the input is untouched


def test_preserve_unknown_fields_keeps_subtrees() -> None:
    kind = KindInfo(
        "x.io",
        "v1",
        "Thing",
        "things",
        "thing",
        False,
        schema={
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"known": {"type": "object"}},
                }
            },
        },
    )
    obj = {"spec": {"anything": [1, 2], "known": {"dropped": 1}}}
    assert prune_unknown_fields(kind, obj)["spec"] == {"anything": [1, 2], "known": {}}


def test_defaults_fill_absent_fields(cluster_queue: KindInfo) -> None:
    obj = copy.deepcopy(VALID_CQ)
    del obj["spec"]["queueingStrategy"]
    defaulted = apply_defaults(cluster_queue, obj)
    assert defaulted["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert defaulted["spec"]["stopPolicy"] == "None"
    assert "queueingStrategy" not in obj["spec"]


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "maxProperties": 9,
            "properties": {
                "count": {"type": "integer", "minimum": 1, "maximum": 10, "format": "int32"},
                "ratio": {"type": "number", "exclusiveMaximum": True, "maximum": 1},
                "name": {"type": "string", "minLength": 2, "maxLength": 4},
                "when": {"type": "string", "format": "date-time"},
                "maybe": {"type": "string", "nullable": True},
                "port": {
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                },
                "tags": {
                    "type": "array",
                    "items": {"type": "string"},
                    "x-kubernetes-list-type": "set",
                },
                "byName": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    },
}
THING = KindInfo("x.io", "v1", "Thing", "things", "thing", True, schema=SCHEMA)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {
                "count": 5,
                "ratio": 0.5,
                "name": "abc",
                "when": "2024-01-02T03:04:05Z",
                "maybe": None,
                "port": "http",
                "tags": ["a", "b"],
                "byName": [{"name": "a"}],
                "labels": {"a": "b"},
            },
            [],
        ),
        (
            {"count": 0},
            [
                "spec.count: Invalid value: 0: spec.count in body should be greater than or equal to 1"
            ],
        ),
        (
            {"count": 11},
            [
                "spec.count: Invalid value: 11: spec.count in body should be less than or equal to 10"
            ],
        ),
        (
            {"count": 2**40},
            [
                "spec.count: Invalid value: 1099511627776: spec.count in body should be less than or equal to 10",
                "spec.count: Invalid value: 1099511627776: spec.count in body must be of type int32",
            ],
        ),
        ({"ratio": 1}, ["spec.ratio: Invalid value: 1: spec.ratio in body should be less than 1"]),
        (
            {"name": "a"},
            ['spec.name: Invalid value: "a": spec.name in body should be at least 2 chars long'],
        ),
        ({"name": "abcde"}, ["spec.name: Too long: may not be more than 4 bytes"]),
        (
            {"when": "yesterday"},
            [
                'spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"'
            ],
        ),
        (
            {"port": 1.5},
            [
                'spec.port: Invalid value: "number": spec.port in body must be of type integer or string: "number"'
            ],
        ),
        ({"tags": ["a", "a"]}, ['spec.tags[1]: Duplicate value: "a"']),
        (
            {"byName": [{"name": "a"}, {"name": "a"}]},
            ['spec.byName[1]: Duplicate value: {"name":"a"}'],
        ),
        (
            {"labels": {"a": 1}},
            [
                'spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer"'
            ],
        ),
        (
            {"count": None},
            [
                'spec.count: Invalid value: "null": spec.count in body must be of type integer: "null"'
            ],
        ),
        ({f"k{i}": 1 for i in range(10)}, ["spec: Too many: 10: must have at most 9 items"]),
    ],
)
def test_keyword_checks(spec: dict[str, Any], expected: list[str]) -> None:
    assert validate_object(THING, {"spec": spec}) == expected


def test_kinds_without_schema_are_not_validated() -> None:
    node = KindInfo("", "v1", "Node", "nodes", "node", False)
    assert validate_object(node, {"spec": "anything"}) == []
    assert prune_unknown_fields(node, {"spec": {"x": 1}}) == {"spec": {"x": 1}}


# --- differential check against the jsonschema library ------------------------------------

MUTANTS: list[Any] = ["x", "", "Random", 1, -1, 0, 1.5, True, [], {}, ["x"], {"k": "v"}]


def _leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        out = [path] if path else []
        for key, child in value.items():
            out += _leaf_paths(child, (*path, key))
        return out
    if isinstance(value, list):
        out = [path]
        for index, child in enumerate(value):
            out += _leaf_paths(child, (*path, index))
        return out
    return [path]


def _replace(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    target: Any = out
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return out


def test_verdicts_match_jsonschema_on_mutated_cluster_queues(cluster_queue: KindInfo) -> None:
    """Every one-field mutation of a valid ClusterQueue's spec: valid here iff for jsonschema.

    The OpenAPI-only keywords jsonschema ignores (formats, list types, CEL) are not reached by
    these mutations, so both validators must agree on each of them.
    """
    assert cluster_queue.schema is not None
    reference = jsonschema.Draft4Validator(cluster_queue.schema)
    verdicts = []
    for path in [p for p in _leaf_paths(VALID_CQ["spec"]) if p]:
        for value in MUTANTS:
            mutant = _replace(VALID_CQ, ("spec", *path), value)
            ours = validate_object(cluster_queue, mutant)
            theirs = [e.message for e in reference.iter_errors(mutant)]
            assert (ours == []) == (theirs == []), (path, value, ours, theirs)
            verdicts.append(ours == [])
    assert any(verdicts) and not all(verdicts)  # both outcomes are exercised
