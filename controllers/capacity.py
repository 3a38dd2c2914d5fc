"""Capacity profiling (docs/labels.md): the NodeFeature ``<node>-gpustack-worker`` of every Node.

Key: the Node's name. The desired NodeFeature (``worker_node_feature``) carries the node's
capacity labels, is owned by the Node (so it goes with it) and replaces its whole
``spec.labels`` map on change (docs/worker.md). Node updates reach the queue only when the node's
worker-relevant view changes (labels under the gpustack prefixes, CPU annotations,
capacity/allocatable of host and accelerator resources); a NodeFeature changed or deleted by
someone else enqueues its Node again. Nothing is written while the cache already holds the
desired labels. This reconciler needs no Kueue and runs while Kueue is still missing.
Where the cluster serves ``resource.k8s.io/v1``, the Node's DRA ``ResourceSlice`` objects
(``spec.nodeName``) are read too and a slice change enqueues its Node (docs/devices.md, "DRA").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gpustack_operator.apis import NODE_FEATURES
from gpustack_operator.controllers.common import NodeChanged, Writer, is_up_to_date
from gpustack_operator.controllers.nodefacts import NodeFacts
from gpustack_operator.domain.labels import PART_OF_LABEL, PART_OF_WORKER
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.nodefeature import worker_node_feature
from gpustack_operator.runtime.controller import Request
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.resources import NODES, RESOURCE_SLICES

NAME: Final = "capacity"
BY_SLICE_NODE: Final = "resourceslice-node"
WORKER_NODE_FEATURES: Final = f"{PART_OF_LABEL}={PART_OF_WORKER}"


class CapacityReconciler:
    def __init__(
        self,
        nodes: Informer,
        features: Informer,
        writer: Writer,
        *,
        system_namespace: str,
        manufacturers: Mapping[str, Manufacturer],
        slices: Informer | None = None,
    ) -> None:
        self.nodes = nodes
        self.slices = slices
        self.features = features
        self.writer = writer
        self.system_namespace = system_namespace
        self.manufacturers = manufacturers

    async def __call__(self, request: Request) -> None:
        node = self.nodes.indexer.get(request.key)
        if node is None:
            return  # gone: the garbage collector removes its NodeFeature
        slices = (
            self.slices.indexer.by_index(BY_SLICE_NODE, request.key)
            if self.slices is not None
            else ()
        )
        want = worker_node_feature(node, self.system_namespace, self.manufacturers, slices)
        if want is None:
            return  # being deleted, or a name NFD cannot attribute (over 63 characters)
        name = want["metadata"]["name"]
        have = self.features.indexer.get(f"{self.system_namespace}/{name}")
        if is_up_to_date(have, want):
            return
        await self.writer.apply(NODE_FEATURES, want, existed=have is not None)


def setup_capacity(
    manager: Manager,
    writer: Writer,
    *,
    system_namespace: str,
    facts: NodeFacts,
    max_concurrent_reconciles: int,
    dra: bool = False,
) -> None:
    """Register the capacity reconciler on *manager* (shared Node informer; *facts* is its
    :class:`NodeFacts`). *dra*: the cluster serves ``resource.k8s.io/v1`` ResourceSlices."""
    nodes = manager.informer(NODES)
    features = manager.informer(
        NODE_FEATURES, namespace=system_namespace, label_selector=WORKER_NODE_FEATURES
    )
    slices = manager.informer(RESOURCE_SLICES) if dra else None
    if slices is not None:
        slices.add_index(BY_SLICE_NODE, slice_node)
    reconciler = CapacityReconciler(
        nodes,
        features,
        writer,
        system_namespace=system_namespace,
        manufacturers=facts.manufacturers,
        slices=slices,
    )
    builder = (
        manager.controller(NAME)
        .for_(NODES, NodeChanged(facts))
        .owns(NODE_FEATURES, namespace=system_namespace, label_selector=WORKER_NODE_FEATURES)
    )
    if slices is not None:
        builder = builder.watches(RESOURCE_SLICES, slice_node)
    builder.with_options(max_concurrent_reconciles=max_concurrent_reconciles).complete(reconciler)


def slice_node(resource_slice: Mapping[str, Any]) -> list[str]:
    """The Node a ResourceSlice describes (``spec.nodeName``), as an index value or key."""
    spec = resource_slice.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return [node] if isinstance(node, str) and node else []
