"""The NFD custom resource definitions, authored by this project (docs/worker.md).

NFD's chart ships its own CRDs; the worker installs its own instead, so that it controls
their lifecycle. The schemas are structural and cover exactly the fields NFD v0.18 reads and
the operator writes (NodeFeature ``spec.labels``/``spec.features``, NodeFeatureRule rules
with matchers, templates, vars, taints and extended resources, NodeFeatureGroup rules and
status), so the
API server prunes nothing we send. ``tests/unit/bootstrap`` checks that every object the
project renders validates both against these and against NFD's released CRDs.
"""

from __future__ import annotations

from typing import Any, Final

from gpustack_operator.domain.bootstrap.common import JSON, NODE_FEATURE_DISCOVERY, labels

NFD_GROUP: Final = "nfd.k8s-sigs.io"
NFD_VERSION_NAME: Final = "v1alpha1"
NODE_FEATURES_CRD: Final = f"nodefeatures.{NFD_GROUP}"
NODE_FEATURE_RULES_CRD: Final = f"nodefeaturerules.{NFD_GROUP}"
NODE_FEATURE_GROUPS_CRD: Final = f"nodefeaturegroups.{NFD_GROUP}"

_STRING: Final[JSON] = {"type": "string"}
_STRING_MAP: Final[JSON] = {"type": "object", "additionalProperties": {"type": "string"}}
_STRING_LIST: Final[JSON] = {"type": "array", "items": {"type": "string"}}
_OPERATORS: Final = (
    "In",
    "NotIn",
    "InRegexp",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Ge",
    "Lt",
    "Le",
    "GtLt",
    "GeLe",
    "IsTrue",
    "IsFalse",
)


def _obj(properties: dict[str, Any], required: list[str] | None = None) -> JSON:
    schema: JSON = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _match_expression() -> JSON:
    return _obj(
        {
            "op": {"type": "string", "enum": list(_OPERATORS)},
            "value": _STRING_LIST,
            "type": _STRING,
        },
        ["op"],
    )


def _match_features() -> JSON:
    """A list of feature matcher terms: all must match (NFD ``matchFeatures``)."""
    return {
        "type": "array",
        "items": _obj(
            {
                "feature": _STRING,
                "matchExpressions": {
                    "type": "object",
                    "additionalProperties": _match_expression(),
                },
                "matchName": _match_expression(),
            },
            ["feature"],
        ),
    }


def _match_any() -> JSON:
    return {"type": "array", "items": _obj({"matchFeatures": _match_features()}, ["matchFeatures"])}


def _feature_set(elements: JSON) -> JSON:
    return {"type": "object", "additionalProperties": _obj({"elements": elements}, ["elements"])}


def _node_feature_spec() -> JSON:
    instance = _obj({"attributes": _STRING_MAP}, ["attributes"])
    features = _obj(
        {
            "flags": _feature_set({"type": "object", "additionalProperties": {"type": "object"}}),
            "attributes": _feature_set(_STRING_MAP),
            "instances": _feature_set({"type": "array", "items": instance}),
        }
    )
    return _obj({"labels": _STRING_MAP, "features": features})


def _rule() -> JSON:
    taint = _obj(
        {
            "key": _STRING,
            "value": _STRING,
            "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
            "timeAdded": {"type": "string", "format": "date-time"},
        },
        ["key", "effect"],
    )
    return _obj(
        {
            "name": _STRING,
            "labels": _STRING_MAP,
            "labelsTemplate": _STRING,
            "annotations": _STRING_MAP,
            "vars": _STRING_MAP,
            "varsTemplate": _STRING,
            "extendedResources": _STRING_MAP,
            "taints": {"type": "array", "items": taint},
            "matchFeatures": _match_features(),
            "matchAny": _match_any(),
        },
        ["name"],
    )


def _group_rule() -> JSON:
    return _obj(
        {
            "name": _STRING,
            "vars": _STRING_MAP,
            "varsTemplate": _STRING,
            "matchFeatures": _match_features(),
            "matchAny": _match_any(),
        },
        ["name"],
    )


def _crd(
    kind: str, plural: str, scope: str, spec: JSON, *, short: str = "", status: JSON | None = None
) -> JSON:
    root = _obj(
        {
            "apiVersion": _STRING,
            "kind": _STRING,
            "metadata": {"type": "object"},
            "spec": spec,
            **({"status": status} if status is not None else {}),
        },
        ["spec"],
    )
    version: JSON = {
        "name": NFD_VERSION_NAME,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root},
    }
    if status is not None:
        version["subresources"] = {"status": {}}
    names: JSON = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short:
        names["shortNames"] = [short]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{NFD_GROUP}",
            "labels": labels("node-feature-discovery", NODE_FEATURE_DISCOVERY),
        },
        "spec": {
            "group": NFD_GROUP,
            "names": names,
            "scope": scope,
            "versions": [version],
        },
    }


def render_nfd_crds() -> list[JSON]:
    """NodeFeature, NodeFeatureRule and NodeFeatureGroup (``nfd.k8s-sigs.io/v1alpha1``)."""
    group_status = _obj({"nodes": {"type": "array", "items": _obj({"name": _STRING}, ["name"])}})
    return [
        _crd("NodeFeature", "nodefeatures", "Namespaced", _node_feature_spec()),
        _crd(
            "NodeFeatureRule",
            "nodefeaturerules",
            "Cluster",
            _obj({"rules": {"type": "array", "items": _rule()}}, ["rules"]),
            short="nfr",
        ),
        _crd(
            "NodeFeatureGroup",
            "nodefeaturegroups",
            "Namespaced",
            _obj(
                {"featureGroupRules": {"type": "array", "items": _group_rule()}},
                ["featureGroupRules"],
            ),
            short="nfg",
            status=group_status,
        ),
    ]
