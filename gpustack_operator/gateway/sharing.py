"""Capacity several vCluster tenants share, counted once (docs/worker-gateway.md, "Tenants").

Tenants on the same host nodes each build pools over the same cards: their ClusterQueues'
quotas are the host's capacity seen several times. A tenant's flavors carry the fingerprint
of the host nodes they cover (``gpustack.ai/host-nodes``, docs/tenants.md, "Flavors"); pools
whose flavors cover the same host nodes share one capacity. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpustack_operator.domain.chain.tenancy import HOST_NODES_ANNOTATION
from gpustack_operator.domain.nodeview import annotations_of
from gpustack_operator.gateway.pools import sum_quantities

JSON = dict[str, Any]


def host_nodes(flavors: Iterable[Mapping[str, Any]]) -> list[str]:
    """The host-node fingerprints of a pool's *flavors* (tenant flavors carry one), sorted."""
    found = {annotations_of(f).get(HOST_NODES_ANNOTATION, "") for f in flavors}
    return sorted(found - {""})


def _key(pool: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(pool.get("hostNodes") or ())


def share(pools: Sequence[JSON]) -> tuple[list[JSON], list[JSON], dict[str, str]]:
    """*pools* (``pool_entry`` dicts) with ``sharedWith`` (the other clusters' pools over the
    same host nodes), the shared capacities (one per set of host nodes two or more clusters
    see: its quota once, and the pools sharing it), and the nominal quota totals with each
    shared capacity counted once."""
    groups: dict[tuple[str, ...], list[JSON]] = {}
    for pool in pools:
        if _key(pool):
            groups.setdefault(_key(pool), []).append(pool)
    shared = {k: g for k, g in groups.items() if len({p["cluster"] for p in g}) > 1}
    items = []
    for pool in pools:
        entry = dict(pool)
        group = shared.get(_key(pool))
        if group is not None:
            entry["sharedWith"] = [
                {"cluster": p["cluster"], "name": p["name"]}
                for p in group
                if p["cluster"] != pool["cluster"]
            ]
        items.append(entry)
    capacities = [
        {
            "hostNodes": list(key),
            "clusters": sorted({p["cluster"] for p in group}),
            "pools": [{"cluster": p["cluster"], "name": p["name"]} for p in group],
            "nominalQuota": group[0]["nominalQuota"],
        }
        for key, group in sorted(shared.items())
    ]
    counted: list[JSON] = [p for p in pools if _key(p) not in shared]
    counted += [group[0] for group in shared.values()]
    totals = sum_quantities(
        (resource, amount) for p in counted for resource, amount in p["nominalQuota"].items()
    )
    return items, capacities, totals
