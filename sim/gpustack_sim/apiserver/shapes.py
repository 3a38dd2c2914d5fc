"""How server-side apply sees an object's maps and lists (the schema's merge markers).

Field ownership is tracked per leaf, per map key and per list entry, as structured-merge-diff
does; which of these applies depends on the schema (docs/simulator.md, "Server-side apply"):

* a list is ``atomic`` (one field), a ``set`` (each value owned alone, ``v:<value>``) or a
  ``map`` keyed by ``x-kubernetes-list-map-keys`` (each entry owned alone,
  ``k:{"name":"a"}``, and its fields below it); a list without a marker is atomic;
* a map is ``granular`` (each key owned alone) unless ``x-kubernetes-map-type: atomic``.

Custom resources take the markers from their CRD's ``openAPIV3Schema``; built-in kinds from
their strategic merge patch metadata (a merge key makes a list map, merged primitives a set),
which is how the API server derives the built-in schema when the Go type carries no list
type; ``metadata`` is the same for every kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpustack_sim.apiserver import strategic
from gpustack_sim.apiserver.kinds import KindInfo

__all__ = ["Shape", "shape_of"]


@dataclass(frozen=True)
class Shape:
    """The merge markers of one node of a schema."""

    list_type: str = "atomic"  # atomic | set | map (for lists)
    keys: tuple[str, ...] = ()  # x-kubernetes-list-map-keys of a map list
    atomic_map: bool = False  # x-kubernetes-map-type: atomic
    fields: Mapping[str, Shape] = field(default_factory=dict)  # named properties
    values: Shape | None = None  # list items or additionalProperties

    def child(self, name: str) -> Shape:
        """The shape of map key or property *name* (deduced when the schema is silent)."""
        return self.fields.get(name) or self.values or DEDUCED

    def item(self) -> Shape:
        """The shape of this list's items."""
        return self.values or DEDUCED


DEDUCED = Shape()  # no schema: maps granular, lists atomic (structured-merge-diff's "deduced")

_METADATA = Shape(
    fields={
        "finalizers": Shape(list_type="set"),
        "ownerReferences": Shape(list_type="map", keys=("uid",)),
    }
)


def _from_openapi(schema: Mapping[str, Any]) -> Shape:
    fields = {
        name: _from_openapi(sub)
        for name, sub in (schema.get("properties") or {}).items()
        if isinstance(sub, Mapping)
    }
    values: Shape | None = None
    items = schema.get("items")
    extra = schema.get("additionalProperties")
    if isinstance(items, Mapping):
        values = _from_openapi(items)
    elif isinstance(extra, Mapping):
        values = _from_openapi(extra)
    return Shape(
        list_type=str(schema.get("x-kubernetes-list-type") or "atomic"),
        keys=tuple(schema.get("x-kubernetes-list-map-keys") or ()),
        atomic_map=schema.get("x-kubernetes-map-type") == "atomic",
        fields=fields,
        values=values,
    )


def _from_patch_metadata(meta: strategic.PatchField) -> Shape:
    children = {name: _from_patch_metadata(sub) for name, sub in meta.children.items()}
    if meta.merge_key:
        item = Shape(fields=children)
        return Shape(list_type="map", keys=(meta.merge_key,), values=item)
    if meta.merge_primitives:
        return Shape(list_type="set")
    return Shape(fields=children)


def _with_metadata(shape: Shape) -> Shape:
    return Shape(fields={**shape.fields, "metadata": _METADATA}, values=shape.values)


_CACHE: dict[int, tuple[object, Shape]] = {}


def shape_of(info: KindInfo) -> Shape:
    """The merge markers of *info*'s objects (cached per schema)."""
    source: object = info.schema if info.schema is not None else info
    hit = _CACHE.get(id(source))
    if hit is not None and hit[0] is source:
        return hit[1]
    if info.schema is not None:
        shape = _from_openapi(info.schema)
    else:
        meta = strategic.patch_metadata(info)
        shape = _from_patch_metadata(meta) if meta is not None else DEDUCED
    shape = _with_metadata(shape)
    _CACHE[id(source)] = (source, shape)
    return shape
