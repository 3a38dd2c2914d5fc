"""A node's topology level set and group (docs/topology.md): which levels the node publishes,
the group label the worker writes for it and the Topology that group names, read from one Node.

The Topology objects and TAS flavors built from these groups are the chain's
(``gpustack_operator.domain.chain.topology``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpustack_operator.domain.labels import (
    TOPOLOGY_LABEL,
)
from gpustack_operator.domain.node.taints import Toleration
from gpustack_operator.domain.nodeview import labels_of
from gpustack_operator.domain.profiles import (
    TAS_QUEUE_SUFFIX,
    derived_name,
    fnv1a_64,
)
from gpustack_operator.domain.validation import is_valid_label_key

HOSTNAME_LABEL: Final = "kubernetes.io/hostname"


ZONE_LABEL: Final = "topology.kubernetes.io/zone"


REGION_LABEL: Final = "topology.kubernetes.io/region"


CLIQUE_LABEL: Final = "nvidia.com/gpu.clique"


MAX_LEVELS: Final = 16
"""Kueue's ``Topology.spec.levels`` limit (apis/kueue/v1beta2/topology_types.go)."""


TOPOLOGY_NAME_PREFIX: Final = "gpustack-topology-"


_GKE: Final = (
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
)


_EKS: Final = tuple(f"topology.k8s.aws/network-node-layer-{i}" for i in range(1, 5))


_TOPOGRAPH_TIER: Final = "fabric.topograph.run/tier-"


_TOPOGRAPH_ACCELERATOR: Final = (
    "accelerator.topograph.run/domain",
    "accelerator.topograph.run/sub-domain",
)


_TOPOGRAPH_05: Final = (
    "network.topology.nvidia.com/core",
    "network.topology.nvidia.com/spine",
    "network.topology.nvidia.com/leaf",
    "network.topology.nvidia.com/accelerator",
)


_TOPOGRAPH_01: Final = (
    "network.topology.nvidia.com/datacenter",
    "network.topology.nvidia.com/spine",
    "network.topology.nvidia.com/block",
    "network.topology.nvidia.com/accelerator",
)


_GROUP: Final = re.compile(r"[0-9a-f]{16}-[0-9a-f]{8}")


@dataclass(frozen=True)
class TopologyPolicy:
    """The TAS part of the chain policy (docs/topology.md, "The switch").

    ``enabled``: build TAS flavors where nodes publish levels (the default); off keeps the
    chain as it was before TAS. ``levels``: a person's level list (coarse to fine) used
    instead of the published sets; every node then gets at least ``kubernetes.io/hostname``.
    ``reason``: why TAS is off when the worker turned it off itself (an old Kueue).
    """

    enabled: bool = True
    levels: tuple[str, ...] = ()
    reason: str = ""

    def __post_init__(self) -> None:
        levels = tuple(self.levels)
        if levels and levels[-1] == HOSTNAME_LABEL:
            levels = levels[:-1]
        bad = [lv for lv in levels if not is_valid_label_key(lv)]
        if bad:
            raise ValueError(f"topology level {', '.join(bad)}: give node-label keys")
        if HOSTNAME_LABEL in levels:
            raise ValueError(f"{HOSTNAME_LABEL} may only be the last topology level")
        if len(set(levels)) != len(levels):
            raise ValueError("topology levels must be unique")
        if len(levels) + 1 > MAX_LEVELS:
            raise ValueError(f"at most {MAX_LEVELS - 1} topology levels besides the hostname")
        object.__setattr__(self, "levels", levels)

    def off(self, reason: str) -> TopologyPolicy:
        """This policy turned off, saying *reason* (logged once by whoever turned it off)."""
        return TopologyPolicy(enabled=False, levels=self.levels, reason=reason)


def _prefix(labels: Mapping[str, str], keys: Sequence[str]) -> tuple[str, ...]:
    """The longest run of *keys* from the first on that the node carries (non-empty)."""
    out: list[str] = []
    for key in keys:
        if not labels.get(key):
            break
        out.append(key)
    return tuple(out)


def _topograph_tiers(labels: Mapping[str, str]) -> tuple[str, ...]:
    """``fabric.topograph.run/tier-N`` ... ``tier-0``: tier 0 is nearest the node, so the
    contiguous run from tier 0 up, reversed, is coarse to fine."""
    tiers: list[str] = []
    while labels.get(f"{_TOPOGRAPH_TIER}{len(tiers)}"):
        tiers.append(f"{_TOPOGRAPH_TIER}{len(tiers)}")
    return tuple(reversed(tiers))


