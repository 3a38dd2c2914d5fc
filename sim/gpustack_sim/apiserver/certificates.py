"""What kube-apiserver does of a CertificateSigningRequest beyond its schema.

On create the API server sets ``spec.username``, ``uid``, ``groups`` and ``extra`` from the
requesting user, whatever the body said, so signers and approvers can trust them. On updates
it stamps new conditions with their times and keeps the conditions coherent: ``Approved`` and
``Denied`` exclude each other, are set through ``/approval`` only and, like ``Failed``, are
never removed (docs/simulator.md, "Built-in kinds").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpustack_sim.apiserver.errors import invalid
from gpustack_sim.apiserver.kinds import KindInfo
from gpustack_sim.apiserver.rbac import CURRENT_REQUEST
from gpustack_sim.apiserver.store import now_rfc3339

__all__ = ["check_conditions", "set_requestor"]

_REQUESTOR_FIELDS = ("username", "uid", "groups", "extra")
_APPROVAL_TYPES = ("Approved", "Denied")
_LASTING_TYPES = ("Approved", "Denied", "Failed")  # only ever True, never removed
_ALL_STATUSES = ("False", "True", "Unknown")
_CONDITIONS = "status.conditions"


def _is_csr(info: KindInfo) -> bool:
    return (info.group, info.kind) == ("certificates.k8s.io", "CertificateSigningRequest")


def set_requestor(info: KindInfo, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """An admission step: a new CSR's requestor fields become the requesting user's."""
    if old is not None or not _is_csr(info):
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    for key in _REQUESTOR_FIELDS:
        spec.pop(key, None)
    request = CURRENT_REQUEST.get()
    if request is None:  # the simulator's own write: nobody to name
        return
    user = request.user
    spec["username"] = user.name
    if user.uid:
        spec["uid"] = user.uid
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra.items()}


def check_conditions(info: KindInfo, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """An admission step: a CSR update's conditions as kube-apiserver prepares and checks them.

    Raises a 422 with the API's field errors when they break a rule.
    """
    if old is None or not _is_csr(info):
        return
    conditions = _conditions(obj)
    before = _conditions(old)
    request = CURRENT_REQUEST.get()
    via_status = request is not None and request.subresource == "status"
    if via_status:  # /status keeps the approval conditions it was sent
        _keep_approval_conditions(conditions, before)
    if conditions != before:
        _stamp(conditions, before)
    causes = _condition_causes(conditions, before)
    causes += _update_causes(conditions, before, may_approve=not via_status)
    if causes:
        raise invalid(info, str(obj["metadata"].get("name") or ""), causes)


def _conditions(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    status = obj.get("status")
    found = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(found, list):
        return []
    return [c for c in found if isinstance(c, dict)]


def _of_type(conditions: Sequence[Mapping[str, Any]], kind: str) -> list[int]:
    return [i for i, c in enumerate(conditions) if c.get("type") == kind]


def _keep_approval_conditions(
    conditions: list[dict[str, Any]], before: Sequence[Mapping[str, Any]]
) -> None:
    """As many Approved/Denied conditions as before: they stay as they were (more or fewer
    is refused by :func:`_update_causes`)."""
    for kind in _APPROVAL_TYPES:
        new_at, old_at = _of_type(conditions, kind), _of_type(before, kind)
        if len(new_at) == len(old_at):
            for new_index, old_index in zip(new_at, old_at, strict=True):
                conditions[new_index].clear()
                conditions[new_index].update(before[old_index])


def _stamp(conditions: list[dict[str, Any]], before: Sequence[Mapping[str, Any]]) -> None:
    """A condition without times gets ``lastUpdateTime`` now and ``lastTransitionTime`` of
    the same type and status before, else now."""
    now = now_rfc3339()
    for condition in conditions:
        condition.setdefault("lastUpdateTime", now)
        if condition.get("lastTransitionTime"):
            continue
        same = (
            c.get("lastTransitionTime")
            for c in before
            if (c.get("type"), c.get("status")) == (condition.get("type"), condition.get("status"))
        )
        condition["lastTransitionTime"] = next((t for t in same if t), now)


def _quoted(values: Sequence[str]) -> str:
    return ", ".join(json.dumps(v) for v in values)


def _condition_causes(
    conditions: Sequence[Mapping[str, Any]], before: Sequence[Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """The field errors of the conditions; what the stored object already breaks is
    tolerated, as the API server tolerates existing data."""
    old_types = [c.get("type") or "" for c in before]
    allow_empty_type = "" in old_types
    allow_duplicates = len(set(old_types)) < len(old_types)
    allow_both = all(kind in old_types for kind in _APPROVAL_TYPES)
    causes: list[tuple[str, str]] = []
    seen: set[str] = set()
    approval_seen: set[str] = set()
    for index, condition in enumerate(conditions):
        at = f"{_CONDITIONS}[{index}]"
        kind = str(condition.get("type") or "")
        status = str(condition.get("status") or "")
        if not kind and not allow_empty_type:
            causes.append((f"{at}.type", "Required value"))
        allowed = ("True",) if kind in _LASTING_TYPES else _ALL_STATUSES
        if not status:
            causes.append((f"{at}.status", "Required value"))
        elif status not in allowed:
            causes.append(
                (
                    f"{at}.status",
                    f"Unsupported value: {json.dumps(status)}: supported values: "
                    f"{_quoted(allowed)}",
                )
            )
        if kind in _APPROVAL_TYPES and not allow_both:
            approval_seen.add(kind)
            if len(approval_seen) == len(_APPROVAL_TYPES):
                causes.append(
                    (
                        f"{at}.type",
                        f"Invalid value: {json.dumps(kind)}: Approved and Denied conditions "
                        "are mutually exclusive",
                    )
                )
        if kind in seen and not allow_duplicates:
            causes.append((f"{at}.type", f"Duplicate value: {json.dumps(kind)}"))
        seen.add(kind)
    return causes


def _update_causes(
    conditions: Sequence[Mapping[str, Any]],
    before: Sequence[Mapping[str, Any]],
    *,
    may_approve: bool,
) -> list[tuple[str, str]]:
    """Lasting conditions are never removed; outside ``/approval`` none is added."""
    causes: list[tuple[str, str]] = []
    for kind in _LASTING_TYPES:
        if len(_of_type(conditions, kind)) < len(_of_type(before, kind)):
            causes.append((_CONDITIONS, _forbidden("remove", kind)))
    if may_approve:
        return causes
    for kind in _APPROVAL_TYPES:
        if len(_of_type(conditions, kind)) > len(_of_type(before, kind)):
            causes.append((_CONDITIONS, _forbidden("add", kind)))
    return causes


def _forbidden(change: str, kind: str) -> str:
    return f"Forbidden: updates may not {change} a condition of type {json.dumps(kind)}"
