"""The worker's lifecycle timers as it publishes them (docs/node-lifecycle.md, "Timers"):
one small ConfigMap the worker owns, so ``queues`` judges nodes with the timers in force
instead of assuming the defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Final

from gpustack_operator.domain.labels import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from gpustack_operator.domain.node.availability import LifecycleTimers

TIMERS_CONFIGMAP: Final = "gpustack-worker-timers"
"""Name of the ConfigMap, in the worker's system namespace."""


def _key(field_name: str) -> str:
    return field_name.replace("_", "-")  # the flag's name: soft-grace, join-window, ...


def timers_configmap(timers: LifecycleTimers, namespace: str) -> dict[str, Any]:
    """The ConfigMap that says *timers*, in seconds, keyed by their flags' names."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": TIMERS_CONFIGMAP,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
        },
        "data": {_key(f.name): f"{getattr(timers, f.name):g}" for f in fields(timers)},
    }


def timers_from_configmap(configmap: Mapping[str, Any] | None) -> LifecycleTimers | str | None:
    """The timers a worker published (None: no ConfigMap), or why they cannot be read."""
    if configmap is None:
        return None
    data = configmap.get("data")
    if not isinstance(data, Mapping):
        return f"ConfigMap {TIMERS_CONFIGMAP} has no data"
    values: dict[str, float] = {}
    for f in fields(LifecycleTimers):
        raw = data.get(_key(f.name))
        if raw is None:
            continue  # a worker of another version: that timer's default
        try:
            values[f.name] = float(raw)
        except (TypeError, ValueError):
            return f"ConfigMap {TIMERS_CONFIGMAP}: {_key(f.name)}={raw!r} is not seconds"
    try:
        return LifecycleTimers(**values)
    except ValueError as exc:
        return f"ConfigMap {TIMERS_CONFIGMAP}: {exc}"