def published_levels(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The levels (without the hostname) a node publishes, from the first source it carries:
    Topograph >= 1.0, Topograph <= 0.5 (and 0.1's keys), GKE, EKS, then GFD's clique alone.
    GKE and EKS sets get GFD's clique as their finest level when the node carries it."""
    tiers = _topograph_tiers(labels)
    accelerator = _prefix(labels, _TOPOGRAPH_ACCELERATOR)
    if tiers or accelerator:
        return tiers + accelerator
    for keys in (_TOPOGRAPH_05, _TOPOGRAPH_01):
        tree = _prefix(labels, keys[:3])
        if tree or labels.get(keys[3]):
            return tree + ((keys[3],) if labels.get(keys[3]) else ())
    for cloud in (_GKE, _EKS):
        found = _prefix(labels, cloud)
        if found:
            return found + ((CLIQUE_LABEL,) if labels.get(CLIQUE_LABEL) else ())
    if labels.get(CLIQUE_LABEL):
        return (CLIQUE_LABEL,)
    return ()


PUBLISHED_LEVEL_LABELS: Final = frozenset(
    {
        HOSTNAME_LABEL,
        CLIQUE_LABEL,
        *_GKE,
        *_EKS,
        *_TOPOGRAPH_ACCELERATOR,
        *_TOPOGRAPH_05,
        *_TOPOGRAPH_01,
    }
)


def is_level_label(key: str, policy: TopologyPolicy | None = None) -> bool:
    """Whether a node label can place a node in a level set (the worker then looks again
    at a node whose value of it changes)."""
    return (
        key in PUBLISHED_LEVEL_LABELS
        or key.startswith(_TOPOGRAPH_TIER)
        or (policy is not None and key in policy.levels)
    )


def node_levels(node: object, policy: TopologyPolicy) -> tuple[str, ...]:
    """The node's level set, ending in ``kubernetes.io/hostname``; ``()`` when the node is
    not scheduled by TAS (TAS off, no hostname label, or it publishes no level and the policy
    gives no list: such nodes keep the pools they had before TAS)."""
    if not policy.enabled:
        return ()
    labels = labels_of(node)
    if not labels.get(HOSTNAME_LABEL):
        return ()
    if policy.levels:
        return (*_prefix(labels, policy.levels), HOSTNAME_LABEL)
    found = published_levels(labels)
    return (*found, HOSTNAME_LABEL) if found else ()


def missing_level(node: object, policy: TopologyPolicy) -> str:
    """The first level label the node lacks while it carries a coarser one of the same set
    (``""`` when none): such a node lands in a smaller level set, i.e. another Topology."""
    if not policy.enabled:
        return ""
    labels = labels_of(node)
    keys: Sequence[str]
    if policy.levels:
        keys = policy.levels
    else:
        found = published_levels(labels)
        candidates = [s for s in (_GKE, _EKS[:3], _TOPOGRAPH_05[:3]) if found and found[0] == s[0]]
        keys = candidates[0] if candidates else ()
    have = _prefix(labels, keys)
    if not have and not policy.levels:
        return ""
    return keys[len(have)] if len(have) < len(keys) else ""


def levels_digest(levels: Sequence[str]) -> str:
    """16 hex digits of FNV-1a-64 over the ordered level keys."""
    return f"{fnv1a_64(chr(0).join(levels).encode()):016x}"


def tolerations_digest(tolerations: Iterable[Toleration]) -> str:
    """8 hex digits over a flavor's tolerations, in order."""
    return manifests_digest([t.manifest() for t in tolerations])


def manifests_digest(tolerations: Sequence[Mapping[str, Any]]) -> str:
    """:func:`tolerations_digest` of tolerations as a flavor's spec holds them."""
    text = json.dumps(list(tolerations), sort_keys=True)
    return f"{fnv1a_64(text.encode()) & 0xFFFFFFFF:08x}"


def topology_name(levels: Sequence[str]) -> str:
    """``gpustack-topology-<16 hex>``: the Topology of a level set, named by its content."""
    return topology_name_of_digest(levels_digest(levels))


def topology_name_of_digest(digest: str) -> str:
    return TOPOLOGY_NAME_PREFIX + digest


def group_value(levels: Sequence[str], tolerations: Iterable[Toleration]) -> str:
    """The ``feature.gpustack.ai/topology`` value: ``<levels digest>-<tolerations digest>``."""
    return f"{levels_digest(levels)}-{tolerations_digest(tolerations)}"


def parse_group(value: str | None) -> tuple[str, str] | None:
    """``(levels digest, tolerations digest)`` of a group label value, ``None`` if invalid."""
    if not value or not _GROUP.fullmatch(value):
        return None
    levels, _, tolerations = value.partition("-")
    return levels, tolerations


def node_group(node: object) -> str:
    """The group label the node carries (``""`` if none or not one the worker writes)."""
    value = labels_of(node).get(TOPOLOGY_LABEL, "")
    return value if parse_group(value) else ""


TAS_FLAVOR_SUFFIX: Final = ".tas-"
"""Joins a flavor's name and its topology group (``<flavor>.tas-<levels>-<tolerations>``)."""


def tas_flavor_name(flavor: str, group: str) -> str:
    return f"{flavor}{TAS_FLAVOR_SUFFIX}{group}"


def tas_queue_name(queue: str) -> str:
    """``<queue>-tas``: a ClusterQueue (and so a pool) fed by TAS flavors, a DNS label
    wherever *queue* is one (docs/topology.md, "Names"); a queue never mixes TAS and
    non-TAS flavors."""
    return derived_name(queue, TAS_QUEUE_SUFFIX)
