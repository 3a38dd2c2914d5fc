"""Decoding of Kubernetes protobuf request bodies for the few kinds kubectl sends that way.

kubectl's typed commands (``kubectl create namespace``, ``create configmap``, ``create secret``,
``create serviceaccount``, ``create token``, ``auth can-i``, ``certificate approve|deny``) send
``application/vnd.kubernetes.protobuf`` bodies and do not fall back to JSON; client-go
programs configured for protobuf also send DeleteOptions and Evictions that way. The simulated
server answers in JSON (clients accept it) and decodes those bodies here, field numbers as in
Kubernetes' ``generated.proto`` (docs/simulator.md, "Protobuf request bodies"). Other kinds
get a 415 that names the kinds supported.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

MAGIC = b"k8s\x00"

Field = tuple[str, str, Any]  # (json name, wire kind, nested schema / None)


class ProtobufError(ValueError):
    """A body that is not a Kubernetes protobuf envelope this module understands."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtobufError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) for each field of one message."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise ProtobufError("truncated field")
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _time(raw: bytes) -> str:
    seconds = next((v for n, _, v in _fields(raw) if n == 1), 0)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_STR, _BYTES, _INT, _BOOL, _MSG, _MAP, _BMAP, _LMAP, _TIME = (
    "str", "bytes", "int", "bool", "msg", "map", "bmap", "lmap", "time",
)  # fmt: skip
# _MAP: map<string, string>; _BMAP: map<string, bytes> (base64 in JSON); _LMAP: map<string,
# ExtraValue>, ExtraValue being a message of repeated strings (field 1), a list in JSON.

_OWNER_REF: dict[int, Field] = {
    5: ("apiVersion", _STR, None),
    1: ("kind", _STR, None),
    3: ("name", _STR, None),
    4: ("uid", _STR, None),
    6: ("controller", _BOOL, None),
    7: ("blockOwnerDeletion", _BOOL, None),
}
_OBJECT_META: dict[int, Field] = {
    1: ("name", _STR, None),
    2: ("generateName", _STR, None),
    3: ("namespace", _STR, None),
    5: ("uid", _STR, None),
    6: ("resourceVersion", _STR, None),
    7: ("generation", _INT, None),
    8: ("creationTimestamp", _TIME, None),
    11: ("labels", _MAP, None),
    12: ("annotations", _MAP, None),
    13: ("ownerReferences", _MSG, _OWNER_REF),
    14: ("finalizers", _STR, None),
}
_REPEATED = {
    "ownerReferences",
    "finalizers",
    "secrets",
    "imagePullSecrets",
    "audiences",
    "groups",
    "dryRun",
    "usages",
    "conditions",
}
_OBJECT_REF: dict[int, Field] = {
    1: ("kind", _STR, None),
    2: ("namespace", _STR, None),
    3: ("name", _STR, None),
}
_SCHEMAS: dict[tuple[str, str], dict[int, Field]] = {
    ("v1", "Namespace"): {
        1: ("metadata", _MSG, _OBJECT_META),
        2: ("spec", _MSG, {1: ("finalizers", _STR, None)}),
        3: ("status", _MSG, {1: ("phase", _STR, None)}),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", _MSG, _OBJECT_META),
        2: ("data", _MAP, None),
        3: ("binaryData", _BMAP, None),
        4: ("immutable", _BOOL, None),
    },
    ("v1", "Secret"): {
        1: ("metadata", _MSG, _OBJECT_META),
        2: ("data", _BMAP, None),
        3: ("type", _STR, None),
        4: ("stringData", _MAP, None),
        5: ("immutable", _BOOL, None),
    },
    ("v1", "ServiceAccount"): {
        1: ("metadata", _MSG, _OBJECT_META),
        2: ("secrets", _MSG, _OBJECT_REF),
        3: ("imagePullSecrets", _MSG, {1: ("name", _STR, None)}),
        4: ("automountServiceAccountToken", _BOOL, None),
    },
}
_RESOURCE_ATTRIBUTES: dict[int, Field] = {
    1: ("namespace", _STR, None),
    2: ("verb", _STR, None),
    3: ("group", _STR, None),
    4: ("version", _STR, None),
    5: ("resource", _STR, None),
    6: ("subresource", _STR, None),
    7: ("name", _STR, None),
}
_NON_RESOURCE_ATTRIBUTES: dict[int, Field] = {1: ("path", _STR, None), 2: ("verb", _STR, None)}
_REVIEW_SPEC: dict[int, Field] = {
    1: ("resourceAttributes", _MSG, _RESOURCE_ATTRIBUTES),
    2: ("nonResourceAttributes", _MSG, _NON_RESOURCE_ATTRIBUTES),
    3: ("user", _STR, None),
    4: ("groups", _STR, None),
    6: ("uid", _STR, None),
}
_REVIEW: dict[int, Field] = {1: ("metadata", _MSG, _OBJECT_META), 2: ("spec", _MSG, _REVIEW_SPEC)}
_SCHEMAS.update(
    {
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): _REVIEW,
        ("authorization.k8s.io/v1", "SubjectAccessReview"): _REVIEW,
        ("authorization.k8s.io/v1", "LocalSubjectAccessReview"): _REVIEW,
        ("authentication.k8s.io/v1", "TokenRequest"): {
            1: ("metadata", _MSG, _OBJECT_META),
            2: (
                "spec",
                _MSG,
                {
                    1: ("audiences", _STR, None),
                    4: ("expirationSeconds", _INT, None),
                    3: (
                        "boundObjectRef",
                        _MSG,
                        {
                            1: ("kind", _STR, None),
                            2: ("apiVersion", _STR, None),
                            3: ("name", _STR, None),
                            4: ("uid", _STR, None),
                        },
                    ),
                },
            ),
        },
        ("authentication.k8s.io/v1", "SelfSubjectReview"): {1: ("metadata", _MSG, _OBJECT_META)},
    }
)

