"""Kubernetes strategic merge patch (``application/strategic-merge-patch+json``) for the sim.

kubectl sends strategic merge patches for built-in kinds (``kubectl apply`` client-side,
``kubectl label``, ``kubectl annotate``); the real API server merges them using the patch
metadata of the Go types (``patchStrategy`` / ``patchMergeKey`` struct tags). This module
carries that metadata for the fields the project and its tests touch, and applies the
directives (``$patch``, ``$retainKeys``, ``$deleteFromPrimitiveList/<f>``,
``$setElementOrder/<f>``). Fields without metadata behave as the server treats them: maps
merge recursively, lists are replaced. Custom resources have no patch metadata, and the real
server refuses strategic merge patches for them with 415; so does this one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpustack_sim.apiserver.kinds import KindInfo

__all__ = [
    "BUILTIN_GROUPS",
    "PatchField",
    "StrategicMergePatchError",
    "StrategicMergeUnsupportedError",
    "patch_metadata",
    "strategic_merge_patch",
    "supports_strategic_merge",
]

# API groups served by kube-apiserver itself (not by CRDs): only these carry patch metadata.
BUILTIN_GROUPS: frozenset[str] = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
    }
)

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"


class StrategicMergePatchError(ValueError):
    """A patch the server cannot apply; ``status_code`` is the HTTP answer the server gives."""

    status_code = 400
    reason = "BadRequest"


class StrategicMergeUnsupportedError(StrategicMergePatchError):
    """Strategic merge patch sent for a kind without patch metadata (a custom resource)."""

    status_code = 415
    reason = "UnsupportedMediaType"


@dataclass(frozen=True)
class _Field:
    """Patch metadata of one field: how lists merge and what its children are."""

    merge_key: str | None = None  # list of maps merged by this key
    merge_primitives: bool = False  # list of scalars merged as a set (e.g. finalizers)
    retain_keys: bool = False  # map honours $retainKeys (union types such as volume sources)
    children: Mapping[str, _Field] = field(default_factory=dict)


def _keyed(key: str, **children: _Field) -> _Field:
    return _Field(merge_key=key, children=children)


def _map(**children: _Field) -> _Field:
    return _Field(children=children)


_PRIMITIVE_SET = _Field(merge_primitives=True)

_METADATA = _map(ownerReferences=_keyed("uid"), finalizers=_PRIMITIVE_SET)

_CONTAINER = _Field(
    merge_key="name",
    children={
        "env": _keyed("name"),
        "ports": _keyed("containerPort"),
        "volumeMounts": _keyed("mountPath"),
        "volumeDevices": _keyed("devicePath"),
        "resizePolicy": _Field(),
    },
)

_POD_SPEC = _map(
    containers=_CONTAINER,
    initContainers=_CONTAINER,
    ephemeralContainers=_CONTAINER,
    volumes=_Field(merge_key="name", retain_keys=True),
    imagePullSecrets=_keyed("name"),
    hostAliases=_keyed("ip"),
    resourceClaims=_keyed("name"),
    schedulingGates=_keyed("name"),
    topologySpreadConstraints=_keyed("topologyKey"),
)

_POD_TEMPLATE = _map(metadata=_METADATA, spec=_POD_SPEC)

_CONDITIONS = _keyed("type")

_WORKLOAD = _map(
    metadata=_METADATA,
    spec=_map(
        template=_POD_TEMPLATE,
        strategy=_Field(retain_keys=True),
        updateStrategy=_Field(retain_keys=True),
    ),
    status=_map(conditions=_CONDITIONS),
)

_BY_KIND: Mapping[tuple[str, str], _Field] = {
    ("", "Pod"): _map(
        metadata=_METADATA,
        spec=_POD_SPEC,
        status=_map(
            conditions=_CONDITIONS,
            podIPs=_keyed("ip"),
            hostIPs=_keyed("ip"),
        ),
    ),
    ("", "Node"): _map(
        metadata=_METADATA,
        spec=_map(podCIDRs=_PRIMITIVE_SET),
        status=_map(conditions=_CONDITIONS, addresses=_keyed("type")),
    ),
    ("", "Service"): _map(
        metadata=_METADATA,
        spec=_map(ports=_keyed("port")),
        status=_map(conditions=_CONDITIONS),
    ),
    ("", "Namespace"): _map(metadata=_METADATA, status=_map(conditions=_CONDITIONS)),
    ("", "ReplicationController"): _WORKLOAD,
    ("apps", "Deployment"): _WORKLOAD,
    ("apps", "DaemonSet"): _WORKLOAD,
    ("apps", "StatefulSet"): _WORKLOAD,
    ("apps", "ReplicaSet"): _WORKLOAD,
    ("batch", "Job"): _WORKLOAD,
}


PatchField = _Field  # the public name of one field's patch metadata


def patch_metadata(kind: KindInfo) -> PatchField | None:
    """The patch metadata of a built-in *kind* (None for custom resources)."""
    if not supports_strategic_merge(kind):
        return None
    return _BY_KIND.get((kind.group, kind.kind), _map(metadata=_METADATA))


def supports_strategic_merge(kind: KindInfo) -> bool:
    """Whether the real API server accepts strategic merge patches for *kind*."""
    return kind.group in BUILTIN_GROUPS


def strategic_merge_patch(
    original: Mapping[str, Any], patch: Mapping[str, Any], kind: KindInfo
) -> dict[str, Any]:
    """Apply *patch* to *original* the way kube-apiserver does for *kind*; returns a new dict.

    Raises :class:`StrategicMergeUnsupportedError` (415) for custom resources and
    :class:`StrategicMergePatchError` (400) for a malformed patch. Neither input is modified.
    """
    if not supports_strategic_merge(kind):
        raise StrategicMergeUnsupportedError(
            f"the body of the request was in an unknown format - accepted media types include: "
            f"application/json-patch+json, application/merge-patch+json, "
            f"application/apply-patch+yaml (strategic merge patch is not supported for "
            f"{kind.group_resource}, a custom resource)"
        )
    if not isinstance(patch, Mapping):
        raise StrategicMergePatchError("a strategic merge patch must be a JSON object")
    meta = _BY_KIND.get((kind.group, kind.kind), _map(metadata=_METADATA))
    merged = _merge_map(copy.deepcopy(dict(original)), patch, meta, "")
    if merged is None:
        raise StrategicMergePatchError("a strategic merge patch may not delete the whole object")
    return merged


def _merge_map(
    original: dict[str, Any], patch: Mapping[str, Any], meta: _Field, path: str
) -> dict[str, Any] | None:
    """Merge *patch* into *original* (owned, mutated). None means "delete this map"."""
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        replaced: dict[str, Any] = _strip_directives(patch)
        return replaced
    if directive not in (None, "merge"):
        raise StrategicMergePatchError(
            f"{path or '<root>'}: unknown $patch directive {directive!r}"
        )

    retain = patch.get(_RETAIN_KEYS)
    if retain is not None:
        if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
            raise StrategicMergePatchError(f"{path or '<root>'}: $retainKeys must list strings")
        for key in [k for k in original if k not in retain]:
            del original[key]

    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS):
            continue
        if key.startswith(_SET_ORDER):
            if not isinstance(value, list):
                raise StrategicMergePatchError(f"{_join(path, key)}: must be a list")
            orders[key[len(_SET_ORDER) :]] = value
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            name = key[len(_DELETE_PRIMITIVE) :]
            current = original.get(name)
            if not isinstance(value, list):
                raise StrategicMergePatchError(f"{_join(path, key)}: must be a list")
            if isinstance(current, list):
                original[name] = [v for v in current if v not in value]
            continue
        child_meta = meta.children.get(key, _Field())
        child_path = _join(path, key)
        if value is None:
            original.pop(key, None)
        elif isinstance(value, Mapping):
            current = original.get(key)
            base = copy.deepcopy(current) if isinstance(current, dict) else {}
            merged = _merge_map(base, value, child_meta, child_path)
            if merged is None:
                original.pop(key, None)
            else:
                original[key] = merged
        elif isinstance(value, list):
            current = original.get(key)
            original[key] = _merge_list(
                current if isinstance(current, list) else [], value, child_meta, child_path
            )
        else:
            original[key] = value

    for name, order in orders.items():
        if isinstance(original.get(name), list):
            original[name] = _apply_order(original[name], order, meta.children.get(name))
    return original


def _merge_list(original: list[Any], patch: list[Any], meta: _Field, path: str) -> list[Any]:
    if meta.merge_primitives:
        if any(isinstance(v, Mapping) for v in patch):
            raise StrategicMergePatchError(f"{path}: expected a list of scalars")
        out = list(original)
        out.extend(v for v in patch if v not in out)
        return out
    key = meta.merge_key
    if key is None:
        return [_strip_directives(v) if isinstance(v, Mapping) else v for v in patch]

    if any(isinstance(v, Mapping) and v.get(_DIRECTIVE) == "replace" for v in patch):
        return [
            _strip_directives(v)
            for v in patch
            if isinstance(v, Mapping) and v.get(_DIRECTIVE) != "replace"
        ]
    out = [copy.deepcopy(v) for v in original]
    for index, item in enumerate(patch):
        item_path = f"{path}[{index}]"
        if not isinstance(item, Mapping):
            raise StrategicMergePatchError(f"{item_path}: expected an object with key {key!r}")
        if key not in item:
            raise StrategicMergePatchError(f"{item_path}: map does not contain merge key {key!r}")
        position = next(
            (i for i, v in enumerate(out) if isinstance(v, Mapping) and v.get(key) == item[key]),
            None,
        )
        if item.get(_DIRECTIVE) == "delete":
            out = [v for v in out if not (isinstance(v, Mapping) and v.get(key) == item[key])]
            continue
        if position is None:
            merged = _merge_map({}, item, meta, item_path)
            if merged is not None:
                out.append(merged)
        else:
            merged = _merge_map(out[position], item, meta, item_path)
            if merged is None:
                del out[position]
            else:
                out[position] = merged
    return out


def _apply_order(items: list[Any], order: list[Any], meta: _Field | None) -> list[Any]:
    """Order *items* as ``$setElementOrder`` says; items it does not name keep their place after.

    The server interleaves server-only items by their former neighbours; putting them after
    the named ones is a simplification that keeps every item and the named order.
    """
    key = meta.merge_key if meta else None

    def ident(value: Any) -> Any:
        if key and isinstance(value, Mapping):
            return ("k", repr(value.get(key)))
        return ("v", repr(value))

    rank = {ident(v): i for i, v in enumerate(order)}
    named = sorted((v for v in items if ident(v) in rank), key=lambda v: rank[ident(v)])
    return named + [v for v in items if ident(v) not in rank]


def _strip_directives(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not (k in (_DIRECTIVE, _RETAIN_KEYS) or k.startswith(("$setElementOrder/",)))
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
