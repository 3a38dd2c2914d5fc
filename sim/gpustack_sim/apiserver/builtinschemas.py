"""Built-in kinds checked against Kubernetes' published OpenAPI, as kube-apiserver decodes them.

A real API server decodes a built-in object into its Go type before anything else: a value
of the wrong JSON type fails the decoding (400 ``Deployment in version "v1" cannot be handled
as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas
of type int32``), fields the type does not have are dropped (``fieldValidation``), and a
required field left out fails validation (422 ``spec.containers[0].name: Required value``).
The simulator reads what the Go types say from their published OpenAPI: the JSON schemas the
``kubernetes-validate`` package bundles per Kubernetes release (the ``sim`` extra), for the
release the simulator reports (docs/simulator.md, "Built-in kinds").

Each kind's schema is compiled once per process into a small tree of :class:`_Type` (shared
for shared definitions, so recursive types are fine) and walked once per write.
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Final

from gpustack_sim.apiserver.errors import bad_request
from gpustack_sim.apiserver.kinds import KUBERNETES_VERSION, KindInfo

__all__ = ["SCHEMA_RELEASE", "SchemaCheck", "check", "has_schema"]

SCHEMA_RELEASE: Final = f"v{KUBERNETES_VERSION[0]}.{KUBERNETES_VERSION[1]}.0"
_PACKAGE: Final = "kubernetes_validate"

# resource.Quantity's text form (k8s.io/apimachinery pkg/api/resource/quantity.go).
_QUANTITY: Final = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_QUANTITY_FORMAT: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_SUFFIXES: Final = frozenset(
    {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"}
)
_EXPONENT: Final = re.compile(r"^[eE][-+]?[0-9]+$")
_BASE64: Final = re.compile(r"[A-Za-z0-9+/=\r\n]")


@dataclass(eq=False)
class _Type:
    """What one Go type accepts. ``shape`` is one of string, integer, number, boolean, bytes,
    quantity, int-or-string, struct, map, array or any (anything goes: RawExtension, JSON)."""

    shape: str
    go: str  # the type as Go's decoder names it in errors: int32, []v1.Container, v1.PodSpec
    fields: dict[str, _Type] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    item: _Type | None = None  # an array's items, a map's values


_ANY: Final = _Type("any", "interface {}")


@dataclass
class SchemaCheck:
    """What walking one object found: its unknown fields and the required ones it lacks."""

    unknown: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


class _DecodeError(Exception):
    """The message Go's decoder gives for the first value it cannot take."""


def _definitions_file() -> Path:
    spec = importlib.util.find_spec(_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise RuntimeError(
            "the simulator checks built-in kinds against the Kubernetes OpenAPI schemas of the "
            f"{_PACKAGE.replace('_', '-')} package, which is not installed: install the "
            "simulator's extra (`make install`, or `pip install -e .[sim]`)"
        )
    path = Path(locations[0]) / "kubernetes-json-schema" / f"{SCHEMA_RELEASE}-local"
    path /= "_definitions.json"
    if not path.is_file():
        raise RuntimeError(
            f"{path} is missing: the installed {_PACKAGE.replace('_', '-')} has no schemas for "
            f"Kubernetes {SCHEMA_RELEASE}; upgrade it (`make install`)"
        )
    return path


class _Compiler:
    """Turns the bundled JSON-schema definitions into :class:`_Type` trees, each once."""

    def __init__(self, definitions: Mapping[str, Any]) -> None:
        self._definitions = definitions
        self._done: dict[str, _Type] = {}
        self.by_kind: dict[tuple[str, str, str], str] = {}
        for name, schema in definitions.items():
            for gvk in schema.get("x-kubernetes-group-version-kind") or ():
                key = (gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))
                self.by_kind.setdefault(key, name)

    def definition(self, name: str) -> _Type:
        found = self._done.get(name)
        if found is not None:
            return found
        schema = self._definitions.get(name) or {}
        parts = name.split(".")
        go = f"{parts[-2]}.{parts[-1]}" if len(parts) > 1 else name
        if name.endswith("resource.Quantity"):
            compiled = _Type("quantity", go)
        elif name.endswith("intstr.IntOrString"):
            compiled = _Type("int-or-string", go)
        elif not (_types(schema) & {"object"}) or not schema.get("properties"):
            compiled = self.schema(schema)  # a named string, a Time, free-form JSON, ...
        else:
            compiled = _Type("struct", go, required=tuple(schema.get("required") or ()))
        self._done[name] = compiled
        if compiled.shape == "struct":  # filled in after being recorded: types may recurse
            compiled.fields = {k: self.schema(v) for k, v in schema["properties"].items()}
        return compiled

    def schema(self, schema: Mapping[str, Any]) -> _Type:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self.definition(ref.rpartition("/")[2])
        types = _types(schema)
        fmt = schema.get("format", "")
        if "string" in types:
            return _Type("bytes", "[]uint8") if fmt == "byte" else _Type("string", "string")
        if "integer" in types:
            return _Type("integer", fmt if fmt in ("int32", "int64") else "int64")
        if "number" in types:
            return _Type("number", "float64")
        if "boolean" in types:
            return _Type("boolean", "bool")
        if "array" in types and isinstance(schema.get("items"), Mapping):
            item = self.schema(schema["items"])
            return _Type("array", f"[]{item.go}", item=item)
        if "object" in types and isinstance(schema.get("additionalProperties"), Mapping):
            value = self.schema(schema["additionalProperties"])
            return _Type("map", f"map[string]{value.go}", item=value)
        if "object" in types and schema.get("properties"):
            return _Type(
                "struct",
                "struct",
                {k: self.schema(v) for k, v in schema["properties"].items()},
                tuple(schema.get("required") or ()),
            )
        return _ANY


