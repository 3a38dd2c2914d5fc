"""A CRD's ``x-kubernetes-validations`` rules, enforced on writes as kube-apiserver does.

Each rule sits on a node of the ``openAPIV3Schema`` and is evaluated with ``self`` bound to
the value at that node, when the value is present. Transition rules (those that name
``oldSelf``) run only on an update and only where the old object has a value at the same
place; list items are paired with their old selves only in ``x-kubernetes-list-type: map``
lists (by their keys), map values by key. As in kube-apiserver with validation ratcheting, a
value the update leaves unchanged is not judged again. A rule that evaluates to anything but
``true`` gives ``<path>: Invalid value: "<schema type>": <message>``, the message coming from
``messageExpression`` when it yields a non-empty string, else ``message``, else
``failed rule: <rule>``. Sources: https://kubernetes.io/docs/tasks/extend-kubernetes/
custom-resources/custom-resource-definitions/#validation-rules (docs/simulator.md,
"CEL rules").
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from gpustack_sim.apiserver.cel import CelError, compile_expression, evaluate
from gpustack_sim.apiserver.kinds import KindInfo

__all__ = ["rule_causes", "schema_has_rules"]

Schema = Mapping[str, Any]
_ABSENT = object()


def schema_has_rules(schema: Schema | None) -> bool:
    """Whether any node of *schema* carries ``x-kubernetes-validations`` (cached by id)."""
    if schema is None:
        return False
    entry = _HAS_RULES.get(id(schema))
    if entry is None or entry[0] is not schema:
        entry = (schema, _search(schema))  # holding the schema keeps its id from being reused
        _HAS_RULES[id(schema)] = entry
    return entry[1]


_HAS_RULES: dict[int, tuple[Schema, bool]] = {}


def _search(node: Any) -> bool:
    if isinstance(node, Mapping):
        if node.get("x-kubernetes-validations"):
            return True
        return any(_search(v) for v in node.values())
    if isinstance(node, list):
        return any(_search(v) for v in node)
    return False


def rule_causes(
    info: KindInfo, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None
) -> list[tuple[str, str]]:
    """``(field, message)`` for every rule of *info*'s schema that *obj* breaks.

    *old* is the stored object on an update (None on create): it enables transition rules
    and ratcheting.
    """
    schema = info.schema
    if not schema_has_rules(schema):
        return []
    assert schema is not None
    causes: list[tuple[str, str]] = []
    _walk(obj, old if old is not None else _ABSENT, schema, "", causes)
    return causes


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


@functools.lru_cache(maxsize=4096)
def _uses_old_self(rule: str) -> bool:
    try:
        return "oldSelf" in compile_expression(rule).variables()
    except CelError:
        return False


def _walk(value: Any, old: Any, schema: Schema, path: str, causes: list[tuple[str, str]]) -> None:
    if old is not _ABSENT and value == old:
        return  # ratcheting: an unchanged value is not judged again
    rules = schema.get("x-kubernetes-validations")
    if rules:
        _check(value, old, schema, rules, path, causes)
    if isinstance(value, Mapping):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        old_map = old if isinstance(old, Mapping) else {}
        for key, child in value.items():
            if not path and key in ("apiVersion", "kind", "metadata"):
                continue
            sub = props.get(key)
            child_path = _join(path, key) if sub is not None else f"{path}[{key}]"
            if sub is None and isinstance(extra, Mapping):
                sub = extra
            if sub is not None:
                _walk(child, old_map.get(key, _ABSENT), sub, child_path, causes)
    elif isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return
        olds = _paired_old_items(value, old, schema)
        for index, item in enumerate(value):
            _walk(item, olds[index], items, f"{path}[{index}]", causes)


def _paired_old_items(value: list[Any], old: Any, schema: Schema) -> list[Any]:
    """Each item's old self: by the list-map keys, else none (atomic and set lists)."""
    keys = schema.get("x-kubernetes-list-map-keys")
    if schema.get("x-kubernetes-list-type") != "map" or not keys or not isinstance(old, list):
        return [_ABSENT] * len(value)

    def key_of(item: Any) -> tuple[Any, ...] | None:
        return tuple(item.get(k) for k in keys) if isinstance(item, Mapping) else None

    by_key = {key_of(item): item for item in old}
    return [by_key.get(key_of(item), _ABSENT) for item in value]


def _check(
    value: Any,
    old: Any,
    schema: Schema,
    rules: list[Mapping[str, Any]],
    path: str,
    causes: list[tuple[str, str]],
) -> None:
    shown = f'Invalid value: "{schema.get("type") or "object"}"'
    for rule in rules:
        text = str(rule.get("rule") or "")
        if not text:
            continue
        transition = _uses_old_self(text)
        if transition and old is _ABSENT:
            continue
        variables = {"self": value, **({"oldSelf": old} if transition else {})}
        field = path + str(rule.get("fieldPath") or "") if rule.get("fieldPath") else path
        field = field.lstrip(".") or "<root>"
        try:
            result = evaluate(text, variables)
        except CelError as exc:
            causes.append((field, f"{shown}: {exc} evaluating rule: {text}"))
            continue
        if result is True:
            continue
        causes.append((field, f"{shown}: {_message(rule, text, variables)}"))


def _message(rule: Mapping[str, Any], text: str, variables: Mapping[str, Any]) -> str:
    expression = rule.get("messageExpression")
    if expression:
        try:
            produced = evaluate(str(expression), variables)
        except CelError:
            produced = None
        if isinstance(produced, str) and produced.strip():
            return produced
    return str(rule.get("message") or f"failed rule: {text}")
