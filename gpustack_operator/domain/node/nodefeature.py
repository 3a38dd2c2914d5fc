"""NFD ``NodeFeature`` objects: how the device manager and the worker publish Node labels.

Each writer owns one NodeFeature per node in the system namespace and replaces its whole
``spec.labels`` (docs/worker.md). The NFD master merges them onto the Node; ``merge_node_features``
reproduces that merge so ``plan`` can compute what the Node will look like.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Final

from gpustack_operator.domain.comparison import Compare, ObjectComparison
from gpustack_operator.domain.labels import (
    ACCELERATABLE_LABEL,
    ACCELERATABLE_PREFIX,
    GENERAL_PREFIX,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_LABEL,
    NFD_NODE_NAME_LABEL,
    PART_OF_DEVICE_MANAGER,
    PART_OF_LABEL,
    PART_OF_WORKER,
    SUFFIX_SLICED,
    TOPOLOGY_LABEL,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.capacity import worker_capacity_labels
from gpustack_operator.domain.node.nodeprofiles import topology_labels
from gpustack_operator.domain.node.nodetopology import TopologyPolicy
from gpustack_operator.domain.node.taints import TolerationPolicy
from gpustack_operator.domain.nodeview import (
    is_deleting,
    labels_of,
    name_of,
    string_map,
    uid_of,
)
from gpustack_operator.domain.profiles import fnv1a_64
from gpustack_operator.domain.validation import (
    DNS_SUBDOMAIN_MAX_LEN,
    is_valid_dns_subdomain,
    is_valid_label_value,
)

NODE_FEATURE_API_VERSION: Final = "nfd.k8s-sigs.io/v1alpha1"
NODE_FEATURE_KIND: Final = "NodeFeature"
WORKER_SUFFIX: Final = "-gpustack-worker"
DEVICE_MANAGER_SUFFIX: Final = "-gpustack-device-manager"
DEFAULT_SYSTEM_NAMESPACE: Final = "gpustack-system"
_WORKER_VIEW_SUFFIXES: Final = (".cpu", ".ram", ".storage", ".z-flavor", ".z-queue", ".z-cohort")


def node_feature_name(node_name: str, suffix: str) -> str:
    """``<node><suffix>``, shortened with a hash when it would pass 253 characters."""
    name = node_name + suffix
    if len(name) <= DNS_SUBDOMAIN_MAX_LEN:
        return name
    digest = f"{fnv1a_64(node_name.encode()):016x}"
    keep = DNS_SUBDOMAIN_MAX_LEN - len(suffix) - len(digest) - 1
    head = node_name[:keep].rstrip(".-")
    return f"{head}-{digest}{suffix}"


def can_publish_for(node_name: str) -> bool:
    """NFD selects NodeFeatures by a label holding the node name, so the name must be a valid
    label value (at most 63 characters); longer node names cannot be labelled through NFD."""
    return bool(node_name) and is_valid_dns_subdomain(node_name) and is_valid_label_value(node_name)


def build_node_feature(
    node_name: str,
    node_uid: str,
    labels: Mapping[str, str],
    *,
    system_namespace: str,
    suffix: str,
    part_of: str,
) -> dict[str, Any] | None:
    """A NodeFeature manifest carrying *labels* for *node_name*, owned by the Node.

    ``None`` when NFD could not attribute it (see :func:`can_publish_for`). Without a node
    uid (offline ``plan``) the owner reference is left out.
    """
    if not can_publish_for(node_name):
        return None
    meta: dict[str, Any] = {
        "name": node_feature_name(node_name, suffix),
        "namespace": system_namespace,
        "labels": {
            MANAGED_BY_LABEL: MANAGED_BY_VALUE,
            NFD_NODE_NAME_LABEL: node_name,
            PART_OF_LABEL: part_of,
        },
    }
    if node_uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node_name,
                "uid": node_uid,
                "controller": True,
                "blockOwnerDeletion": False,
            }
        ]
    return {
        "apiVersion": NODE_FEATURE_API_VERSION,
        "kind": NODE_FEATURE_KIND,
        "metadata": meta,
        "spec": {"labels": dict(sorted(labels.items()))},
    }


NODE_FEATURE_COMPARISON: Final = ObjectComparison({"spec.labels": Compare.EXACT})
"""How a NodeFeature above is compared (docs/worker.md, "Writes and ownership"): its labels
are the writer's whole, so a label that is no longer published is removed."""


