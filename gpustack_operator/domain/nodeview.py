"""Defensive accessors for Node objects given as plain dicts (as the API or a file gives them).

Every accessor tolerates missing or mistyped fields, so a hand-written manifest or a partial
object from a cache never raises; scalar label values (``25``, ``true`` in YAML) become
strings the way ``kubectl`` would have stored them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_EMPTY: Mapping[str, Any] = {}


def _mapping(value: object) -> Mapping[str, Any]:
    # ``type(...) is dict`` first: decoded JSON is always a plain dict, and the ABC check
    # behind ``isinstance(..., Mapping)`` costs several times more on these hot paths.
    if type(value) is dict:
        return value
    return value if isinstance(value, Mapping) else _EMPTY


def _as_text(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def string_map(value: object) -> dict[str, str]:
    """A ``{str: str}`` view of a labels/annotations field; other entries are dropped."""
    mapping = _mapping(value)
    if all(type(k) is str and type(v) is str for k, v in mapping.items()):
        return dict(mapping)
    result: dict[str, str] = {}
    for key, raw in mapping.items():
        text = _as_text(raw)
        if isinstance(key, str) and text is not None:
            result[key] = text
    return result


def metadata(obj: object) -> Mapping[str, Any]:
    if type(obj) is dict:
        meta = obj.get("metadata")
        if type(meta) is dict:
            return meta
    return _mapping(_mapping(obj).get("metadata"))


def name_of(obj: object) -> str:
    name = metadata(obj).get("name")
    return name if isinstance(name, str) else ""


def uid_of(obj: object) -> str:
    uid = metadata(obj).get("uid")
    return uid if isinstance(uid, str) else ""


def labels_of(obj: object) -> dict[str, str]:
    return string_map(metadata(obj).get("labels"))


def label_of(obj: object, key: str) -> str | None:
    """One label's value as :func:`labels_of` gives it, without copying the whole map
    (hot paths ask for one key of thousands of Nodes)."""
    return _as_text(_mapping(metadata(obj).get("labels")).get(key))


def annotations_of(obj: object) -> dict[str, str]:
    return string_map(metadata(obj).get("annotations"))


def is_deleting(obj: object) -> bool:
    return bool(metadata(obj).get("deletionTimestamp"))


def status_field(obj: object, field: str) -> dict[str, object]:
    """``status.capacity`` / ``status.allocatable`` as a plain dict (values unparsed)."""
    section = _mapping(_mapping(_mapping(obj).get("status")).get(field))
    return {k: v for k, v in section.items() if isinstance(k, str)}


def has_status(obj: object) -> bool:
    return isinstance(_mapping(obj).get("status"), Mapping)
