"""Field ownership (``metadata.managedFields``) and server-side apply.

A simplified model of structured-merge-diff that keeps the behaviour operators depend on:

* A *field* is a path to a leaf, a set member or a list-map entry; the schema's markers
  (``gpustack_sim/apiserver/shapes.py``) say which: granular maps are followed key by key, ``set``
  lists are
  owned value by value (``v:<value>``), ``map`` lists entry by entry (``k:{"name":...}``)
  and field by field inside an entry; atomic lists and maps are one field.
* Every non-apply write records an ``Update`` entry for its manager with the fields it
  changed, and takes those fields from other managers (no conflicts for updates).
* An apply by manager M owns exactly the fields of the applied configuration. Fields M applied
  before and no longer applies are removed from the object unless another manager owns them.
  A field owned by another manager whose value the apply would change is a conflict (409)
  unless ``force=true``, which moves ownership to M.
* A removal that leaves a custom resource's map with no field (and the applied configuration
  puts none back) makes that map ``null``, as structured-merge-diff does; a map the schema
  does not declare ``nullable`` is then refused (422), as kube-apiserver refuses it.
* Status is owned through the ``status`` subresource for kinds that have one.
* ``kubectl apply --server-side`` after client-side ``kubectl apply`` takes over, without a
  conflict, the fields whose live values still equal the last-applied annotation, and keeps
  that annotation in step with what it applies.

Paths are tuples of fieldsV1 keys (``f:spec``, ``f:labels``, ``v:"x"``, ``k:{"uid":"..."}``)
so they convert one-to-one to the ``fieldsV1`` JSON kube-apiserver stores.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpustack_sim.apiserver.errors import ApiError, invalid
from gpustack_sim.apiserver.patches import clone, clone_obj
from gpustack_sim.apiserver.shapes import Shape, shape_of

if TYPE_CHECKING:
    from gpustack_sim.apiserver.kinds import KindInfo

Path = tuple[str, ...]
KUBECTL_MANAGER = "kubectl"  # the only manager that takes over from client-side apply
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
EntryKey = tuple[str, str, str]  # (manager, operation, subresource)
_MISSING = object()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _item_key(item: Any, keys: tuple[str, ...]) -> str | None:
    """The ``k:`` element naming a list-map entry (None when a key field is missing)."""
    if not isinstance(item, Mapping) or not all(k in item for k in keys):
        return None
    return "k:" + json.dumps({k: item[k] for k in keys}, sort_keys=True, separators=(",", ":"))


def _value_key(item: Any) -> str:
    return "v:" + json.dumps(item, sort_keys=True, separators=(",", ":"))


def _walk(value: Any, shape: Shape, prefix: Path, out: set[Path]) -> None:
    """Add the fields ``value`` sets below ``prefix`` (docs/simulator.md, "Server-side apply")."""
    if isinstance(value, dict) and value and not shape.atomic_map:
        for key, child in value.items():
            _walk(child, shape.child(key), (*prefix, f"f:{key}"), out)
    elif isinstance(value, list) and value and shape.list_type == "set":
        out.update((*prefix, _value_key(item)) for item in value)
    elif isinstance(value, list) and value and shape.list_type == "map" and shape.keys:
        item_shape = shape.item()
        for item in value:
            key = _item_key(item, shape.keys)
            if key is None:  # an entry without its keys cannot be owned alone
                out.add(prefix)
                continue
            out.add((*prefix, key))
            _walk(item, item_shape, (*prefix, key), out)
    else:
        out.add(prefix)


def fieldset(obj: Mapping[str, Any], info: KindInfo, subresource: str | None) -> set[Path]:
    """The field paths ``obj`` sets, within what the endpoint (main or status) may write."""
    shape = shape_of(info)
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        # Writes through /approval (a CertificateSigningRequest's) change only status too.
        status_only = subresource in ("status", "approval")
        if key == "status" and info.has_status and not status_only:
            continue
        if status_only and key != "status":
            continue
        if key == "metadata":
            meta = value if isinstance(value, Mapping) else {}
            meta_shape = shape.child("metadata")
            for sub in ("labels", "annotations", "finalizers", "ownerReferences"):
                if sub in meta and meta[sub] is not None:
                    _walk(meta[sub], meta_shape.child(sub), ("f:metadata", f"f:{sub}"), out)
            continue
        _walk(value, shape.child(key), (f"f:{key}",), out)
    return out


def _child(cur: Any, elem: str) -> Any:
    """The value one path element below ``cur``, or ``_MISSING``."""
    tag, name = elem[:2], elem[2:]
    if tag == "f:":
        return cur[name] if isinstance(cur, Mapping) and name in cur else _MISSING
    if not isinstance(cur, list):
        return _MISSING
    wanted = json.loads(name)
    for item in cur:
        if tag == "v:" and item == wanted:
            return item
        if (
            tag == "k:"
            and isinstance(item, Mapping)
            and all(item.get(k, _MISSING) == v for k, v in wanted.items())
        ):
            return item
    return _MISSING


def get_path(obj: Any, path: Path) -> Any:
    """The value at ``path`` or ``_MISSING``."""
    cur = obj
    for elem in path:
        cur = _child(cur, elem)
        if cur is _MISSING:
            return _MISSING
    return cur


def _set_path(obj: dict[str, Any], path: Path, value: Any) -> None:
    """Set ``path`` to ``value``, creating the maps, lists and list entries on the way.

    A list entry (``k:``) is created with its key fields only; its other fields are paths of
    their own. Applying an empty map keeps the keys others own.
    """
    cur: Any = obj
    for i, elem in enumerate(path):
        last = i == len(path) - 1
        tag, name = elem[:2], elem[2:]
        if tag == "f:":
            if last:
                if not (value == {} and isinstance(cur.get(name), dict)):
                    cur[name] = value
                return
            nxt = cur.get(name)
            if not isinstance(nxt, (dict, list)):
                nxt = [] if path[i + 1][:2] in ("v:", "k:") else {}
                cur[name] = nxt
            cur = nxt
            continue
        found = _child(cur, elem)
        if found is _MISSING:
            found = json.loads(name) if tag == "k:" else value
            cur.append(found)
        if last:
            return
        cur = found


def _del_path(obj: dict[str, Any], path: Path, owned: set[Path]) -> Path | None:
    """Remove ``path`` and then any map or list the removal left empty and nobody owns.

    Returns the path of the map that held ``path`` when the removal left it with no field
    (never metadata, never a list entry): structured-merge-diff makes that map ``null``.
    """
    chain: list[Any] = [obj]
    cur: Any = obj
    for elem in path[:-1]:
        cur = _child(cur, elem)
        if cur is _MISSING:
            return None
        chain.append(cur)
    last = path[-1]
    emptied: Path | None = None
    if last.startswith("f:") and isinstance(cur, dict):
        cur.pop(last[2:], None)
        holder = path[:-1]
        if not cur and holder and holder[-1].startswith("f:") and holder != ("f:metadata",):
            emptied = holder
    elif isinstance(cur, list):
        target = _child(cur, last)
        cur[:] = [item for item in cur if item is not target]
    # prune containers emptied by the removal (never metadata itself, never list entries)
    for depth in range(len(path) - 1, 0, -1):
        container = chain[depth]
        removable = path[depth - 1].startswith("f:") and path[:depth] != ("f:metadata",)
        if container in ({}, []) and removable and path[:depth] not in owned:
            parent = chain[depth - 1]
            if isinstance(parent, dict):
                parent.pop(path[depth - 1][2:], None)
        else:
            break
    return emptied


def _refuse_nulled_maps(new: Mapping[str, Any], emptied: Iterable[Path], info: KindInfo) -> None:
    """422 when an apply's removals left a map of a custom resource with no field and the
    applied configuration put none back: structured-merge-diff (v6.4.2, ``typed/remove.go``)
    stores such a map as ``null``, which a schema that does not declare it ``nullable``
    refuses (kubernetes/kubernetes#117447). Built-in kinds decode ``null`` as empty."""
    if info.schema is None:
        return
    causes = []
    for path in sorted(set(emptied)):
        if get_path(new, path) not in ({}, _MISSING):
            continue
        schema: Any = info.schema
        for elem in path:
            schema = ((schema or {}).get("properties") or {}).get(elem[2:])
        if schema is None or schema.get("nullable", False):
            continue
        where = ".".join(elem[2:] for elem in path)
        kind = schema.get("type", "object")
        causes.append(
            (where, f'Invalid value: "null": {where} in body must be of type {kind}: "null"')
        )
    if causes:
        raise invalid(info, str((new.get("metadata") or {}).get("name") or ""), causes)


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
            tag, name = elem[:2], elem[2:]
            if tag == "f:":
                parts.append("." + name)
            elif tag == "k:":
                keys = ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(name).items())
                parts.append(f"[{keys}]")
            else:
                parts.append(f"[={name}]")
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


