"""Capacity profiling (docs/labels.md): the NodeFeature ``<node>-gpustack-worker`` of every Node.

Key: the Node's name. The desired NodeFeature (``worker_node_feature``) carries the node's
capacity labels, is owned by the Node (so it goes with it) and replaces its whole
``spec.labels`` map on change (docs/worker.md). Node updates reach the queue only when the node's
worker-relevant view changes (labels under the gpustack prefixes, CPU annotations,
capacity/allocatable of host and accelerator resources); a NodeFeature changed or deleted by
someone else enqueues its Node again. Nothing is written while the cache already holds the
desired labels, nor sent again while the cache has not yet seen the last apply
(docs/worker.md, "Writes and ownership"). This reconciler needs no Kueue and runs while Kueue
is still missing.
Where the cluster serves ``resource.k8s.io/v1``, the Node's DRA ``ResourceSlice`` objects
(``spec.nodeName``) are read too and a slice change enqueues its Node (docs/devices.md, "DRA").
A NodeFeature deleted while its Node is still cached is created again only once the API
server confirms the Node (docs/worker.md, "Writes and ownership"): the Node cache can lag a
deletion whose NodeFeature the garbage collector has already taken.
Node and slice events go through one coalescing window per node, so a flapping node is
written at most once per window; NodeFeature events are handled at once, except the echoes of
the reconciler's own applies (docs/worker.md, "Flapping nodes").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import structlog

from gpustack_operator.apis import NODE_FEATURES
from gpustack_operator.domain.labels import (
    ACCELERATABLE_PREFIX,
    NFD_NODE_NAME_LABEL,
    PART_OF_LABEL,
    PART_OF_WORKER,
)
from gpustack_operator.domain.node.availability import in_planned_maintenance
from gpustack_operator.domain.node.nodefeature import (
    WORKER_SUFFIX,
    build_node_feature,
    is_worker_label,
    worker_node_feature,
    worker_node_feature_with,
)
from gpustack_operator.domain.nodeview import metadata, name_of, uid_of
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.labelrepair import LabelsTaken, repair_request
from gpustack_operator.runtime.cache import compact
from gpustack_operator.runtime.client import NotFound
from gpustack_operator.runtime.coalesce import Coalesce, CoalescePresets
from gpustack_operator.runtime.controller import Request, enqueue_owner
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.predicates import Marks, Predicate
from gpustack_operator.runtime.resources import NODES, RESOURCE_SLICES
from gpustack_operator.worker.caches import BY_SLICE_NODE, slice_node, slices_by_node
from gpustack_operator.worker.common import NodeChanged, Writer, is_up_to_date
from gpustack_operator.worker.nodemodels import NodeModels

NAME: Final = "capacity"
PUBLISHER: Final = "worker"

WORKER_NODE_FEATURES: Final = f"{PART_OF_LABEL}={PART_OF_WORKER}"

log = structlog.get_logger(__name__)

_OWNING_NODE: Final = enqueue_owner(NODES)


class NotLastApplied(Predicate):
    """Passes NodeFeature events unless the object holds what the reconciler last applied.

    Such an event is the echo of the reconciler's own write: it brings nothing to repair, and
    reconciling it at once would let a flapping Node's newer state slip past the Node watch's
    coalescing window (one extra write per window). A NodeFeature someone else changed no
    longer holds it, passes, and is repaired at once. Deletes always pass.

    One memo per Node for the worker's life, so it keeps what rebuilds the applied object
    (:class:`_Applied`: the node's name and uid, its labels shared with every equal map of
    the cache, a repair mark) rather than the object; anything else is kept whole.
    """

    def __init__(self) -> None:
        self._applied: dict[str, _Applied | Mapping[str, Any]] = {}

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> str:
        return f"{metadata(obj).get('namespace', '')}/{name_of(obj)}"

    def applying(self, want: Mapping[str, Any]) -> None:
        """Remember *want* as the NodeFeature's last applied state (before the write)."""
        self._applied[self._key(want)] = _Applied.of(want) or want

    def _passes(self, obj: Mapping[str, Any]) -> bool:
        memo = self._applied.get(self._key(obj))
        if memo is None:
            return True
        want = memo.rebuilt() if isinstance(memo, _Applied) else memo
        return want is None or not is_up_to_date(obj, want)

    def create(self, obj: Mapping[str, Any]) -> bool:
        return self._passes(obj)

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return self._passes(new)

    def delete(self, obj: Mapping[str, Any]) -> bool:
        self._applied.pop(self._key(obj), None)
        return True

    def __repr__(self) -> str:
        return "NotLastApplied()"


