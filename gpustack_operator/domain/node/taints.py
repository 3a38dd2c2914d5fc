"""A node's dedication taints and the tolerations a flavor needs for them (docs/naming.md,
docs/topology.md): read from one Node, so the node model and the flavors share them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from pydantic import BaseModel, ConfigDict

from gpustack_operator.domain.node.availability import is_lifecycle_taint

DEDICATION_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})


TolerationPolicy = tuple[str, ...] | None
"""Which dedication taints flavors tolerate: ``None`` every one common to the flavor's nodes
(the default), else only those with one of these keys (``()``: none)."""


def dedication_taints(node: object) -> frozenset[tuple[str, str, str]]:
    """The node's ``NoSchedule``/``NoExecute`` taints as (key, value, effect), lifecycle
    taints left out."""
    spec = node.get("spec") if isinstance(node, Mapping) else None
    taints = spec.get("taints") if isinstance(spec, Mapping) else None
    out: set[tuple[str, str, str]] = set()
    for taint in taints if isinstance(taints, list) else []:
        if not isinstance(taint, Mapping):
            continue
        key, effect = str(taint.get("key") or ""), str(taint.get("effect") or "")
        if key and effect in DEDICATION_EFFECTS and not is_lifecycle_taint(key):
            out.add((key, str(taint.get("value") or ""), effect))
    return frozenset(out)


def flavor_tolerations(
    nodes: Iterable[object], policy: TolerationPolicy = None
) -> tuple[Toleration, ...]:
    """What a flavor's pods need to land on any of *nodes*: the dedication taints all of them
    carry (a taint on some nodes only leaves the others to the pods), filtered by *policy*,
    sorted. Deterministic in the set of nodes, whatever their order."""
    common: frozenset[tuple[str, str, str]] | None = None
    for node in nodes:
        taints = dedication_taints(node)
        common = taints if common is None else common & taints
    if not common:
        return ()
    return tuple(
        Toleration(key=k, value=v, effect=e)
        for k, v, e in sorted(common)
        if policy is None or k in policy
    )


class Toleration(BaseModel):
    """One toleration of a ResourceFlavor: ``Equal`` with a value, else ``Exists``."""

    model_config = ConfigDict(frozen=True)

    key: str
    effect: str
    value: str = ""

    def manifest(self) -> dict[str, str]:
        if self.value:
            return {
                "key": self.key,
                "operator": "Equal",
                "value": self.value,
                "effect": self.effect,
            }
        return {"key": self.key, "operator": "Exists", "effect": self.effect}