def _last_applied(obj: Mapping[str, Any] | None) -> str | None:
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(LAST_APPLIED)
    return value if isinstance(value, str) and value else None


def _handed_over(
    live: Mapping[str, Any],
    conflicts: list[tuple[str, str, Path]],
    manager: str,
    info: KindInfo,
) -> bool:
    """Whether client-side apply's fields pass to ``kubectl`` without a conflict.

    They do when every conflicting field is set in the live object's last-applied annotation
    with the value it still has (docs/simulator.md, "Server-side apply").
    """
    raw = _last_applied(live)
    if manager != KUBECTL_MANAGER or raw is None:
        return False
    try:
        last = json.loads(raw)
    except ValueError:
        return False
    if not isinstance(last, dict) or last.get("apiVersion") != info.api_version:
        return False
    allowed = {p for p in fieldset(last, info, None) if get_path(last, p) == get_path(live, p)}
    return all(path in allowed for _, _, path in conflicts)


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
        emptied: list[Path] = []
        for path in sorted((previous.paths if previous else set()) - applied_fields):
            if any(_within(a, path) for a in applied_fields):
                continue  # still applied, deeper down
            if any(_within(q, path) for e in others for q in e.paths):
                continue  # someone else owns it (or something below it)
            holder = _del_path(new, path, applied_fields | {q for e in others for q in e.paths})
            if holder is not None:
                emptied.append(holder)
        for path in sorted(applied_fields, key=len):
            _set_path(new, path, clone(get_path(applied, path)))
        _refuse_nulled_maps(new, emptied, info)
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
        if conflicts and not force and not _handed_over(live, conflicts, manager, info):
            raise _conflict(conflicts)
        taken = {(m, p) for m, _, p in conflicts}
        for entry in others:  # force: the conflicting fields move to this manager
            entry.paths = {q for q in entry.paths if (entry.manager, q) not in taken}
    if manager == KUBECTL_MANAGER and _last_applied(live) is not None:
        annotation = clone_obj(applied)
        annotations = (annotation.get("metadata") or {}).get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(LAST_APPLIED, None)
        new["metadata"].setdefault("annotations", {})[LAST_APPLIED] = json.dumps(
            annotation, separators=(",", ":")
        )
    mine = Entry({"manager": manager, "operation": "Apply", "subresource": sub})
    mine.paths = applied_fields
    mine.api_version = info.api_version
    mine.time = _now()
    entries[mine.key] = mine
    _store_entries(new, entries)
    return new
