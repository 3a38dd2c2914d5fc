"""Field ownership (``metadata.managedFields``) and server-side apply.

A simplified model of structured-merge-diff that keeps the behaviour operators depend on:

* A *field* is a path to a leaf. Maps are followed key by key (so every label, annotation and
  nested spec key is owned separately); lists are atomic leaves, except
  ``metadata.finalizers`` (owned item by item, ``v:<value>``) and
  ``metadata.ownerReferences`` (owned per owner, ``k:{"uid":...}``).
* Every non-apply write records an ``Update`` entry for its manager with the fields it
  changed, and takes those fields from other managers (no conflicts for updates).
* An apply by manager M owns exactly the fields of the applied configuration. Fields M applied
  before and no longer applies are removed from the object unless another manager owns them.
  A field owned by another manager whose value the apply would change is a conflict (409)
  unless ``force=true``, which moves ownership to M.
* Status is owned through the ``status`` subresource for kinds that have one.

Paths are tuples of fieldsV1 keys (``f:spec``, ``f:labels``, ``v:"x"``, ``k:{"uid":"..."}``)
so they convert one-to-one to the ``fieldsV1`` JSON kube-apiserver stores.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpustack_operator.sim.errors import ApiError
from gpustack_operator.sim.patches import clone, clone_obj

if TYPE_CHECKING:
    from gpustack_operator.sim.kinds import KindInfo

Path = tuple[str, ...]
EntryKey = tuple[str, str, str]  # (manager, operation, subresource)
_MISSING = object()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _walk(value: Any, prefix: Path, out: set[Path]) -> None:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            _walk(child, (*prefix, f"f:{key}"), out)
    else:
        out.add(prefix)


def fieldset(obj: Mapping[str, Any], info: KindInfo, subresource: str | None) -> set[Path]:
    """The leaf paths ``obj`` sets, within what the endpoint (main or status) may write."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "status" and info.has_status and subresource != "status":
            continue
        if subresource == "status" and key != "status":
            continue
        if key == "metadata":
            meta = value if isinstance(value, Mapping) else {}
            for sub in ("labels", "annotations"):
                if sub in meta and meta[sub] is not None:
                    _walk(meta[sub], ("f:metadata", f"f:{sub}"), out)
            for item in meta.get("finalizers") or []:
                out.add(("f:metadata", "f:finalizers", "v:" + json.dumps(item)))
            for ref in meta.get("ownerReferences") or []:
                if isinstance(ref, Mapping) and ref.get("uid"):
                    out.add(("f:metadata", "f:ownerReferences", _ref_key(ref)))
            continue
        _walk(value, (f"f:{key}",), out)
    return out


def _ref_key(ref: Mapping[str, Any]) -> str:
    return "k:" + json.dumps({"uid": ref["uid"]}, separators=(",", ":"))


def get_path(obj: Any, path: Path) -> Any:
    """The value at ``path`` or ``_MISSING``."""
    cur = obj
    for elem in path:
        tag, name = elem[:2], elem[2:]
        if tag == "f:":
            if not isinstance(cur, Mapping) or name not in cur:
                return _MISSING
            cur = cur[name]
        elif tag == "v:":
            value = json.loads(name)
            return value if isinstance(cur, list) and value in cur else _MISSING
        elif tag == "k:":
            uid = json.loads(name).get("uid")
            for item in cur if isinstance(cur, list) else []:
                if isinstance(item, Mapping) and item.get("uid") == uid:
                    return item
            return _MISSING
        else:
            return _MISSING
    return cur


def _set_path(obj: dict[str, Any], path: Path, value: Any) -> None:
    cur: Any = obj
    for i, elem in enumerate(path):
        tag, name = elem[:2], elem[2:]
        last = i == len(path) - 1
        if tag == "f:":
            if last:
                if value == {} and isinstance(cur.get(name), dict):
                    return  # applying an empty map keeps the keys others own
                cur[name] = value
                return
            nxt = cur.get(name)
            if not isinstance(nxt, (dict, list)):
                nxt = [] if path[i + 1][:2] in ("v:", "k:") else {}
                cur[name] = nxt
            cur = nxt
        elif tag == "v:":
            item = json.loads(name)
            if item not in cur:
                cur.append(item)
            return
        elif tag == "k:":
            uid = json.loads(name).get("uid")
            for idx, item in enumerate(cur):
                if isinstance(item, Mapping) and item.get("uid") == uid:
                    cur[idx] = value
                    return
            cur.append(value)
            return


