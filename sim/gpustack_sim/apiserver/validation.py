"""Structural-schema handling of custom resources, as kube-apiserver does it on every write.

The server (1) prunes fields the schema does not know and ``null`` values of non-nullable
fields, (2) applies ``default`` values, then (3) validates against the ``openAPIV3Schema``.
This module does the three steps for the sim, with messages in the apiserver's wording
(``spec.x: Required value``, ``spec.y: Unsupported value: "Z": supported values: ...``) so
tests read the same errors a real cluster gives. ``x-kubernetes-validations`` (CEL) rules are
enforced separately, by ``gpustack_sim/apiserver/celrules.py`` (see docs/simulator.md, "CEL rules").

Pure functions of (kind, object): no I/O, no jsonschema dependency (this is product code).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpustack_sim.apiserver.kinds import KindInfo

__all__ = [
    "apply_defaults",
    "find_unknown_fields",
    "prune_unknown_fields",
    "validate_object",
    "validation_causes",
]

Schema = Mapping[str, Any]

# Fields every object (and every x-kubernetes-embedded-resource) has whatever its schema says.
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def validate_object(kind: KindInfo, obj: Mapping[str, Any]) -> list[str]:
    """Every schema violation of *obj*, one apiserver-style message each; [] when valid.

    Kinds without a schema (built-ins) are not validated here.
    """
    if kind.schema is None:
        return []
    errors: list[str] = []
    _validate(obj, kind.schema, "", errors, root=True)
    return errors


def prune_unknown_fields(kind: KindInfo, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of *obj* without fields the schema does not declare, as the apiserver stores it.

    Subtrees marked ``x-kubernetes-preserve-unknown-fields`` are kept whole; ``null`` values
    of fields that are not ``nullable`` are dropped. Kinds without a schema are copied as is.
    """
    out = copy.deepcopy(dict(obj))
    if kind.schema is not None:
        _prune(out, kind.schema, root=True, found=None, path="")
    return out


def find_unknown_fields(kind: KindInfo, obj: Mapping[str, Any]) -> list[str]:
    """Sorted paths (``spec.foo``) of the fields pruning would drop, for ``fieldValidation``.

    The apiserver answers 400 ``strict decoding error: unknown field "spec.foo"`` for these
    under Strict and a warning under Warn.
    """
    found: list[str] = []
    if kind.schema is not None:
        _prune(copy.deepcopy(dict(obj)), kind.schema, root=True, found=found, path="")
    return sorted(found)