def worker_node_feature(
    node: object,
    system_namespace: str,
    manufacturers: Mapping[str, Manufacturer],
    slices: Iterable[Mapping[str, Any]] = (),
    topology: TopologyPolicy | None = None,
    tolerations: TolerationPolicy = None,
) -> dict[str, Any] | None:
    """The worker's NodeFeature ``<node>-gpustack-worker`` for *node* (docs/labels.md).

    ``None`` for a node being deleted or one NFD cannot label (name over 63 characters).
    With *topology* it also carries the node's TAS group (docs/topology.md, "Groups").
    """
    if is_deleting(node):
        return None
    labels = worker_capacity_labels(node, manufacturers, slices)
    if topology is not None:
        labels = {**labels, **topology_labels(node, topology, tolerations)}
    return worker_node_feature_with(node, labels, system_namespace)


def worker_node_feature_with(
    node: object, capacity_labels: Mapping[str, str], system_namespace: str
) -> dict[str, Any] | None:
    """:func:`worker_node_feature` from the node's capacity labels computed beforehand
    (``worker_capacity_labels``; the worker caches them per Node version)."""
    if is_deleting(node):
        return None
    return build_node_feature(
        name_of(node),
        uid_of(node),
        capacity_labels,
        system_namespace=system_namespace,
        suffix=WORKER_SUFFIX,
        part_of=PART_OF_WORKER,
    )


def device_manager_node_feature(
    node_name: str, node_uid: str, labels: Mapping[str, str], system_namespace: str
) -> dict[str, Any] | None:
    """The device manager's NodeFeature ``<node>-gpustack-device-manager``
    (docs/device-manager.md)."""
    return build_node_feature(
        node_name,
        node_uid,
        labels,
        system_namespace=system_namespace,
        suffix=DEVICE_MANAGER_SUFFIX,
        part_of=PART_OF_DEVICE_MANAGER,
    )


def is_worker_label(key: str) -> bool:
    """A Node label the worker's NodeFeature owns (replaced on every merge)."""
    if key in (MANAGED_LABEL, TOPOLOGY_LABEL) or key.startswith(GENERAL_PREFIX):
        return True
    return key.startswith(ACCELERATABLE_PREFIX) and key.endswith(_WORKER_VIEW_SUFFIXES)


def is_device_manager_label(key: str) -> bool:
    """A Node label the device manager's NodeFeature owns (user slicing input excluded)."""
    if key == ACCELERATABLE_LABEL:
        return True
    return (
        key.startswith(ACCELERATABLE_PREFIX)
        and not key.endswith(SUFFIX_SLICED)
        and not is_worker_label(key)
    )


def merge_node_features(
    node: Mapping[str, Any], node_features: Iterable[Mapping[str, Any]], *, owned: str
) -> dict[str, Any]:
    """A copy of *node* with the labels of its NodeFeatures merged, as NFD master would.

    *owned* (``"worker"`` or ``"device-manager"``) says which writer's earlier labels are
    removed first, since a NodeFeature's labels replace what it published before (docs/worker.md).
    """
    name = name_of(node)
    result = copy.deepcopy(dict(node))
    meta = result.setdefault("metadata", {})
    if not isinstance(meta, dict):
        meta = result["metadata"] = {}
    stale = is_worker_label if owned == "worker" else is_device_manager_label
    labels = {k: v for k, v in labels_of(node).items() if not stale(k)}
    for feature in node_features:
        if labels_of(feature).get(NFD_NODE_NAME_LABEL) != name:
            continue
        spec = feature.get("spec")
        labels.update(string_map(spec.get("labels") if isinstance(spec, Mapping) else None))
    meta["labels"] = dict(sorted(labels.items()))
    return result
