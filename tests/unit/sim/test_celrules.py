"""CRD CEL rules as the sim enforces them (docs/simulator.md, "CEL rules")."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_sim.apiserver.cel import CelError, evaluate
from gpustack_sim.apiserver.celrules import rule_causes
from gpustack_sim.apiserver.kinds import KindInfo

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {
                    "rule": "self.size <= 3",
                    "messageExpression": "'size ' + string(self.size) + ' > 3'",
                },
                {
                    "rule": "!has(oldSelf.name) || self.name == oldSelf.name",
                    "message": "name is immutable",
                },
                {"rule": "self.tags.all(t, t.lowerAscii() == t)", "fieldPath": ".tags"},
            ],
            "properties": {
                "size": {"type": "integer"},
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        }
    },
}
KIND = KindInfo("example.com", "v1", "Thing", "things", "thing", False, schema=SCHEMA)


def thing(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "t"},
        "spec": {"tags": [], **spec},
    }


def test_rules_pass_and_fail_with_kube_apiserver_messages() -> None:
    assert rule_causes(KIND, thing(size=1, name="a")) == []
    assert rule_causes(KIND, thing(size=5, tags=["A"])) == [
        ("spec", 'Invalid value: "object": size 5 > 3'),
        (
            "spec.tags",
            'Invalid value: "object": failed rule: self.tags.all(t, t.lowerAscii() == t)',
        ),
    ]


def test_transition_rules_run_on_updates_only() -> None:
    old = thing(size=1, name="a")
    assert rule_causes(KIND, thing(size=1, name="b")) == []  # a create: no oldSelf
    assert rule_causes(KIND, thing(size=1, name="b"), old) == [
        ("spec", 'Invalid value: "object": name is immutable')
    ]


def test_an_unchanged_value_is_not_judged_again() -> None:
    broken = thing(size=9)
    assert rule_causes(KIND, broken, broken) == []  # ratcheting
    assert rule_causes(KIND, thing(size=8), broken) != []


def test_a_missing_key_is_an_evaluation_error() -> None:
    with pytest.raises(CelError, match="no such key: x"):
        evaluate("self.x == 1", {"self": {}})
