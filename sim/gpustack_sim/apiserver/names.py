"""Object-metadata validation the real API server applies to every kind.

Names (DNS-1123 subdomain, label or path segment, by kind), label keys and values, and
annotation keys. Messages follow kube-apiserver's wording so clients that surface them read
the same as against a real cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpustack_sim.apiserver.kinds import KindInfo

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
    "[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_QUALIFIED_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?"
    "[A-Za-z0-9])?')"
)

# Kinds whose names only need to be valid path segments (RBAC allows "system:foo").
_PATH_SEGMENT_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
# Kinds whose names must be DNS-1123 labels.
_LABEL_NAME_KINDS = {"Namespace", "Service"}

MAX_ANNOTATIONS_BYTES = 256 * 1024


def _invalid(value: Any, msg: str) -> str:
    return f"Invalid value: {value!r}: {msg}".replace("'", '"', 2)


def name_errors(info: KindInfo, name: str) -> list[str]:
    """Why ``name`` is not a valid ``metadata.name`` for ``info`` (empty when valid)."""
    if info.kind in _PATH_SEGMENT_KINDS:
        if name in (".", "..") or "/" in name or "%" in name:
            return [_invalid(name, 'may not be "." or ".." and may not contain "/" or "%"')]
        return []
    if info.kind in _LABEL_NAME_KINDS:
        errs = []
        if len(name) > 63:
            errs.append(_invalid(name, "must be no more than 63 characters"))
        if not _DNS1123_LABEL.match(name):
            errs.append(_invalid(name, _LABEL_MSG))
        return errs
    errs = []
    if len(name) > 253:
        errs.append(_invalid(name, "must be no more than 253 characters"))
    if not _DNS1123_SUBDOMAIN.match(name):
        errs.append(_invalid(name, _SUBDOMAIN_MSG))
    return errs


def qualified_name_errors(key: str) -> list[str]:
    """Why ``key`` is not a qualified name (``[prefix/]name``), as label/annotation keys must be."""
    prefix, slash, name = key.rpartition("/")
    errs: list[str] = []
    if slash and not prefix:
        errs.append("prefix part must be non-empty")
    elif prefix:
        if len(prefix) > 253:
            errs.append("prefix part must be no more than 253 characters")
        if not _DNS1123_SUBDOMAIN.match(prefix):
            errs.append(f"prefix part {_SUBDOMAIN_MSG}")
    if not name:
        errs.append("name part must be non-empty")
    else:
        if len(name) > 63:
            errs.append("name part must be no more than 63 characters")
        if not _QUALIFIED_NAME.match(name):
            errs.append(_QUALIFIED_MSG)
    return errs


def metadata_errors(info: KindInfo, meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, message)`` for every invalid name, label or annotation in ``meta``."""
    out: list[tuple[str, str]] = []
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        out.append(("metadata.name", "Required value: name or generateName is required"))
    else:
        out += [("metadata.name", e) for e in name_errors(info, name)]
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, Mapping):
        out.append(("metadata.labels", "Invalid value: must be a map of strings"))
    for key, value in (labels or {}).items():
        out += [
            ("metadata.labels", f"Invalid value: {key!r}: {e}".replace("'", '"', 2))
            for e in qualified_name_errors(str(key))
        ]
        if not isinstance(value, str):
            out.append((f"metadata.labels[{key}]", "Invalid value: label values must be strings"))
            continue
        if len(value) > 63:
            out.append(("metadata.labels", _invalid(value, "must be no more than 63 characters")))
        if not _LABEL_VALUE.match(value):
            out.append(("metadata.labels", _invalid(value, _VALUE_MSG)))
    annotations = meta.get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        out.append(("metadata.annotations", "Invalid value: must be a map of strings"))
    total = 0
    for key, value in (annotations or {}).items():
        out += [
            ("metadata.annotations", f"Invalid value: {key!r}: {e}".replace("'", '"', 2))
            for e in qualified_name_errors(str(key))
        ]
        if not isinstance(value, str):
            out.append(
                (f"metadata.annotations[{key}]", "Invalid value: annotation values must be strings")
            )
            continue
        total += len(key) + len(value)
    if total > MAX_ANNOTATIONS_BYTES:
        out.append(("metadata.annotations", "Too long: must have at most 262144 bytes"))
    return out
