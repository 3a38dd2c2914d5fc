"""Graceful deletion of Pods: the grace period the API server grants, and the kubelet's part.

A Pod bound to a Node is not removed by its DELETE: it gets a ``deletionTimestamp`` that far
in the future and ``deletionGracePeriodSeconds``, and the kubelet deletes it (grace 0) once
its containers have stopped. The simulator runs no containers, so its kubelet stand-in (a
pass of the background controllers) finishes every such deletion at once
(docs/simulator.md, "Pod eviction").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.kinds import KindInfo

if TYPE_CHECKING:
    from gpustack_sim.apiserver.store import Store

POD_RESOURCE = ("", "pods")
_TERMINAL = ("Succeeded", "Failed")


def is_pod(info: KindInfo) -> bool:
    return (info.group, info.plural) == POD_RESOURCE


def grace_period(pod: Mapping[str, Any], requested: int | None) -> int:
    """The seconds a Pod's deletion waits for its containers: the DELETE's
    ``gracePeriodSeconds``, else the Pod's ``terminationGracePeriodSeconds``; 0 for a Pod on
    no Node or a finished one; 1 for a negative request (the pod strategy's rules)."""
    spec = pod.get("spec") or {}
    period = requested if requested is not None else spec.get("terminationGracePeriodSeconds")
    period = int(period or 0)
    phase = (pod.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in _TERMINAL:
        return 0
    return 1 if period < 0 else period


def deletion_time(seconds: int) -> str:
    """The ``deletionTimestamp`` of a deletion granted *seconds* of grace from now."""
    return (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pending(pod: Mapping[str, Any]) -> bool:
    """Whether a Pod waits for the kubelet to finish its deletion."""
    meta = pod.get("metadata") or {}
    return (
        bool(meta.get("deletionTimestamp")) and int(meta.get("deletionGracePeriodSeconds") or 0) > 0
    )


def finish_terminations(store: Store, keys: Iterable[tuple[str, str]]) -> bool:
    """The kubelet stand-in: delete (grace 0) the Pods at *keys* whose graceful deletion is
    pending; True when it wrote."""
    info = store.info_by_resource(POD_RESOURCE)
    if info is None:
        return False
    changed = False
    for namespace, name in sorted(keys):
        pod = store.resource(info).objects.get((namespace, name))
        if pod is not None and pending(pod):
            with contextlib.suppress(ApiError):  # gone meanwhile
                store.delete_as(info, namespace, name, grace_period=0)
                changed = True
    return changed
