"""The worker's topology label for one node (docs/topology.md, "Groups").

Kept apart from :mod:`gpustack_operator.domain.topology` because it needs the flavor's
toleration rule (:func:`gpustack_operator.domain.flavors.flavor_tolerations`), and the
flavor builders in turn read the label through that module.
"""

from __future__ import annotations

from gpustack_operator.domain.flavors import TolerationPolicy, flavor_tolerations, is_managed
from gpustack_operator.domain.labels import TOPOLOGY_LABEL, TOPOLOGY_NONE
from gpustack_operator.domain.topology import TopologyPolicy, group_value, node_levels


def topology_labels(
    node: object, policy: TopologyPolicy | None, tolerations: TolerationPolicy = None
) -> dict[str, str]:
    """``{feature.gpustack.ai/topology: <group>}`` for a node TAS schedules,
    ``{feature.gpustack.ai/topology: none}`` for another managed node while TAS is on (the
    plain flavors select it: docs/topology.md, "Plain nodes"), else ``{}``.

    The group digests the node's level set and the dedication taints its flavor will
    tolerate (the node's own, filtered by *tolerations*): nodes of one group share every
    frozen field of a TAS flavor, and a change of either moves the node to a new flavor.
    """
    if policy is None or not policy.enabled:
        return {}
    levels = node_levels(node, policy)
    if not levels:
        return {TOPOLOGY_LABEL: TOPOLOGY_NONE} if is_managed(node) else {}
    return {TOPOLOGY_LABEL: group_value(levels, flavor_tolerations([node], tolerations))}
