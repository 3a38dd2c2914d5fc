"""The Kueue chain as an API server holds it, and how it compares with ``plan``'s.

A chain is a :class:`DesiredState` (the type ``plan`` prints), here filled with objects read
back: the NodeFeatures and Kueue objects labelled ``app.kubernetes.io/managed-by:
gpustack-operator`` (a person's objects are not part of it) and every Node.

Comparison ("converged") looks at what the operator decides, never at what the server adds:
``apiVersion``, ``kind``, ``metadata.name`` / ``namespace`` / ``labels`` / ``annotations`` and
``spec`` must be equal; ``uid``, ``resourceVersion``, ``creationTimestamp``, ``generation``,
``managedFields``, ``ownerReferences`` (``plan`` cannot know owners' uids) and ``status`` are
ignored, and so is a NodeFeature's label-repair mark (docs/worker.md, "Label repair"), which
records a past repair rather than a desired state. Owner references are checked separately by
:func:`ownership_problems`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpustack_operator.apis import NODE_FEATURES, KueueResources, kueue_resources
from gpustack_operator.domain.labels import (
    LABEL_REPAIR_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
)
from gpustack_operator.domain.plan.desired import DesiredState
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.errors import NotFound
from gpustack_operator.runtime.resources import NODES, Resource
from gpustack_sim.apiserver.store import Store

MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
COMPARED_METADATA = ("name", "namespace", "labels", "annotations")
SERVER_METADATA = ("managedFields",)
"""Dropped from what ``sim`` prints (as ``kubectl get -o yaml`` hides them)."""

JSON = dict[str, Any]
Key = tuple[str, str, str]
"""(kind, namespace, name)"""


def _sort_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _local_queue_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """Plan's order: by namespace, then by ClusterQueue."""
    namespace, name = _sort_key(obj)
    return (namespace, str((obj.get("spec") or {}).get("clusterQueue") or ""), name)


def _managed(obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE


def _printable(obj: Mapping[str, Any]) -> JSON:
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    for key in SERVER_METADATA:
        meta.pop(key, None)
    out["metadata"] = meta
    return out


def chain_of(
    nodes: Iterable[Mapping[str, Any]],
    node_features: Iterable[Mapping[str, Any]],
    resource_flavors: Iterable[Mapping[str, Any]],
    cohorts: Iterable[Mapping[str, Any]],
    cluster_queues: Iterable[Mapping[str, Any]],
    local_queues: Iterable[Mapping[str, Any]],
    topologies: Iterable[Mapping[str, Any]] = (),
    admission_checks: Iterable[Mapping[str, Any]] = (),
    provisioning_configs: Iterable[Mapping[str, Any]] = (),
) -> DesiredState:
    """A :class:`DesiredState` of read-back objects: operator-managed ones, sorted like plan
    (AdmissionChecks and ProvisioningRequestConfigs: those of declared pools,
    docs/autoscaling.md)."""

    def group(objs: Iterable[Mapping[str, Any]], key: Any = _sort_key) -> list[JSON]:
        return [_printable(o) for o in sorted((o for o in objs if _managed(o)), key=key)]

    return DesiredState(
        node_features=group(node_features),
        topologies=group(topologies),
        resource_flavors=group(resource_flavors),
        cohorts=group(cohorts),
        cluster_queues=group(cluster_queues),
        local_queues=group(local_queues, _local_queue_key),
        nodes=[_printable(n) for n in sorted(nodes, key=_sort_key)],
        admission_checks=group(admission_checks),
        provisioning_configs=group(provisioning_configs),
    )


def read_chain_from_store(
    store: Store, system_namespace: str, kueue: KueueResources | None = None
) -> DesiredState:
    """The chain as the simulated server stores it (no HTTP: no faults, not counted)."""
    kueue = kueue or kueue_resources()

    def objs(res: Resource, namespace: str | None = None) -> list[JSON]:
        if store.registry.by_kind(res.api_version, res.kind) is None:
            return []  # not served (the provisioning kinds)
        return store.list(res.api_version, res.kind, namespace)

    check, config = _provisioning(kueue)
    return chain_of(
        objs(NODES),
        objs(NODE_FEATURES, system_namespace),
        objs(kueue.resource_flavors),
        objs(kueue.cohorts),
        objs(kueue.cluster_queues),
        objs(kueue.local_queues),
        objs(kueue.topologies) if kueue.topologies is not None else [],
        objs(check),
        objs(config),
    )


def _provisioning(kueue: KueueResources) -> tuple[Resource, Resource]:
    """Kueue's AdmissionCheck and ProvisioningRequestConfig at the chain's version."""
    group = kueue.resource_flavors.group
    version = kueue.resource_flavors.version
    return (
        Resource(group, version, "AdmissionCheck", "admissionchecks", namespaced=False),
        Resource(group, version, "ProvisioningRequestConfig", "provisioningrequestconfigs", False),
    )


async def read_chain(
    client: Client, system_namespace: str, kueue: KueueResources | None = None
) -> DesiredState:
    """The chain read back through the API (LIST requests, as kubectl would)."""
    kueue = kueue or kueue_resources()

    async def objs(res: Resource, namespace: str | None = None, managed: bool = True) -> list[JSON]:
        selector = MANAGED_SELECTOR if managed else None
        return (await client.list_all(res, namespace, label_selector=selector)).items

    async def served(res: Resource) -> list[JSON]:
        try:
            return await objs(res)
        except NotFound:
            return []  # not served (the provisioning kinds)

    check, config = _provisioning(kueue)
    return chain_of(
        await objs(NODES, managed=False),
        await objs(NODE_FEATURES, system_namespace),
        await objs(kueue.resource_flavors),
        await objs(kueue.cohorts),
        await objs(kueue.cluster_queues),
        await objs(kueue.local_queues),
        await objs(kueue.topologies) if kueue.topologies is not None else [],
        await served(check),
        await served(config),
    )


def comparable(obj: Mapping[str, Any]) -> JSON:
    """The part of an object the operator decides (see the module docstring)."""
    meta = dict(obj.get("metadata") or {})
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping) and LABEL_REPAIR_ANNOTATION in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != LABEL_REPAIR_ANNOTATION}
    out: JSON = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in COMPARED_METADATA if meta.get(k) not in (None, {})},
    }
    if "spec" in obj:
        out["spec"] = obj["spec"]
    return out


