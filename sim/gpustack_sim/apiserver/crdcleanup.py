"""Deleting a CustomResourceDefinition through ``Terminating``, as the apiextensions server does.

A DELETE of a CRD only marks it: ``deletionTimestamp``, the
``customresourcecleanup.apiextensions.k8s.io`` finalizer and a ``Terminating`` condition. The
CRD finalizer (a controller of the apiextensions server, here one pass of the simulator's
background controllers) then deletes every instance, waits until none is left (instances
held by finalizers of their own keep the CRD), marks the condition completed and drops its
finalizer; only then does the CRD go and its resource leave discovery. While it terminates,
creating instances is refused (docs/simulator.md, "CRD deletion").
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.kinds import KindInfo
from gpustack_sim.apiserver.patches import clone

if TYPE_CHECKING:
    from gpustack_sim.apiserver.store import Store

CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
CRD_GROUP = "apiextensions.k8s.io"
CRD_RESOURCE = (CRD_GROUP, "customresourcedefinitions")
TERMINATING = "Terminating"


def is_crd(info: KindInfo) -> bool:
    return info.kind == "CustomResourceDefinition" and info.group == CRD_GROUP


def set_condition(
    crd: dict[str, Any], kind: str, status: str, reason: str, message: str, now: str
) -> None:
    """Set one status condition; its transition time moves only when its status changes."""
    conditions = crd.setdefault("status", {}).setdefault("conditions", [])
    for condition in conditions:
        if condition.get("type") == kind:
            if condition.get("status") != status:
                condition["lastTransitionTime"] = now
            condition.update(status=status, reason=reason, message=message)
            return
    conditions.append(
        {
            "type": kind,
            "status": status,
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        }
    )


def condition_of(crd: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (crd.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition  # type: ignore[no-any-return]
    return None


def marked_for_deletion(crd: Mapping[str, Any], now: str) -> dict[str, Any]:
    """What the first DELETE of a CRD stores: deletion time, cleanup finalizer, condition."""
    new: dict[str, Any] = clone(crd)
    meta = new["metadata"]
    meta.setdefault("deletionTimestamp", now)
    meta.setdefault("deletionGracePeriodSeconds", 0)
    finalizers = list(meta.get("finalizers") or [])
    if CLEANUP_FINALIZER not in finalizers:
        meta["finalizers"] = [*finalizers, CLEANUP_FINALIZER]
    set_condition(
        new,
        TERMINATING,
        "True",
        "InstanceDeletionPending",
        "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
        now,
    )
    return new


def terminating_refusal(info: KindInfo) -> ApiError:
    """The 405 a create of an instance gets while its CRD terminates."""
    return ApiError(
        405,
        "create not allowed while custom resource definition is terminating",
        "MethodNotAllowed",
        {"group": info.group, "kind": info.plural} if info.group else {"kind": info.plural},
    )


def clean_up(store: Store, now: str) -> bool:
    """One pass of the CRD finalizer over every CRD being deleted; True when it wrote."""
    crd_info = store.info_by_resource(CRD_RESOURCE)
    if crd_info is None:
        return False
    changed = False
    for _, crd in sorted(store.resource(crd_info).objects.items()):
        meta = crd["metadata"]
        if not meta.get("deletionTimestamp") or CLEANUP_FINALIZER not in (
            meta.get("finalizers") or []
        ):
            continue
        changed = _finalize(store, crd_info, crd, now) or changed
    return changed


def _finalize(store: Store, crd_info: KindInfo, crd: dict[str, Any], now: str) -> bool:
    """Delete the instances of one terminating CRD, then let it go; True when it wrote."""
    wrote = False
    progress = condition_of(crd, TERMINATING) or {}
    if progress.get("reason") != "InstanceDeletionInProgress":
        new = clone(crd)
        set_condition(
            new,
            TERMINATING,
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
            now,
        )
        crd, wrote = store.controller_write(crd_info, new, crd), True
    spec = crd.get("spec") or {}
    resource = (str(spec.get("group", "")), str((spec.get("names") or {}).get("plural", "")))
    info = store.info_by_resource(resource)
    if info is not None:
        for (namespace, instance), obj in sorted(store.resource(info).objects.items()):
            if obj["metadata"].get("deletionTimestamp"):
                continue  # already being deleted: its own finalizers decide
            with contextlib.suppress(ApiError):
                store.delete_as(info, namespace or None, instance)
                wrote = True
        if store.resource(info).objects:
            return wrote  # instances held by their finalizers: the CRD waits for them
    new = clone(crd)
    set_condition(
        new, TERMINATING, "False", "InstanceDeletionCompleted", "removed all instances", now
    )
    finalizers = [f for f in new["metadata"].get("finalizers") or [] if f != CLEANUP_FINALIZER]
    if finalizers:
        new["metadata"]["finalizers"] = finalizers
    else:
        new["metadata"].pop("finalizers", None)
    store.controller_write(crd_info, new, crd)
    return True
