"""``/openapi/v2``: the served kinds' schemas as Swagger 2.0, in JSON or kubectl's protobuf.

kubectl validates a manifest on the client through OpenAPI v2 whenever the server cannot
check fields itself for that kind — always for a ``kind: List`` file — and asks for it only
as protobuf (the gnostic ``openapi.v2.Document`` message, github.com/google/gnostic,
openapiv2/OpenAPIv2.proto). Without it ``kubectl apply -f`` fails unless given
``--validate=false`` (docs/simulator.md, "OpenAPI").

The document is built from the same kinds and schemas as ``/openapi/v3``: every registered
kind gets a definition carrying its group-version-kind. CRD schemas are turned into what
kubectl's v2 reader accepts, as the API server does when it publishes them: parts v2 cannot
express (nullable, preserve-unknown-fields, embedded resources, int-or-string, anyOf/oneOf)
become untyped, so they are not checked on the client; the server still checks them.
A kind without a schema is untyped too, and kubectl skips it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

import yaml

from gpustack_sim.apiserver.kinds import KindInfo

__all__ = ["PROTOBUF_TYPE", "OpenApiV2Cache", "encode_document", "openapi_v2_document"]

# kubectl asks for ``...spec.v2@v1.0+protobuf``; the answer's type spells the ``@`` as a dot,
# as the API server does (Go's media-type parser refuses the ``@``).
PROTOBUF_TYPE: Final = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
GVK_EXTENSION: Final = "x-kubernetes-group-version-kind"

# CRD-schema keywords after which v2 cannot describe the value (it may hold anything).
_UNTYPED_MARKERS: Final = (
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "anyOf",
    "oneOf",
)
_PRIMITIVES: Final = frozenset({"string", "integer", "number", "boolean"})


def definition_name(info: KindInfo) -> str:
    """``io.k8s.api.core.v1.Node`` for core kinds, reversed-group names for the others."""
    if info.group:
        return ".".join(reversed(info.group.split("."))) + f".{info.version}.{info.kind}"
    return f"io.k8s.api.core.{info.version}.{info.kind}"


def v2_schema(schema: Any) -> dict[str, Any]:
    """One OpenAPI v3 structural schema (a CRD's) as kubectl's v2 reader takes it."""
    if not isinstance(schema, Mapping):
        return {}
    out: dict[str, Any] = {}
    if isinstance(schema.get("description"), str):
        out["description"] = schema["description"]
    if any(schema.get(marker) for marker in _UNTYPED_MARKERS):
        return out
    kind = schema.get("type")
    if isinstance(schema.get("$ref"), str):
        out["$ref"] = schema["$ref"]
        return out
    if kind in _PRIMITIVES:
        out["type"] = kind
        if isinstance(schema.get("format"), str):
            out["format"] = schema["format"]
        return out
    if kind == "array":
        if isinstance(schema.get("items"), Mapping):
            out["type"] = "array"
            out["items"] = v2_schema(schema["items"])
        return out
    if kind != "object":
        return out
    out["type"] = "object"
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and properties:
        out["properties"] = {str(k): v2_schema(v) for k, v in properties.items()}
        required = [r for r in schema.get("required") or () if r in properties]
        if required:
            out["required"] = required
        return out
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        out["additionalProperties"] = v2_schema(extra)
    elif isinstance(extra, bool):
        out["additionalProperties"] = extra
    return out


def openapi_v2_document(kinds: Iterable[KindInfo]) -> dict[str, Any]:
    """The Swagger 2.0 document with one definition per kind (no paths: kubectl reads only
    the definitions to validate)."""
    definitions: dict[str, Any] = {}
    for info in kinds:
        definition = v2_schema(info.schema) if info.schema is not None else {}
        definition[GVK_EXTENSION] = [
            {"group": info.group, "kind": info.kind, "version": info.version}
        ]
        definitions[definition_name(info)] = definition
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes (gpustack-operator simulator)", "version": "unversioned"},
        "paths": {},
        "definitions": definitions,
    }


# --- protobuf (field numbers of openapi.v2 in gnostic's OpenAPIv2.proto) ---------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _string(number: int, text: str) -> bytes:
    return _bytes(number, text.encode())


def _bool(number: int, value: bool) -> bytes:
    return _varint(number << 3) + (b"\x01" if value else b"\x00")


def _named_any(name: str, value: Any) -> bytes:
    """NamedAny{name=1, value=2: Any{yaml=2}}."""
    text = yaml.safe_dump(value, default_flow_style=False, sort_keys=True)
    return _string(1, name) + _bytes(2, _string(2, text))


def _schema(schema: Mapping[str, Any]) -> bytes:
    """Schema: _ref=1, format=2, description=4, required=19, additional_properties=21,
    type=22, items=23, properties=25, vendor_extension=31."""
    out = bytearray()
    if "$ref" in schema:
        out += _string(1, schema["$ref"])
    if "format" in schema:
        out += _string(2, schema["format"])
    if "description" in schema:
        out += _string(4, schema["description"])
    for name in schema.get("required") or ():
        out += _string(19, name)
    extra = schema.get("additionalProperties")
    if isinstance(extra, bool):
        out += _bytes(21, _bool(2, extra))
    elif isinstance(extra, Mapping):
        out += _bytes(21, _bytes(1, _schema(extra)))
    if "type" in schema:
        out += _bytes(22, _string(1, schema["type"]))
    if isinstance(schema.get("items"), Mapping):
        out += _bytes(23, _bytes(1, _schema(schema["items"])))
    if "properties" in schema:
        named = b"".join(
            _bytes(1, _string(1, name) + _bytes(2, _schema(sub)))
            for name, sub in schema["properties"].items()
        )
        out += _bytes(25, named)
    for key, value in schema.items():
        if key.startswith("x-"):
            out += _bytes(31, _named_any(key, value))
    return bytes(out)


def encode_document(document: Mapping[str, Any]) -> bytes:
    """Document: swagger=1, info=2 (title=1, version=2), paths=8, definitions=9."""
    info = document.get("info") or {}
    out = bytearray(_string(1, document.get("swagger", "2.0")))
    out += _bytes(2, _string(1, info.get("title", "")) + _string(2, info.get("version", "")))
    out += _bytes(8, b"")
    definitions = b"".join(
        _bytes(1, _string(1, name) + _bytes(2, _schema(schema)))
        for name, schema in (document.get("definitions") or {}).items()
    )
    out += _bytes(9, definitions)
    return bytes(out)


class OpenApiV2Cache:
    """The JSON and protobuf bodies, rebuilt only when the set of kinds changes (kubectl
    fetches the document on every validated apply; CRD schemas are large)."""

    def __init__(self) -> None:
        self._kinds: tuple[KindInfo, ...] = ()
        self._bodies: tuple[bytes, bytes, str] | None = None

    def bodies(self, kinds: Iterable[KindInfo]) -> tuple[bytes, bytes, str]:
        """(JSON, protobuf, ETag) of the document for *kinds*."""
        current = tuple(kinds)
        if (
            self._bodies is not None
            and len(current) == len(self._kinds)
            and all(a is b for a, b in zip(current, self._kinds, strict=True))
        ):
            return self._bodies
        document = openapi_v2_document(current)
        as_json = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
        etag = hashlib.sha512(as_json).hexdigest()[:64].upper()
        self._kinds, self._bodies = current, (as_json, encode_document(document), etag)
        return self._bodies
