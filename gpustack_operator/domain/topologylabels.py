"""The worker's topology label for one node (docs/topology.md, "Groups").

Kept apart from :mod:`gpustack_operator.domain.topology` because it needs the flavor's
toleration rule (:func:`gpustack_operator.domain.flavors.flavor_tolerations`), and the
flavor builders in turn read the label through that module.
"""

from __future__ import annotations

from gpustack_operator.domain.flavors import TolerationPolicy, flavor_tolerations
from gpustack_operator.domain.labels import TOPOLOGY_LABEL
from gpustack_operator.domain.topology import TopologyPolicy, group_value, node_levels


def topology_labels(
    node: object, policy: TopologyPolicy | None, tolerations: TolerationPolicy = None
) -> dict[str, str]:
    """``{feature.gpustack.ai/topology: <group>}`` for a node TAS schedules, else ``{}``.

    The group digests the node's level set and the dedication taints its flavor will
    tolerate (the node's own, filtered by *tolerations*): nodes of one group share every
    frozen field of a TAS flavor, and a change of either moves the node to a new flavor.
    """
    if policy is None:
        return {}
    levels = node_levels(node, policy)
    if not levels:
        return {}
    return {TOPOLOGY_LABEL: group_value(levels, flavor_tolerations([node], tolerations))}
