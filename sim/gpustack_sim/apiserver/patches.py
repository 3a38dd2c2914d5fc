"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), as kube-apiserver applies them.

Both work on plain JSON-shaped dicts and never modify their inputs. Failures raise a 422
``ApiError`` with the reason, as the real server answers an inapplicable patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpustack_sim.apiserver.errors import ApiError, bad_request


def clone(value: Any) -> Any:
    """A deep copy of a JSON-shaped value; much faster than ``copy.deepcopy``."""
    if type(value) is dict:
        return {k: clone(v) for k, v in value.items()}
    if type(value) is list:
        return [clone(v) for v in value]
    return value


def clone_obj(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a JSON object, typed as a dict."""
    return {k: clone(v) for k, v in obj.items()}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    out = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            out[key] = merge_patch(out.get(key), value)
        else:
            out[key] = clone(value)
    return out


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, message, "Invalid")


def _parse_pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _unprocessable(f"invalid JSON pointer {path!r}: must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise _unprocessable(f"invalid array index {token!r}")
    idx = int(token)
    limit = len(container) if for_add else len(container) - 1
    if idx > limit:
        raise _unprocessable(f"array index {idx} out of bounds")
    return idx


def _missing_path(path: str) -> ApiError:
    return _unprocessable(f"doc is missing path: {path!r}")


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for token in parts[:-1]:
        if isinstance(cur, dict):
            if token not in cur:
                raise _missing_path(path)
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, for_add=False)]
        else:
            raise _missing_path(path)
    return cur


def _get(doc: Any, path: str) -> Any:
    parts = _parse_pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _missing_path(path)
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise _missing_path(path)


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _parse_pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True), value)
    else:
        raise _missing_path(path)
    return doc


def _remove(doc: Any, path: str) -> Any:
    parts = _parse_pointer(path)
    if not parts:
        raise _unprocessable("cannot remove the whole document")
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable(f"unable to remove nonexistent key: {last}: missing value")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, for_add=False)]
    else:
        raise _missing_path(path)
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 (add, remove, replace, move, copy, test) on a copy of ``doc``."""
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a JSON array of operations")
    out = clone(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"JSON patch operation {kind} at {path!r} needs a value")
        if kind == "add":
            out = _add(out, path, clone(op["value"]))
        elif kind == "remove":
            out = _remove(out, path)
        elif kind == "replace":
            _get(out, path)
            out = _add(_remove(out, path), path, clone(op["value"])) if path else op["value"]
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise bad_request(f"JSON patch operation {kind} needs 'from'")
            value = clone(_get(out, op["from"]))
            if kind == "move":
                if path.startswith(op["from"] + "/"):
                    raise _unprocessable("cannot move a value into one of its children")
                out = _remove(out, op["from"])
            out = _add(out, path, value)
        elif kind == "test":
            if _get(out, path) != op["value"]:
                raise _unprocessable(f"testing value {path} failed: test failed")
        else:
            raise bad_request(f"unknown JSON patch operation {kind!r}")
    return out