class Collected(Marks):
    """Passes every NodeFeature event; marks the Nodes whose NodeFeature was deleted.

    The reconcile that follows finds the NodeFeature missing and would create it again. That
    repairs a person's deletion, but the garbage collector deletes a NodeFeature because its
    Node is gone, and the Node cache can still hold that Node (its watch lags after an
    outage): a NodeFeature created for it is collected again at once, and the two would loop
    at the API server's speed. A marked Node is confirmed with the API server before its
    NodeFeature is created again (a read that failed marks it again).
    """

    def delete(self, obj: dict[str, Any]) -> bool:
        self._marked.update(_OWNING_NODE(obj))
        return True

    def __repr__(self) -> str:
        return "Collected()"


class _Applied:
    """A worker NodeFeature as applied, by what differs between nodes: the rest is rebuilt
    (``worker_node_feature_with``'s manifest), and its labels are the cache's shared map."""

    __slots__ = ("annotations", "labels", "namespace", "node", "uid")

    def __init__(
        self,
        node: str,
        uid: str,
        namespace: str,
        labels: Mapping[str, str],
        annotations: Mapping[str, str] | None,
    ) -> None:
        self.node, self.uid, self.namespace = node, uid, namespace
        self.labels, self.annotations = labels, annotations

    @classmethod
    def of(cls, want: Mapping[str, Any]) -> _Applied | None:
        """*want* as a record, or None when rebuilding it would not give *want* back."""
        meta = metadata(want)
        spec = want.get("spec")
        owners = meta.get("ownerReferences")
        if not isinstance(spec, Mapping) or not isinstance(owners, list) or len(owners) != 1:
            return None
        annotations = meta.get("annotations")
        record = cls(
            node=str((meta.get("labels") or {}).get(NFD_NODE_NAME_LABEL) or ""),
            uid=str(owners[0].get("uid") or "") if isinstance(owners[0], Mapping) else "",
            namespace=str(meta.get("namespace") or ""),
            labels=compact(dict(spec.get("labels") or {})),
            annotations=compact(dict(annotations)) if isinstance(annotations, Mapping) else None,
        )
        return record if record.rebuilt() == want else None

    def rebuilt(self) -> dict[str, Any] | None:
        want = build_node_feature(
            self.node,
            self.uid,
            self.labels,
            system_namespace=self.namespace,
            suffix=WORKER_SUFFIX,
            part_of=PART_OF_WORKER,
        )
        if want is not None and self.annotations is not None:
            want["metadata"]["annotations"] = dict(self.annotations)
        return want