def _types(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    return {str(k) for k in kind} if isinstance(kind, list) else set()


@cache
def _compiler() -> _Compiler:
    with _definitions_file().open(encoding="utf-8") as handle:
        definitions = json.load(handle)["$defs"]
    return _Compiler(definitions)


@cache
def _kind_type(group: str, version: str, kind: str) -> _Type | None:
    compiler = _compiler()
    name = compiler.by_kind.get((group, version, kind))
    return compiler.definition(name) if name is not None else None


def has_schema(info: KindInfo) -> bool:
    """Whether *info* is a built-in kind with a published schema (custom resources are not)."""
    return info.schema is None and _kind_type(info.group, info.version, info.kind) is not None


def check(info: KindInfo, obj: dict[str, Any], *, prune: bool) -> SchemaCheck:
    """Walk *obj* as kube-apiserver decodes it into *info*'s Go type.

    Raises 400 for a value of the wrong type; with *prune*, drops (in place) the fields the
    type does not have and ``null`` values, as decoding and encoding again would. Returns the
    unknown fields' paths and those of the missing required fields outside ``status``.
    """
    root = _kind_type(info.group, info.version, info.kind)
    found = SchemaCheck()
    if root is None:
        return found
    try:
        _walk(obj, root, "", "", root.go.rpartition(".")[2], found, prune)
    except _DecodeError as exc:
        raise bad_request(
            f'{info.kind} in version "{info.version}" cannot be handled as a {info.kind}: {exc}'
        ) from None
    # ``required`` marks the fields Go always writes; the server's validation insists on them
    # in what clients write, not in what kubelets and controllers report (a Node's nodeInfo
    # without a bootID is accepted).
    found.missing = [p for p in found.missing if not p.startswith("status.")]
    return found


# --- the walk -------------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    """The JSON value as Go's decoder names it in an error."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _type_error(value: Any, go: str, struct: str, go_path: str, literal: bool = False) -> Exception:
    shown = _json_type(value)
    if literal:
        shown = f"number {json.dumps(value)}"
    where = f"Go struct field {struct}.{go_path}" if go_path else "Go value"
    return _DecodeError(f"json: cannot unmarshal {shown} into {where} of type {go}")


_INT_BOUNDS: Final = {"int32": 2**31, "int64": 2**63}


def _walk(
    value: Any,
    kind: _Type,
    path: str,
    go_path: str,
    struct: str,
    found: SchemaCheck,
    prune: bool,
) -> None:
    shape = kind.shape
    if shape == "any":
        return
    if shape == "struct":
        if not isinstance(value, dict):
            raise _type_error(value, kind.go, struct, go_path)
        _walk_struct(value, kind, path, go_path, found, prune)
    elif shape in ("array", "map"):
        _walk_collection(value, kind, path, go_path, struct, found, prune)
    elif shape == "string":
        if not isinstance(value, str):
            raise _type_error(value, "string", struct, go_path)
    elif shape == "integer":
        _check_integer(value, kind.go, struct, go_path)
    elif shape == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _type_error(value, "float64", struct, go_path)
    elif shape == "boolean":
        if not isinstance(value, bool):
            raise _type_error(value, "bool", struct, go_path)
    elif shape == "bytes":
        if not isinstance(value, str):
            raise _type_error(value, "[]uint8", struct, go_path)
        _check_base64(value)
    elif shape == "quantity":
        _check_quantity(value)
    elif shape == "int-or-string" and not isinstance(value, str):
        _check_integer(value, "int32", struct, go_path)


def _plainly_fine(value: Any, kind: _Type) -> bool:
    """A quick yes for the common leaves (a string, a bool, an int within int32, a valid
    quantity), so that most of an object costs no full step of the walk; False: walk it."""
    shape = kind.shape
    if shape == "string" or shape == "int-or-string":
        return type(value) is str
    if shape == "boolean":
        return type(value) is bool
    if shape == "integer":
        return type(value) is int and -(2**31) <= value < 2**31
    if shape == "quantity":
        return type(value) is str and _quantity_error(value) is None
    return shape == "any"


def _walk_struct(
    value: dict[str, Any], kind: _Type, path: str, go_path: str, found: SchemaCheck, prune: bool
) -> None:
    struct = kind.go.rpartition(".")[2]
    fields = kind.fields
    for name in list(value):
        child = fields.get(name)
        entry = value[name]
        if child is None:
            found.unknown.append(f"{path}.{name}" if path else name)
            if prune:
                del value[name]
            continue
        if entry is None:  # decodes to the zero value, which is not written back
            if prune:
                del value[name]
            continue
        if _plainly_fine(entry, child):
            continue
        child_path = f"{path}.{name}" if path else name
        child_go = f"{go_path}.{name}" if go_path else name
        _walk(entry, child, child_path, child_go, struct, found, prune)
    for name in kind.required:
        if value.get(name) is None:
            found.missing.append(f"{path}.{name}" if path else name)


def _walk_collection(
    value: Any,
    kind: _Type,
    path: str,
    go_path: str,
    struct: str,
    found: SchemaCheck,
    prune: bool,
) -> None:
    item = kind.item
    assert item is not None
    if kind.shape == "array":
        if not isinstance(value, list):
            raise _type_error(value, kind.go, struct, go_path)
        for index, entry in enumerate(value):
            if entry is not None and not _plainly_fine(entry, item):
                _walk(entry, item, f"{path}[{index}]", go_path, struct, found, prune)
        return
    if not isinstance(value, dict):
        raise _type_error(value, kind.go, struct, go_path)
    for key, entry in value.items():
        if entry is not None and not _plainly_fine(entry, item):
            _walk(entry, item, f"{path}[{key}]", go_path, struct, found, prune)


def _check_integer(value: Any, go: str, struct: str, go_path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _type_error(value, go, struct, go_path)
    bound = _INT_BOUNDS.get(go, 2**63)
    if isinstance(value, float) or not -bound <= value < bound:
        raise _type_error(value, go, struct, go_path, literal=True)


def _check_quantity(value: Any) -> None:
    """resource.Quantity's UnmarshalJSON: a number, or text ParseQuantity accepts."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return
    error = _quantity_error(value.strip() if isinstance(value, str) else json.dumps(value))
    if error is not None:
        raise _DecodeError(error)


@lru_cache(maxsize=4096)
def _quantity_error(text: str) -> str | None:
    """ParseQuantity's complaint about *text*, or None (the same few texts recur)."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        return _QUANTITY_FORMAT
    number, suffix = match.groups()
    if number.count(".") > 1 or number.strip("+-") in ("", "."):
        return "unable to parse numeric part of quantity"
    if suffix not in _SUFFIXES and not _EXPONENT.match(suffix):
        return "unable to parse quantity's suffix"
    return None


def _check_base64(text: str) -> None:
    """Go decodes a []byte field from standard base64; the error names the first bad byte."""
    stripped = text.replace("\r", "").replace("\n", "")  # Go skips line breaks
    try:
        base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError):
        bad = next((i for i, ch in enumerate(text) if not _BASE64.match(ch)), None)
        if bad is None:
            padding = stripped.find("=")
            bad = padding if 0 <= padding < len(stripped) - 2 else len(stripped) // 4 * 4
        raise _DecodeError(f"illegal base64 data at input byte {bad}") from None
