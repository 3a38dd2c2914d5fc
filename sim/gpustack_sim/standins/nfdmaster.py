"""A stand-in for NFD's nfd-master inside the simulated cluster.

On a real cluster, nfd-master turns ``NodeFeature`` objects (``nfd.k8s-sigs.io/v1alpha1``)
into Node labels: every NodeFeature in the honoured namespace that carries the label
``nfd.node.kubernetes.io/node-name=<node>`` contributes its ``spec.labels``; the union lands on
that Node, and labels it added earlier that no NodeFeature carries any more are removed. It
remembers which labels it manages in the Node annotation
``nfd.node.kubernetes.io/feature-labels`` (comma list; keys in ``feature.node.kubernetes.io/``
are written without that prefix, others in full).

This stand-in does the same for labels only (no ``spec.features``, NodeFeatureRules,
extended resources or taints). A Node that arrives already carrying the annotation (a dump
of a real cluster, where nfd-worker, GPU Feature Discovery or the AMD labeller published
those labels through nfd-master) keeps the labels it names: they stand for the NodeFeatures
of those publishers, which the simulated cluster does not run (docs/simulator.md, "Real
dumps"). ``nfd.node.kubernetes.io/extended-resources`` is left as it is, with the resources
it names, since no simulated publisher changes them.

It runs as an asyncio task in the sim's loop: a store subscription marks nodes dirty on
NodeFeature add/update/delete and Node creation, and the task reconciles dirty nodes
through ``sim.store`` (the write rules of the API, no HTTP).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from gpustack_sim.standins.standin import NodeStandIn

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

__all__ = [
    "DEFAULT_LABEL_NAMESPACES",
    "FEATURE_LABELS_ANNOTATION",
    "NODE_NAME_LABEL",
    "NfdMaster",
    "desired_labels",
    "merge_node_labels",
]

log = structlog.get_logger(__name__)

NODE_FEATURE_API_VERSION = "nfd.k8s-sigs.io/v1alpha1"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
FEATURE_LABELS_ANNOTATION = "nfd.node.kubernetes.io/feature-labels"
FEATURE_NS = "feature.node.kubernetes.io"

# Label namespaces nfd-master writes: its own plus the extra ones the project uses.
DEFAULT_LABEL_NAMESPACES: tuple[str, ...] = (
    "feature.node.kubernetes.io/",
    "gpustack.ai/",
    "feature.gpustack.ai/",
    "general.feature.gpustack.ai/",
    "acceleratable.feature.gpustack.ai/",
)

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _normalise_namespaces(prefixes: Iterable[str]) -> tuple[str, ...]:
    return tuple(p.rstrip("/") for p in prefixes if p.strip("/"))


def _qualify(key: str) -> str:
    """Unprefixed names land in ``feature.node.kubernetes.io/``, as nfd-master does."""
    return key if "/" in key else f"{FEATURE_NS}/{key}"


def _allowed(key: str, namespaces: tuple[str, ...]) -> bool:
    ns, _, name = key.rpartition("/")
    if not _NAME.match(name) or len(name) > 63:
        return False
    return any(ns == allowed or ns.endswith("." + allowed) for allowed in namespaces)


def desired_labels(
    node_features: Iterable[Mapping[str, Any]], namespaces: tuple[str, ...]
) -> dict[str, str]:
    """The union of ``spec.labels`` of *node_features*, keys qualified and filtered.

    Objects are taken in name order, so when two NodeFeatures disagree on a value the one
    with the later name wins (deterministic; nfd-master's order is unspecified).
    """
    labels: dict[str, str] = {}
    ordered = sorted(node_features, key=lambda o: (o.get("metadata") or {}).get("name", ""))
    for feature in ordered:
        for key, value in ((feature.get("spec") or {}).get("labels") or {}).items():
            full = _qualify(str(key))
            text = "" if value is None else str(value)
            if not _allowed(full, namespaces) or len(text) > 63 or not _VALUE.match(text):
                log.warning("nfd stand-in ignores label", label=full, value=text)
                continue
            labels[full] = text
    return labels


def _annotation_names(annotation: str | None) -> set[str]:
    names = set()
    for item in (annotation or "").split(","):
        item = item.strip()
        if item:
            names.add(_qualify(item))
    return names


def _annotation_text(keys: Iterable[str]) -> str:
    prefix = FEATURE_NS + "/"
    return ",".join(sorted(k[len(prefix) :] if k.startswith(prefix) else k for k in keys))


def merge_node_labels(node: Mapping[str, Any], desired: Mapping[str, str]) -> dict[str, Any] | None:
    """*node* with the managed labels set to *desired*; None when nothing changes.

    Labels named in the feature-labels annotation but absent from *desired* are removed;
    labels the stand-in never managed are left alone (even when *desired* overrides them,
    they are then managed from here on).
    """
    meta = dict(node.get("metadata") or {})
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    managed = _annotation_names(annotations.get(FEATURE_LABELS_ANNOTATION))
    for key in managed - desired.keys():
        labels.pop(key, None)
    labels.update(desired)
    if desired:
        annotations[FEATURE_LABELS_ANNOTATION] = _annotation_text(desired)
    else:
        annotations.pop(FEATURE_LABELS_ANNOTATION, None)
    old_meta = node.get("metadata") or {}
    if labels == (old_meta.get("labels") or {}) and annotations == (
        old_meta.get("annotations") or {}
    ):
        return None
    meta["labels"] = labels
    meta["annotations"] = annotations
    return {**node, "metadata": meta}


class NfdMaster(NodeStandIn):
    """Merges NodeFeature labels onto Nodes in a running :class:`SimServer`."""

    name = "sim-nfd-master"

    def __init__(
        self,
        sim: SimServer,
        namespace: str = "gpustack-system",
        label_namespaces: Iterable[str] = DEFAULT_LABEL_NAMESPACES,
    ) -> None:
        super().__init__(sim)
        self.namespace = namespace
        self.label_namespaces = _normalise_namespaces(label_namespaces)
        # node -> {NodeFeature name: object} and NodeFeature name -> node: an index kept from
        # store events, so a reconcile reads only its node's NodeFeatures at any cluster size.
        self._by_node: dict[str, dict[str, dict[str, Any]]] = {}
        self._node_of: dict[str, str] = {}
        # node -> the labels its feature-labels annotation named when it arrived: what the
        # real cluster's publishers (nfd-worker, GFD, ...) keep publishing for it.
        self._arrived_with: dict[str, dict[str, str]] = {}

    def initial_nodes(self) -> list[str]:
        """Every Node, after indexing the NodeFeatures already stored."""
        for feature in self._node_features():
            self._index(feature)
        nodes = self.sim.store.list("v1", "Node")
        for node in nodes:
            self._remember_arrival(node)
        return [n["metadata"]["name"] for n in nodes]

    def _remember_arrival(self, node: Mapping[str, Any]) -> None:
        meta = node.get("metadata") or {}
        name = meta.get("name")
        if not name or name in self._arrived_with:
            return
        labels = meta.get("labels") or {}
        named = _annotation_names((meta.get("annotations") or {}).get(FEATURE_LABELS_ANNOTATION))
        self._arrived_with[name] = {k: str(labels[k]) for k in named if k in labels}

    # --- events ---------------------------------------------------------------------------

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        """Marks a new Node, and the Nodes a NodeFeature named before and after a change."""
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "Node" and obj.get("apiVersion") == "v1":
            if event_type == "ADDED":
                self._arrived_with.pop(meta.get("name", ""), None)
                self._remember_arrival(obj)
                self.mark(meta.get("name"))
            elif event_type == "DELETED":
                self._arrived_with.pop(meta.get("name", ""), None)
            return
        if obj.get("kind") != "NodeFeature" or not str(obj.get("apiVersion", "")).startswith(
            "nfd.k8s-sigs.io/"
        ):
            return
        if meta.get("namespace") != self.namespace:
            return
        name = meta.get("name", "")
        previous = self._node_of.pop(name, None)
        if previous is not None:
            self._by_node.get(previous, {}).pop(name, None)
            if not self._by_node.get(previous):
                self._by_node.pop(previous, None)
        current = None if event_type == "DELETED" else self._index(obj)
        self.mark(previous)
        self.mark(current)

    def _index(self, feature: dict[str, Any]) -> str | None:
        """Remember *feature* under the node it names; returns that node (None if none)."""
        meta = feature.get("metadata") or {}
        node = (meta.get("labels") or {}).get(NODE_NAME_LABEL)
        if not node:
            return None
        name = meta.get("name", "")
        self._node_of[name] = node
        self._by_node.setdefault(node, {})[name] = feature
        return str(node)

    # --- reconcile ------------------------------------------------------------------------

    def _node_features(self) -> list[dict[str, Any]]:
        if self.sim.registry.by_kind(NODE_FEATURE_API_VERSION, "NodeFeature") is None:
            return []
        features: list[dict[str, Any]] = self.sim.store.list(
            NODE_FEATURE_API_VERSION, "NodeFeature", namespace=self.namespace
        )
        return features

    def reconcile(self, node_name: str) -> bool:
        """Bring one Node's labels in line with its NodeFeatures; True when it was written."""
        node = self.sim.store.get("v1", "Node", node_name)
        if node is None:
            return False
        features = list(self._by_node.get(node_name, {}).values())
        desired = dict(self._arrived_with.get(node_name, {}))
        desired.update(desired_labels(features, self.label_namespaces))
        updated = merge_node_labels(node, desired)
        if updated is None:
            return False
        self.sim.store.update(updated, field_manager="nfd-master")
        log.debug("nfd stand-in updated node labels", node=node_name)
        return True