def _del_path(obj: dict[str, Any], path: Path, owned: set[Path]) -> None:
    """Remove ``path`` and then any map or list the removal left empty and nobody owns."""
    chain: list[Any] = [obj]
    cur: Any = obj
    for elem in path[:-1]:
        name = elem[2:]
        if not isinstance(cur, Mapping) or name not in cur:
            return
        cur = cur[name]
        chain.append(cur)
    tag, name = path[-1][:2], path[-1][2:]
    if tag == "f:" and isinstance(cur, dict):
        cur.pop(name, None)
    elif tag == "v:" and isinstance(cur, list):
        value = json.loads(name)
        if value in cur:
            cur.remove(value)
    elif tag == "k:" and isinstance(cur, list):
        uid = json.loads(name).get("uid")
        cur[:] = [i for i in cur if not (isinstance(i, Mapping) and i.get("uid") == uid)]
    # prune containers emptied by the removal (never metadata itself)
    for depth in range(len(path) - 1, 0, -1):
        container = chain[depth]
        if container in ({}, []) and path[:depth] != ("f:metadata",) and path[:depth] not in owned:
            parent = chain[depth - 1]
            if isinstance(parent, dict):
                parent.pop(path[depth - 1][2:], None)
        else:
            break


def _within(path: Path, ancestor: Path) -> bool:
    """Whether ``path`` is ``ancestor`` or lies below it."""
    return path[: len(ancestor)] == ancestor


def _touches(owned: Path, applied: Path, live: Any) -> bool:
    """Whether applying ``applied`` may change the field another manager owns at ``owned``.

    Owning a map (an empty map applied as a leaf) does not own the keys inside it, so adding
    keys below an owned map is no conflict.
    """
    if _within(owned, applied):
        return True
    return _within(applied, owned) and not isinstance(get_path(live, owned), dict)


def _parse_fields(node: Mapping[str, Any], prefix: Path, out: set[Path]) -> None:
    children = [k for k in node if k != "."]
    if "." in node or not children:
        out.add(prefix)
    for key in children:
        child = node[key]
        _parse_fields(child if isinstance(child, Mapping) else {}, (*prefix, key), out)


