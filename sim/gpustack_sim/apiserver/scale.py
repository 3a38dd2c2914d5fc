"""The ``/scale`` subresource: an ``autoscaling/v1`` Scale view of an object's replicas.

``kubectl scale`` and autoscalers read and write replicas through it. Deployments,
ReplicaSets, StatefulSets and ReplicationControllers have it, and every custom resource whose
CRD version declares ``subresources.scale``; the paths come from that declaration
(docs/simulator.md, "Server parts").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpustack_sim.apiserver.errors import ApiError, invalid
from gpustack_sim.apiserver.kinds import KindInfo
from gpustack_sim.apiserver.patches import clone_obj

__all__ = ["read_scale", "scale_paths", "with_replicas"]

_REPLICAS = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".spec.selector",
}
# A ReplicationController's selector is a plain label map, not a LabelSelector.
_LABEL_MAP = "labelSelectorIsMap"
_BUILTIN: Mapping[tuple[str, str], Mapping[str, Any]] = {
    ("apps", "Deployment"): _REPLICAS,
    ("apps", "ReplicaSet"): _REPLICAS,
    ("apps", "StatefulSet"): _REPLICAS,
    ("", "ReplicationController"): {**_REPLICAS, _LABEL_MAP: True},
}


def scale_paths(info: KindInfo) -> Mapping[str, Any] | None:
    """Where *info*'s replicas live, or None when it has no ``/scale``."""
    return info.scale if info.scale is not None else _BUILTIN.get((info.group, info.kind))


def _keys(path: str) -> list[str]:
    return [part for part in path.split(".") if part]


def _get(obj: Mapping[str, Any], path: str) -> Any:
    cur: Any = obj
    for key in _keys(path):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def read_scale(info: KindInfo, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The Scale object of *obj*."""
    paths = scale_paths(info) or {}
    meta = obj.get("metadata") or {}
    status: dict[str, Any] = {"replicas": int(_get(obj, paths["statusReplicasPath"]) or 0)}
    selector = _get(obj, str(paths.get("labelSelectorPath") or ""))
    if isinstance(selector, Mapping):
        selector = selector_string({"matchLabels": selector} if paths.get(_LABEL_MAP) else selector)
    if selector:
        status["selector"] = selector
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": int(_get(obj, paths["specReplicasPath"]) or 0)},
        "status": status,
    }


def with_replicas(info: KindInfo, obj: Mapping[str, Any], scale: Any) -> dict[str, Any]:
    """A copy of *obj* with the replicas a written Scale asks for (422 if it names none)."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    replicas = (scale.get("spec") or {}).get("replicas") if isinstance(scale, Mapping) else None
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise invalid(
            info,
            name,
            [("spec.replicas", f"Invalid value: {replicas!r}: must be greater than or equal to 0")],
        )
    paths = scale_paths(info) or {}
    new = clone_obj(obj)
    keys = _keys(paths["specReplicasPath"])
    cur = new
    for key in keys[:-1]:
        nxt = cur.get(key)
        if not isinstance(nxt, dict):
            raise ApiError(422, f"{paths['specReplicasPath']} cannot be set on {name}", "Invalid")
        cur = nxt
    cur[keys[-1]] = replicas
    return new


def selector_string(selector: Mapping[str, Any]) -> str:
    """A LabelSelector in the text form Scale's ``status.selector`` carries."""
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "Exists":
            terms.append(str(key))
        elif op == "DoesNotExist":
            terms.append(f"!{key}")
        else:
            terms.append(f"{key} {str(op).lower()} ({','.join(sorted(values))})")
    return ",".join(terms)