def apply_defaults(kind: KindInfo, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of *obj* with the schema's ``default`` values filled in where a field is absent."""
    out = copy.deepcopy(dict(obj))
    if kind.schema is not None:
        _default(out, kind.schema)
    return out


# --- validation -----------------------------------------------------------------------------


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _show(value: Any) -> str:
    """A value as the apiserver prints it in an error."""
    if isinstance(value, Mapping | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return json.dumps(value)


def _label(path: str) -> str:
    return path or "<root>"


def _type_ok(value: Any, expected: str) -> bool:
    actual = _type_of(value)
    if expected == "number":
        return actual in ("number", "integer")
    if expected == "integer" and actual == "number":
        return float(value).is_integer()
    return actual == expected


def _validate(value: Any, schema: Schema, path: str, errors: list[str], root: bool = False) -> None:
    where = _label(path)
    if value is None:
        if not schema.get("nullable", False) and (schema.get("type") or schema.get("properties")):
            expected = schema.get("type", "object")
            errors.append(_in_body(where, '"null"', f'must be of type {expected}: "null"'))
        return

    int_or_string = schema.get("x-kubernetes-int-or-string", False)
    expected = schema.get("type")
    if int_or_string:
        if _type_of(value) not in ("integer", "string"):
            actual = f'"{_type_of(value)}"'
            errors.append(_in_body(where, actual, f"must be of type integer or string: {actual}"))
            return
    elif expected and not _type_ok(value, expected):
        actual = f'"{_type_of(value)}"'
        errors.append(_in_body(where, actual, f"must be of type {expected}: {actual}"))
        return

    _validate_enum(value, schema, where, errors)
    if isinstance(value, str):
        _validate_string(value, schema, where, errors)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(value, schema, where, errors)
    elif isinstance(value, list):
        _validate_array(value, schema, path, errors)
    elif isinstance(value, Mapping):
        _validate_object(value, schema, path, errors, root)

    for branch in schema.get("allOf") or ():
        _validate(value, branch, path, errors)
    any_of = schema.get("anyOf")
    if any_of and not int_or_string and all(_errors_of(value, b, path) for b in any_of):
        errors.append(f"{where}: Invalid value: {_show(value)}: must match a schema in anyOf")
    one_of = schema.get("oneOf")
    if one_of:
        matches = sum(1 for b in one_of if not _errors_of(value, b, path))
        if matches != 1:
            errors.append(
                f"{where}: Invalid value: {_show(value)}: must match exactly one schema in oneOf"
            )
    not_schema = schema.get("not")
    if not_schema and not _errors_of(value, not_schema, path):
        errors.append(f"{where}: Invalid value: {_show(value)}: must not match the schema in not")


def _errors_of(value: Any, schema: Schema, path: str) -> list[str]:
    found: list[str] = []
    _validate(value, schema, path, found)
    return found


def _in_body(where: str, shown: str, rule: str) -> str:
    """The API server's wording for a value that breaks a schema rule."""
    return f"{where}: Invalid value: {shown}: {where} in body {rule}"


def _validate_enum(value: Any, schema: Schema, where: str, errors: list[str]) -> None:
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        supported = ", ".join(_show(v) for v in enum)
        errors.append(f"{where}: Unsupported value: {_show(value)}: supported values: {supported}")


def _validate_string(value: str, schema: Schema, where: str, errors: list[str]) -> None:
    max_len = schema.get("maxLength")
    if max_len is not None and len(value) > max_len:
        errors.append(f"{where}: Too long: may not be more than {max_len} bytes")
    min_len = schema.get("minLength")
    if min_len is not None and len(value) < min_len:
        errors.append(_in_body(where, _show(value), f"should be at least {min_len} chars long"))
    pattern = schema.get("pattern")
    if pattern is not None:
        try:
            matched = re.search(pattern, value) is not None
        except re.error:
            matched = True  # a pattern Python cannot compile is not the object's fault
        if not matched:
            errors.append(_in_body(where, _show(value), f"should match '{pattern}'"))
    fmt = schema.get("format")
    if fmt == "date-time" and not _is_date_time(value):
        errors.append(_in_body(where, _show(value), f"must be of type date-time: {_show(value)}"))


def _is_date_time(value: str) -> bool:
    if not _DATE_TIME.match(value):
        return False
    try:
        datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _validate_number(value: float, schema: Schema, where: str, errors: list[str]) -> None:
    shown = _show(value)
    maximum = schema.get("maximum")
    if maximum is not None:
        if schema.get("exclusiveMaximum") and value >= maximum:
            errors.append(_in_body(where, shown, f"should be less than {maximum}"))
        elif value > maximum:
            errors.append(_in_body(where, shown, f"should be less than or equal to {maximum}"))
    minimum = schema.get("minimum")
    if minimum is not None:
        if schema.get("exclusiveMinimum") and value <= minimum:
            errors.append(_in_body(where, shown, f"should be greater than {minimum}"))
        elif value < minimum:
            errors.append(_in_body(where, shown, f"should be greater than or equal to {minimum}"))
    bounds = _INT_RANGES.get(schema.get("format", ""))
    if bounds and isinstance(value, int) and not bounds[0] <= value <= bounds[1]:
        errors.append(_in_body(where, shown, f"must be of type {schema['format']}"))


def _validate_array(value: list[Any], schema: Schema, path: str, errors: list[str]) -> None:
    where = _label(path)
    max_items = schema.get("maxItems")
    if max_items is not None and len(value) > max_items:
        errors.append(f"{where}: Too many: {len(value)}: must have at most {max_items} items")
    min_items = schema.get("minItems")
    if min_items is not None and len(value) < min_items:
        errors.append(_in_body(where, str(len(value)), f"should have at least {min_items} items"))
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            _validate(item, items, f"{path}[{index}]", errors)
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set" or schema.get("uniqueItems"):
        seen: list[Any] = []
        for index, item in enumerate(value):
            if item in seen:
                errors.append(f"{path}[{index}]: Duplicate value: {_show(item)}")
            seen.append(item)
    elif list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or ()
        seen_keys: list[dict[str, Any]] = []
        for index, item in enumerate(value):
            if not isinstance(item, Mapping):
                continue
            ident = {k: item.get(k) for k in keys}
            if ident in seen_keys:
                errors.append(f"{path}[{index}]: Duplicate value: {_show(ident)}")
            seen_keys.append(ident)


def _validate_object(
    value: Mapping[str, Any], schema: Schema, path: str, errors: list[str], root: bool
) -> None:
    where = _label(path)
    for name in schema.get("required") or ():
        if name not in value:
            errors.append(f"{_join(path, name)}: Required value")
    max_props = schema.get("maxProperties")
    if max_props is not None and len(value) > max_props:
        errors.append(f"{where}: Too many: {len(value)}: must have at most {max_props} items")
    min_props = schema.get("minProperties")
    if min_props is not None and len(value) < min_props:
        errors.append(
            _in_body(where, str(len(value)), f"should have at least {min_props} properties")
        )
    properties: Mapping[str, Schema] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for name, child in value.items():
        child_path = _join(path, name)
        if name in properties:
            if (root or schema.get("x-kubernetes-embedded-resource")) and name == "metadata":
                _validate_metadata(child, properties[name], child_path, errors)
            else:
                _validate(child, properties[name], child_path, errors)
        elif isinstance(additional, Mapping):
            _validate(child, additional, child_path, errors)
        elif additional is False and not properties:
            errors.append(f"{child_path}: Forbidden: no additional properties are allowed")


def _validate_metadata(value: Any, schema: Schema, path: str, errors: list[str]) -> None:
    """CRD schemas may only restrict metadata.name and metadata.generateName."""
    if not isinstance(value, Mapping):
        _validate(value, {"type": "object"}, path, errors)
        return
    properties = schema.get("properties") or {}
    for name in ("name", "generateName"):
        if name in value and name in properties:
            _validate(value[name], properties[name], _join(path, name), errors)


# --- pruning and defaulting -----------------------------------------------------------------


def _prune(value: Any, schema: Schema, *, root: bool, found: list[str] | None, path: str) -> None:
    """Drop unknown fields of *value* in place; record their paths in *found*."""
    if isinstance(value, dict):
        preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
        embedded = root or schema.get("x-kubernetes-embedded-resource", False)
        properties: Mapping[str, Schema] = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for name in list(value):
            child = value[name]
            child_path = _join(path, name)
            if embedded and name in _ROOT_FIELDS and (name == "metadata" or name not in properties):
                continue
            if name in properties:
                child_schema = properties[name]
            elif isinstance(additional, Mapping):
                child_schema = additional
            elif preserve or additional is True:
                continue
            else:
                del value[name]
                if found is not None:
                    found.append(child_path)
                continue
            if child is None and not child_schema.get("nullable", False):
                del value[name]
                continue
            _prune(child, child_schema, root=False, found=found, path=child_path)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                _prune(item, items, root=False, found=found, path=f"{path}[{index}]")


def _default(value: Any, schema: Schema) -> None:
    if isinstance(value, dict):
        properties: Mapping[str, Schema] = schema.get("properties") or {}
        for name, child_schema in properties.items():
            if name not in value and "default" in child_schema:
                value[name] = copy.deepcopy(child_schema["default"])
        for name, child in value.items():
            if name in properties:
                _default(child, properties[name])
            elif isinstance(schema.get("additionalProperties"), Mapping):
                _default(child, schema["additionalProperties"])
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                _default(item, items)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def validation_causes(kind: KindInfo, obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """:func:`validate_object` as ``(field, message)`` pairs, for a ``Status``'s causes."""
    causes = []
    for error in validate_object(kind, obj):
        field, _, message = error.partition(": ")
        causes.append((field, message))
    return causes