class CapacityReconciler:
    def __init__(
        self,
        nodes: Informer,
        features: Informer,
        writer: Writer,
        *,
        system_namespace: str,
        facts: NodeModels,
        slices: Informer | None = None,
        applied: NotLastApplied | None = None,
        taken: LabelsTaken | None = None,
        collected: Collected | None = None,
    ) -> None:
        self.nodes = nodes
        self.applied = applied
        self.collected = collected
        self.taken = taken
        self.slices = slices
        self.features = features
        self.writer = writer
        self.system_namespace = system_namespace
        self.facts = facts
        self.manufacturers = facts.manufacturers

    async def __call__(self, request: Request) -> None:
        node = self.nodes.indexer.get(request.key)
        if node is None:
            if self.collected is not None:
                self.collected.take(request.key)  # nothing left to confirm
            return  # gone: the garbage collector removes its NodeFeature
        slices = (
            self.slices.indexer.by_index(BY_SLICE_NODE, request.key)
            if self.slices is not None
            else ()
        )
        if slices:
            want = worker_node_feature(
                node,
                self.system_namespace,
                self.manufacturers,
                slices,
                topology=self.facts.topology,
                tolerations=self.facts.tolerations,
            )
        else:
            labels = self.facts.capacity_labels(node)
            want = worker_node_feature_with(node, labels, self.system_namespace)
        if want is None:
            return  # being deleted, or a name NFD cannot attribute (over 63 characters)
        name = want["metadata"]["name"]
        have = self.features.indexer.get(f"{self.system_namespace}/{name}")
        if have is None and not await self._still_there(node):
            return  # the Node watch brings its deletion; nothing to write until then
        taken = self.taken is not None and self.taken.take(request.key)
        if is_up_to_date(have, want):
            if taken:
                await self._repair(node, want, have)
            return
        if have is not None and in_planned_maintenance(self.facts.model(node).lifecycle):
            # The device plugin is paused and device labels may be stale or gone: keep the
            # labels published before it, so no flavor is renamed; a NodeFeature published
            # before the node had any device view (a node first seen mid-change) gets the
            # views, as plan computes them (docs/node-lifecycle.md, "Devices: identity from
            # what is installed, quota from what is healthy").
            want = kept_during_maintenance(want, have)
            if is_up_to_date(have, want):
                return
        await self._apply(want, have)

    async def _still_there(self, node: Mapping[str, Any]) -> bool:
        """False when *node*'s NodeFeature was deleted and the API server no longer holds the
        Node (or holds another of its name): the cache lags the Node's deletion, and the
        garbage collector took the NodeFeature (:class:`Collected`). Asked only after a
        NodeFeature deletion, never for a new Node."""
        name = name_of(node)
        if self.collected is None or not self.collected.take(name):
            return True
        try:
            live = await self.writer.client.get(NODES, name)
        except NotFound:
            live = None
        except Exception:
            self.collected.mark(name)  # the retry asks again
            raise
        if live is not None and uid_of(live) == uid_of(node):
            return True
        log.info(
            "NodeFeature not created again: the API server no longer holds this Node; "
            "the Node watch has yet to deliver its deletion",
            node=name,
            uid=uid_of(node),
        )
        return False

    async def _apply(self, want: dict[str, Any], have: Mapping[str, Any] | None) -> None:
        if self.applied is not None:
            self.applied.applying(want)
        await self.writer.apply(NODE_FEATURES, want, existed=have is not None, cache=self.features)

    async def _repair(
        self, node: Mapping[str, Any], want: dict[str, Any], have: Mapping[str, Any] | None
    ) -> None:
        """The NodeFeature is right but the Node lost some of its labels: rewrite it so NFD
        applies them again (docs/worker.md, "Label repair")."""
        marked = repair_request(node, want, have, publisher=PUBLISHER)
        if marked is None:
            return
        try:
            await self._apply(marked, have)
        except Exception:
            if self.taken is not None:
                self.taken.mark(name_of(node))  # the retry compares again
            raise


def kept_during_maintenance(want: dict[str, Any], have: Mapping[str, Any]) -> dict[str, Any]:
    """*have*'s labels while a node is in planned maintenance; only when *have* holds no
    device view yet, *want*'s views are added to them."""
    published = dict((have.get("spec") or {}).get("labels") or {})
    if not any(k.startswith(ACCELERATABLE_PREFIX) for k in published):
        published = {**want["spec"].get("labels", {}), **published}
    return {**want, "spec": {**want["spec"], "labels": published}}


def setup_capacity(
    manager: Manager,
    writer: Writer,
    *,
    policy: ChainPolicy,
    facts: NodeModels,
    max_concurrent_reconciles: int,
    dra: bool = False,
    coalesce: Coalesce | None = None,
) -> None:
    """Register the capacity reconciler on *manager* (shared Node informer; *facts* is its
    :class:`NodeModels`). *dra*: the cluster serves ``resource.k8s.io/v1`` ResourceSlices.
    *coalesce*: the per-node preset of the Node and ResourceSlice watches (default: one
    second per node, docs/worker.md, "Flapping nodes"). The
    NodeFeatures go to *policy*'s system namespace (docs/configuration.md, "Chain policy")."""
    system_namespace = policy.system_namespace
    nodes = manager.informer(NODES)
    features = manager.informer(
        NODE_FEATURES, namespace=system_namespace, label_selector=WORKER_NODE_FEATURES
    )
    slices = slices_by_node(manager) if dra else None
    applied = NotLastApplied()
    taken = LabelsTaken(is_worker_label)
    collected = Collected()
    reconciler = CapacityReconciler(
        nodes,
        features,
        writer,
        system_namespace=system_namespace,
        facts=facts,
        slices=slices,
        applied=applied,
        taken=taken,
        collected=collected,
    )
    per_node = coalesce or CoalescePresets().per_key()  # one value: both watches share it
    builder = (
        manager.controller(NAME)
        .for_(NODES, taken, NodeChanged(facts), coalesce=per_node)
        .owns(
            NODE_FEATURES,
            collected,
            applied,
            namespace=system_namespace,
            label_selector=WORKER_NODE_FEATURES,
        )
    )
    if slices is not None:
        builder = builder.watches(RESOURCE_SLICES, slice_node, coalesce=per_node)
    builder.with_options(max_concurrent_reconciles=max_concurrent_reconciles).complete(reconciler)