def _render_fields(paths: Iterable[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    ordered = sorted(paths, key=len)
    for path in ordered:
        cur = root
        for elem in path:
            cur = cur.setdefault(elem, {})
    for path in ordered:  # a path that is also a parent of another needs its "." marker
        cur = root
        for elem in path:
            cur = cur[elem]
        if cur and "." not in cur:
            cur["."] = {}
    return root


class Entry:
    """One ``managedFields`` entry, with its fields as a set of paths."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.manager = str(raw.get("manager", ""))
        self.operation = str(raw.get("operation", "Update"))
        self.subresource = str(raw.get("subresource", ""))
        self.api_version = str(raw.get("apiVersion", ""))
        self.time = str(raw.get("time", ""))
        self.paths: set[Path] = set()
        fields_v1 = raw.get("fieldsV1")
        if isinstance(fields_v1, Mapping) and fields_v1:
            _parse_fields(fields_v1, (), self.paths)
            self.paths.discard(())

    @property
    def key(self) -> EntryKey:
        return (self.manager, self.operation, self.subresource)

    def render(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": _render_fields(self.paths),
        }
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def _entries(obj: Mapping[str, Any] | None) -> dict[EntryKey, Entry]:
    raw = ((obj or {}).get("metadata") or {}).get("managedFields") or []
    out: dict[EntryKey, Entry] = {}
    for item in raw:
        if isinstance(item, Mapping):
            entry = Entry(item)
            out[entry.key] = entry
    return out


def _store_entries(obj: dict[str, Any], entries: dict[EntryKey, Entry]) -> None:
    rendered = [e.render() for e in entries.values() if e.paths]
    if rendered:
        obj["metadata"]["managedFields"] = rendered
    else:
        obj["metadata"].pop("managedFields", None)


def record_update(
    old: Mapping[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    info: KindInfo,
    subresource: str | None,
) -> None:
    """Record a non-apply write by ``manager`` in ``new``'s managedFields (in place)."""
    entries = _entries(old)
    new_fields = fieldset(new, info, subresource)
    old_fields = fieldset(old, info, subresource) if old is not None else set()
    changed = {p for p in new_fields if get_path(old, p) != get_path(new, p)} if old else new_fields
    removed = old_fields - new_fields
    for path in removed:  # gone, or now a map whose new keys the writer owns
        for entry in entries.values():
            entry.paths.discard(path)
    sub = subresource or ""
    for entry in entries.values():
        entry.paths = {p for p in entry.paths if not any(_within(p, c) for c in changed)}
    if changed:
        mine = entries.get((manager, "Update", sub))
        if mine is None:
            mine = entries[(manager, "Update", sub)] = Entry(
                {"manager": manager, "operation": "Update", "subresource": sub}
            )
        mine.paths |= changed
        mine.api_version = info.api_version
        mine.time = _now()
    _store_entries(new, entries)


def _conflict(conflicts: list[tuple[str, str, Path]]) -> ApiError:
    def dotted(path: Path) -> str:
        parts = []
        for elem in path:
            if elem.startswith("f:"):
                parts.append("." + elem[2:])
            else:
                parts.append(f"[{elem[2:]}]")
        return "".join(parts)

    lines = [f'conflict with "{m}" using {av}: {dotted(p)}' for m, av, p in conflicts]
    count = len(conflicts)
    noun = "conflict" if count == 1 else "conflicts"
    message = f"Apply failed with {count} {noun}: " + "\n".join(lines)
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "{m}" using {av}',
            "field": dotted(p),
        }
        for m, av, p in conflicts
    ]
    return ApiError(409, message, "Conflict", {"causes": causes})


def apply(
    live: Mapping[str, Any] | None,
    applied: Mapping[str, Any],
    manager: str,
    info: KindInfo,
    subresource: str | None,
    force: bool,
) -> dict[str, Any]:
    """The object after ``manager`` applies ``applied`` onto ``live`` (None: a create).

    Returns a new object with managedFields updated; raises a 409 ``ApiError`` listing the
    conflicting managers and fields unless ``force``.
    """
    sub = subresource or ""
    applied_fields = fieldset(applied, info, subresource)
    if live is None:
        new = clone_obj(applied)
        if info.has_status and subresource != "status":
            new.pop("status", None)
        new.setdefault("metadata", {})
        entries: dict[EntryKey, Entry] = {}
    else:
        new = clone_obj(live)
        entries = _entries(live)
        previous = entries.get((manager, "Apply", sub))
        others = [e for k, e in entries.items() if k != (manager, "Apply", sub)]
        for path in sorted((previous.paths if previous else set()) - applied_fields):
            if any(_within(a, path) for a in applied_fields):
                continue  # still applied, deeper down
            if any(_within(q, path) for e in others for q in e.paths):
                continue  # someone else owns it (or something below it)
            _del_path(new, path, applied_fields | {q for e in others for q in e.paths})
        for path in sorted(applied_fields, key=len):
            _set_path(new, path, clone(get_path(applied, path)))
        conflicts: list[tuple[str, str, Path]] = []
        for entry in others:
            for owned in sorted(entry.paths):
                if not any(_touches(owned, a, live) for a in applied_fields):
                    continue
                before, after = get_path(live, owned), get_path(new, owned)
                if isinstance(before, dict):  # owning a map is owning its presence only
                    differs = not isinstance(after, dict)
                else:
                    differs = before != after
                if differs:
                    conflicts.append((entry.manager, entry.api_version, owned))
        if conflicts and not force:
            raise _conflict(conflicts)
        taken = {(m, p) for m, _, p in conflicts}
        for entry in others:  # force: the conflicting fields move to this manager
            entry.paths = {q for q in entry.paths if (entry.manager, q) not in taken}
    mine = Entry({"manager": manager, "operation": "Apply", "subresource": sub})
    mine.paths = applied_fields
    mine.api_version = info.api_version
    mine.time = _now()
    entries[mine.key] = mine
    _store_entries(new, entries)
    return new
