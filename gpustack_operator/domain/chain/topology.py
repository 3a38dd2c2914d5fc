"""Kueue Topology-Aware Scheduling from the topology labels a cluster publishes (docs/topology.md).

A node's *level set* is the ordered list of node-label keys, coarse to fine, that place it in
the data centre, always ending in ``kubernetes.io/hostname``. It comes from the platform's
published labels (GKE, EKS, NVIDIA GFD, NVIDIA Topograph) or from a list a person gives in
the policy. Kueue drops a node that lacks any level of its flavor's Topology without a word,
so nodes are grouped by the exact level set they carry: the worker publishes the group as
the node label ``feature.gpustack.ai/topology`` (a digest of the level set and of the
dedication taints the flavor will tolerate), the flavor pins it, and one ``Topology`` exists
per level set, named by its content. A TAS flavor's frozen fields (``nodeLabels``,
``tolerations``, ``topologyName``) are then a function of its name: a change yields a new
name, never a forbidden patch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.labels import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
)
from gpustack_operator.domain.node.nodetopology import (
    TopologyPolicy,
    missing_level,
    node_group,
    node_levels,
    topology_name,
)
from gpustack_operator.domain.nodeview import labels_of, name_of


def topology_manifest(
    levels: Sequence[str], version: KueueVersion = KueueVersion.V1BETA2
) -> dict[str, Any]:
    """The Kueue ``Topology`` of *levels* (coarse to fine, ending in the hostname)."""
    return {
        "apiVersion": version.api_version,
        "kind": "Topology",
        "metadata": {
            "name": topology_name(levels),
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
        },
        "spec": {"levels": [{"nodeLabel": key} for key in levels]},
    }


def topology_levels(topology: Mapping[str, Any]) -> tuple[str, ...]:
    """The level keys of a Topology object."""
    spec = topology.get("spec") or {}
    return tuple(
        str(level.get("nodeLabel", ""))
        for level in spec.get("levels") or ()
        if isinstance(level, Mapping)
    )


def desired_topologies(
    nodes: Iterable[object],
    policy: TopologyPolicy,
    version: KueueVersion = KueueVersion.V1BETA2,
    *,
    is_member: Any = None,
) -> dict[str, dict[str, Any]]:
    """One Topology per level set the (TAS) *nodes* carry, by name (sorted). *is_member*
    picks the nodes that count (default: all)."""
    found: dict[str, tuple[str, ...]] = {}
    for node in nodes:
        if is_member is not None and not is_member(node):
            continue
        levels = node_levels(node, policy)
        if levels and node_group(node):
            found.setdefault(topology_name(levels), levels)
    return {name: topology_manifest(found[name], version) for name in sorted(found)}


def domain_tree(
    nodes: Iterable[object], levels: Sequence[str], devices: Mapping[str, int]
) -> list[str]:
    """Indented lines of the domain tree of *nodes* over *levels* (hostname last), each
    domain with the devices under it (*devices*: node name -> count)."""
    totals: dict[tuple[str, ...], int] = {}
    for node in sorted(nodes, key=name_of):
        labels = labels_of(node)
        path = tuple(labels.get(key, "") for key in levels)
        for depth in range(1, len(path) + 1):
            totals[path[:depth]] = totals.get(path[:depth], 0) + devices.get(name_of(node), 0)
    lines = []
    for path in sorted(totals):
        key = levels[len(path) - 1].rpartition("/")[2]
        lines.append(f"{'  ' * (len(path) - 1)}{key}={path[-1]}: {totals[path]}")
    return lines


def explain_topology(node: object, policy: TopologyPolicy) -> str:
    """One line for ``plan --explain``: the Topology the node is in (and a level it lacks
    that would have put it in a larger set), or why it is in none."""
    if not policy.enabled:
        return f"none: Topology-Aware Scheduling is off ({policy.reason or 'policy'})"
    levels = node_levels(node, policy)
    lacking = missing_level(node, policy)
    if not levels:  # no level published: nothing to say, its pools are as without TAS
        return f"none: it lacks {lacking}" if lacking else ""
    text = f"{topology_name(levels)} (levels: {' > '.join(levels)})"
    if lacking:
        text += f"; lacks {lacking}, so it is grouped apart from nodes that carry it"
    return text
