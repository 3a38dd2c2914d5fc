"""API rules of built-in kinds that their published schema cannot express: status filled in
on create, and the validation messages of the checks clients most often trip
(docs/simulator.md, "Built-in kinds").

Types, unknown fields and required fields come from the published OpenAPI
(``gpustack_sim/apiserver/builtinschemas.py``); these are the few rules of kube-apiserver's own
validation and
defaulting beyond it that the simulator reproduces, with the API's wording.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from gpustack_sim.apiserver.kinds import KindInfo
from gpustack_sim.apiserver.poddefaults import default_new_pod

__all__ = ["causes", "defaults_on_create", "qos_class"]

IMMUTABLE = "field is immutable when `immutable` is set"
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIG_KEY_MESSAGE = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')"
)
_POD_TEMPLATE_KINDS = {
    ("", "ReplicationController"),
    ("apps", "Deployment"),
    ("apps", "DaemonSet"),
    ("apps", "StatefulSet"),
    ("apps", "ReplicaSet"),
    ("batch", "Job"),
}
_QOS_RESOURCES = ("cpu", "memory")


def _containers(spec: Any) -> list[Mapping[str, Any]]:
    if not isinstance(spec, Mapping):
        return []
    return [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]


def qos_class(pod_spec: Mapping[str, Any]) -> str:
    """Guaranteed, Burstable or BestEffort from the containers' requests and limits."""
    containers = [
        *_containers(pod_spec),
        *[c for c in pod_spec.get("initContainers") or [] if isinstance(c, Mapping)],
    ]
    any_set, guaranteed = False, True
    for container in containers:
        resources = container.get("resources") or {}
        limits = {k: v for k, v in (resources.get("limits") or {}).items() if k in _QOS_RESOURCES}
        requests = {
            k: v for k, v in (resources.get("requests") or {}).items() if k in _QOS_RESOURCES
        }
        any_set = any_set or bool(limits or requests)
        effective = {**limits, **requests}  # a missing request defaults to its limit
        if set(limits) != set(_QOS_RESOURCES) or effective != limits:
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def defaults_on_create(info: KindInfo, obj: dict[str, Any]) -> None:
    """Fill in the status a new Pod or Service has on a real server, and a Pod's defaults
    (gpustack_sim/apiserver/poddefaults.py), in place."""
    if info.group:
        return
    if info.kind == "Pod":
        default_new_pod(obj)
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", qos_class(obj.get("spec") or {}))
    elif info.kind == "Service":
        obj.setdefault("status", {}).setdefault("loadBalancer", {})


def _pod_spec_causes(spec: Any, path: str) -> Iterator[tuple[str, str]]:
    """What the published schema cannot say of a pod spec: the containers may not be an empty
    list, a container's name may not be empty (the schema only requires the fields to be
    there), and a container needs an image (optional in the schema, so that tools may fill it
    in before the object reaches the server, but required by the server's validation)."""
    if not isinstance(spec, Mapping):
        return
    if spec.get("containers") == []:
        yield f"{path}.containers", "Required value"
    for field in ("initContainers", "containers"):
        items = spec.get(field)
        for index, container in enumerate(items if isinstance(items, list) else []):
            if not isinstance(container, Mapping):
                continue
            if container.get("name") == "":
                yield f"{path}.{field}[{index}].name", "Required value"
            if not container.get("image"):
                yield f"{path}.{field}[{index}].image", "Required value"


def _config_causes(
    obj: Mapping[str, Any], old: Mapping[str, Any] | None, fields: tuple[str, ...]
) -> Iterator[tuple[str, str]]:
    for field in fields:
        for key in obj.get(field) or {}:
            if not CONFIG_KEY.match(str(key)):
                yield f"{field}[{key}]", f'Invalid value: "{key}": {CONFIG_KEY_MESSAGE}'
    if old is None or not old.get("immutable"):
        return
    if not obj.get("immutable"):
        yield "immutable", f"Forbidden: {IMMUTABLE}"
    for field in fields:
        if field != "stringData" and (obj.get(field) or {}) != (old.get(field) or {}):
            yield field, f"Forbidden: {IMMUTABLE}"


def causes(
    info: KindInfo, obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[tuple[str, str]]:
    """``(field, message)`` for each rule *obj* breaks (``old``: the object it replaces)."""
    key = (info.group, info.kind)
    if key == ("", "Pod"):
        return list(_pod_spec_causes(obj.get("spec"), "spec"))
    if key in _POD_TEMPLATE_KINDS:
        template = (obj.get("spec") or {}).get("template") or {}
        return list(_pod_spec_causes(template.get("spec"), "spec.template.spec"))
    if key == ("", "ConfigMap"):
        return list(_config_causes(obj, old, ("data", "binaryData")))
    if key == ("", "Secret"):
        found = list(_config_causes(obj, old, ("data", "stringData")))
        kind = obj.get("type") or "Opaque"
        if old is not None and kind != (old.get("type") or "Opaque"):
            found.append(("type", f'Invalid value: "{kind}": field is immutable'))
        return found
    return []