def _indexed(state: DesiredState) -> dict[Key, JSON]:
    out: dict[Key, JSON] = {}
    for obj in state.objects():
        meta = obj.get("metadata") or {}
        key = (str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))
        out[key] = comparable(obj)
    return out


def _covers(actual: Any, desired: Any) -> bool:
    """Whether *actual* holds everything *desired* says (extra map keys allowed: defaults)."""
    if isinstance(actual, Mapping) and isinstance(desired, Mapping):
        return all(k in actual and _covers(actual[k], v) for k, v in desired.items())
    if isinstance(actual, list) and isinstance(desired, list):
        return len(actual) == len(desired) and all(
            _covers(a, d) for a, d in zip(actual, desired, strict=True)
        )
    return bool(actual == desired)


def _same(actual: JSON, desired: JSON, *, server_defaults: bool) -> bool:
    if not server_defaults:
        return actual == desired
    rest = {k: v for k, v in actual.items() if k != "spec"}
    want = {k: v for k, v in desired.items() if k != "spec"}
    return rest == want and _covers(actual.get("spec"), desired.get("spec"))


def _first_difference(actual: Any, desired: Any, path: str = "") -> str:
    if isinstance(actual, Mapping) and isinstance(desired, Mapping):
        for key in sorted(set(actual) | set(desired), key=str):
            if key not in desired:
                return f"{path}.{key}: not desired"
            if key not in actual:
                return f"{path}.{key}: missing"
            if actual[key] != desired[key]:
                return _first_difference(actual[key], desired[key], f"{path}.{key}")
    if isinstance(actual, list) and isinstance(desired, list) and len(actual) == len(desired):
        for i, (a, d) in enumerate(zip(actual, desired, strict=True)):
            if a != d:
                return _first_difference(a, d, f"{path}[{i}]")
    return f"{path or '.'}: {json.dumps(actual)[:80]} != desired {json.dumps(desired)[:80]}"


def differences(
    actual: DesiredState, desired: DesiredState, *, server_defaults: bool = False
) -> list[str]:
    """What keeps *actual* from matching *desired*, one line each (empty when equal).

    With *server_defaults* (real CRDs, whose schemas fill in defaults such as a
    ClusterQueue's ``queueingStrategy``), ``spec`` may hold fields nobody asked for; the
    desired ones must still be there with their values. Metadata is always compared exactly.
    """
    have, want = _indexed(actual), _indexed(desired)
    lines: list[str] = []
    for key in sorted(set(have) | set(want)):
        kind, namespace, name = key
        where = f"{kind} {namespace + '/' if namespace else ''}{name}"
        if key not in have:
            lines.append(f"{where}: missing")
        elif key not in want:
            lines.append(f"{where}: not desired (still present)")
        elif not _same(have[key], want[key], server_defaults=server_defaults):
            lines.append(f"{where}: differs at {_first_difference(have[key], want[key])}")
    return lines


@dataclass(frozen=True)
class OwnerRule:
    kind: str
    owner_kind: str


OWNER_RULES = (
    OwnerRule("NodeFeature", "Node"),
    OwnerRule("ClusterQueue", "Cohort"),
    OwnerRule("LocalQueue", "ClusterQueue"),
)


def ownership_problems(chain: DesiredState) -> list[str]:
    """Owner references that break the GC chain (NodeFeature <- Node, ClusterQueue <- Cohort,
    LocalQueue <- ClusterQueue): each needs one controller reference to the live owner's uid."""
    uids: dict[tuple[str, str], str] = {}
    for obj in [*chain.nodes, *chain.cohorts, *chain.cluster_queues]:
        meta = obj.get("metadata") or {}
        uids[(str(obj.get("kind")), str(meta.get("name")))] = str(meta.get("uid"))
    problems: list[str] = []
    for obj in chain.objects():
        rule = next((r for r in OWNER_RULES if r.kind == obj.get("kind")), None)
        if rule is None:
            continue
        meta = obj.get("metadata") or {}
        refs = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
        name = f"{obj.get('kind')} {meta.get('name')}"
        if len(refs) != 1 or refs[0].get("kind") != rule.owner_kind:
            problems.append(f"{name}: expected one controller reference to a {rule.owner_kind}")
            continue
        uid = uids.get((rule.owner_kind, str(refs[0].get("name"))))
        if uid != refs[0].get("uid"):
            problems.append(f"{name}: owner {refs[0].get('name')} is not a live {rule.owner_kind}")
    return problems
