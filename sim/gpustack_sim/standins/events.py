"""Events the stand-ins record, as other projects' controllers record theirs (a test double).

Kueue and the Kubernetes controllers report what they did as Events on the object they acted
on; ``kubectl describe`` lists them (it reads ``v1`` Events whose ``involvedObject`` is the
object). Kueue v0.19 records them through client-go's ``events.k8s.io/v1`` recorder
(``tools/events``), which kube-apiserver also serves as ``v1`` Events; the simulator stores
Events of the two groups apart, so the stand-ins write ``v1`` Events shaped as kube-apiserver
shows a converted one: ``reason``, ``message`` (the note), ``type``, ``action``,
``eventTime``, ``reportingComponent`` (the recorder's name) and ``count: 1``. Their names are
``<object>.<nanoseconds in hex>``, as that recorder names them. docs/simulator.md, "Where the
simulator differs from a real cluster", says what is not modelled (series, aggregation).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import structlog

from gpustack_sim.apiserver.errors import ApiError

if TYPE_CHECKING:
    from gpustack_sim.apiserver.store import Store

__all__ = ["NORMAL", "WARNING", "EventRecorder"]

log = structlog.get_logger(__name__)

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
MESSAGE_LIMIT: Final = 1024
"""Kueue truncates event messages to this many characters (``api.TruncateEventMessage``)."""


class EventRecorder:
    """Writes the ``v1`` Events of one reporting component (``kueue-admission``, ...)."""

    def __init__(self, store: Store, component: str) -> None:
        self.store = store
        self.component = component

    def record(
        self, obj: Mapping[str, Any], event_type: str, reason: str, message: str
    ) -> dict[str, Any] | None:
        """Record one Event about *obj*; a refused write is logged, never raised (a lost
        Event must not stop the controller that reports it, as client-go drops them too)."""
        meta = obj.get("metadata") or {}
        now = datetime.now(UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        if len(message) > MESSAGE_LIMIT:
            message = message[: MESSAGE_LIMIT - 3] + "..."
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name', '')}.{time.time_ns():x}",
                "namespace": meta.get("namespace") or "default",
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": obj.get("kind", ""),
                "name": meta.get("name", ""),
                **({"namespace": meta["namespace"]} if meta.get("namespace") else {}),
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "action": reason,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "count": 1,
        }
        try:
            return self.store.create(event)
        except ApiError as exc:
            log.warning(
                "event not recorded", reason=reason, object=meta.get("name"), error=str(exc)
            )
            return None
