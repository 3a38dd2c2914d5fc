"""Produced objects validate against the real Kueue v0.19.2 and NFD v0.19.0 CRD schemas.

The CRDs live outside the repository (``../shared/crds`` or ``$GPUSTACK_SHARED_CRDS``); the
tests skip with a message when they are absent. Schemas are made strict (unknown fields are
errors, as with ``fieldValidation=Strict``) so a misspelt field fails here. CEL rules
(``x-kubernetes-validations``) are not evaluated here; the simulator evaluates them
(tests/integration/chain/test_kueue_admission.py).
"""

from __future__ import annotations

import copy
import os
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.plan.desired import DesiredState
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.validation import (
    is_valid_dns_label,
    is_valid_dns_subdomain,
    is_valid_label_key,
    is_valid_label_value,
)

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "cluster.yaml"


def crds_dir() -> Path | None:
    override = os.environ.get("GPUSTACK_SHARED_CRDS")
    path = Path(override) if override else REPO / ".." / "shared" / "crds"
    return path.resolve() if path.is_dir() else None


CRDS = crds_dir()
pytestmark = pytest.mark.skipif(
    CRDS is None,
    reason="real CRDs not found: put them in ../shared/crds or set GPUSTACK_SHARED_CRDS",
)


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def schemas() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """(apiVersion, kind) -> validator of the strict schema, for every CRD version."""
    assert CRDS is not None
    found: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
    for path in sorted(CRDS.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                schema = version["schema"]["openAPIV3Schema"]
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                strict = _strict(copy.deepcopy(schema))
                found[key] = jsonschema.validators.validator_for(strict)(strict)
    return found


def validate(obj: dict[str, Any]) -> None:
    key = (obj["apiVersion"], obj["kind"])
    assert key in schemas(), f"no CRD schema for {key}"
    schemas()[key].validate(obj)
    meta = obj["metadata"]
    assert is_valid_dns_subdomain(meta["name"]), meta["name"]
    if "namespace" in meta:
        assert is_valid_dns_label(meta["namespace"])
    for key_, value in meta.get("labels", {}).items():
        assert is_valid_label_key(key_) and is_valid_label_value(value), (key_, value)
    for key_ in meta.get("annotations", {}):
        assert is_valid_label_key(key_), key_
    for key_, value in obj.get("spec", {}).get("labels", {}).items():
        assert is_valid_label_key(key_) and is_valid_label_value(value), (key_, value)


@cache
def example_state(version: KueueVersion) -> DesiredState:
    items = yaml.safe_load(EXAMPLE.read_text())["items"]
    return plan_state(
        items,
        ["default", "team-a"],
        ChainPolicy(manufacturers=default_manufacturers(), kueue_version=version),
    )


@pytest.mark.parametrize("version", list(KueueVersion))
def test_example_chain_validates(version: KueueVersion) -> None:
    state = example_state(version)
    kinds = {o["kind"] for o in state.objects()}
    assert kinds == {"NodeFeature", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue"}
    for obj in state.objects():
        validate(obj)


def test_strict_schema_catches_a_misspelt_field() -> None:
    queue = copy.deepcopy(example_state(KueueVersion.V1BETA2).cluster_queues[0])
    queue["spec"]["cohortname"] = queue["spec"].pop("cohortName")
    with pytest.raises(jsonschema.ValidationError):
        validate(queue)
    flavor = copy.deepcopy(example_state(KueueVersion.V1BETA2).resource_flavors[0])
    flavor["spec"]["nodeLabels"].update({f"extra{i}": "x" for i in range(8)})
    with pytest.raises(jsonschema.ValidationError):
        validate(flavor)