# certificates.k8s.io/v1 (k8s.io/api certificates/v1/generated.proto)
_CSR_SPEC: dict[int, Field] = {
    1: ("request", _BYTES, None),
    7: ("signerName", _STR, None),
    8: ("expirationSeconds", _INT, None),
    5: ("usages", _STR, None),
    2: ("username", _STR, None),
    3: ("uid", _STR, None),
    4: ("groups", _STR, None),
    6: ("extra", _LMAP, None),
}
_CSR_CONDITION: dict[int, Field] = {
    1: ("type", _STR, None),
    6: ("status", _STR, None),
    2: ("reason", _STR, None),
    3: ("message", _STR, None),
    4: ("lastUpdateTime", _TIME, None),
    5: ("lastTransitionTime", _TIME, None),
}
_SCHEMAS[("certificates.k8s.io/v1", "CertificateSigningRequest")] = {
    1: ("metadata", _MSG, _OBJECT_META),
    2: ("spec", _MSG, _CSR_SPEC),
    3: (
        "status",
        _MSG,
        {1: ("conditions", _MSG, _CSR_CONDITION), 2: ("certificate", _BYTES, None)},
    ),
}

_DELETE_OPTIONS: dict[int, Field] = {
    1: ("gracePeriodSeconds", _INT, None),
    2: ("preconditions", _MSG, {1: ("uid", _STR, None), 2: ("resourceVersion", _STR, None)}),
    3: ("orphanDependents", _BOOL, None),
    4: ("propagationPolicy", _STR, None),
    5: ("dryRun", _STR, None),
    6: ("ignoreStoreReadErrorWithClusterBreakingPotential", _BOOL, None),
}
_EVICTION: dict[int, Field] = {
    1: ("metadata", _MSG, _OBJECT_META),
    2: ("deleteOptions", _MSG, _DELETE_OPTIONS),
}
_SCHEMAS.update(
    {
        ("policy/v1", "Eviction"): _EVICTION,
        ("policy/v1beta1", "Eviction"): _EVICTION,
        # DeleteOptions is registered in every group version; clients name one of them.
        ("v1", "DeleteOptions"): _DELETE_OPTIONS,
        ("meta.k8s.io/v1", "DeleteOptions"): _DELETE_OPTIONS,
    }
)

SUPPORTED = tuple(dict.fromkeys(kind for _, kind in _SCHEMAS))


def _map_entry(raw: bytes, value: Callable[[bytes], Any]) -> tuple[str, Any]:
    key, val = "", b""
    for number, _, item in _fields(raw):
        if number == 1:
            key = item.decode()
        elif number == 2:
            val = item
    return key, value(val)


def _base64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _strings(raw: bytes) -> list[str]:
    """The items of an ExtraValue-like message: repeated string field 1."""
    return [value.decode() for number, _, value in _fields(raw) if number == 1]


_MAP_VALUES: dict[str, Callable[[bytes], Any]] = {
    _MAP: lambda raw: raw.decode(),
    _BMAP: _base64,
    _LMAP: _strings,
}


def _message(raw: bytes, schema: dict[int, Field]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, _, value in _fields(raw):
        spec = schema.get(number)
        if spec is None:
            continue
        name, kind, nested = spec
        decoded: Any
        if kind == _STR:
            decoded = value.decode()
        elif kind == _INT:
            decoded = value - (1 << 64) if value >= 1 << 63 else value  # int64: two's complement
        elif kind == _BYTES:
            decoded = _base64(value)
        elif kind == _BOOL:
            decoded = bool(value)
        elif kind == _TIME:
            decoded = _time(value) if value else None
        elif kind == _MSG:
            decoded = _message(value, nested)
        elif kind in _MAP_VALUES:
            key, item = _map_entry(value, _MAP_VALUES[kind])
            out.setdefault(name, {})[key] = item
            continue
        else:
            continue
        if name in _REPEATED:
            out.setdefault(name, []).append(decoded)
        elif decoded not in ("", None) or kind == _MSG:
            out[name] = decoded
    return {k: v for k, v in out.items() if v not in ({}, [], None)}


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object; raises ProtobufError if unsupported."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf envelope prefix")
    api_version = kind = ""
    raw = b""
    for number, _, value in _fields(body[len(MAGIC) :]):
        if number == 1:
            for n, _, v in _fields(value):
                if n == 1:
                    api_version = v.decode()
                elif n == 2:
                    kind = v.decode()
        elif number == 2:
            raw = value
    schema = _SCHEMAS.get((api_version, kind))
    if schema is None and kind == "DeleteOptions":
        schema = _DELETE_OPTIONS
    if schema is None:
        raise ProtobufError(
            f"protobuf bodies are decoded for {', '.join(SUPPORTED)} only, not "
            f"{api_version}/{kind}; send JSON (for example `kubectl apply -f`)"
        )
    obj = _message(raw, schema)
    obj.setdefault("metadata", {})
    return {"apiVersion": api_version, "kind": kind, **obj}
