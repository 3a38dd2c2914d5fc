"""Kueue TAS from published topology labels (docs/topology.md).

The dumps are examples/topology-*.yaml, built from the labels GKE, EKS, NVIDIA GFD and
NVIDIA Topograph document (cited in docs/topology.md, "Published level sets"). For each:
every Topology ends in ``kubernetes.io/hostname``, every node of a TAS flavor carries every
level of its Topology, a flavor's nodeLabels select exactly its own nodes, and no queue
mixes TAS and non-TAS flavors.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.commands.plan import read_cluster_file
from gpustack_operator.commands.policy_flags import topology_policy
from gpustack_operator.commands.queues import pool_rows, queue_levels, render_table
from gpustack_operator.domain.chain.flavors import (
    flavor_nodes,
    selects_plain_nodes,
)
from gpustack_operator.domain.chain.teams import team_queue_name
from gpustack_operator.domain.chain.topology import explain_topology, topology_levels
from gpustack_operator.domain.labels import TOPOLOGY_LABEL, TOPOLOGY_NONE
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.node.nodetopology import (
    HOSTNAME_LABEL,
    TopologyPolicy,
    missing_level,
    node_levels,
    tas_queue_name,
)
from gpustack_operator.domain.nodeview import labels_of, name_of
from gpustack_operator.domain.plan.desired import DesiredState, desired_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.profiles import parse_node_profile, strip_tas_suffix
from gpustack_operator.domain.validation import is_valid_dns_label
from tests.unit.domain.nodes import planned_flavors

MFRS = default_manufacturers()
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DUMPS = sorted(p.name for p in EXAMPLES.glob("topology-*.yaml"))
GKE = (
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
)
EKS = tuple(f"topology.k8s.aws/network-node-layer-{i}" for i in range(1, 5))


@cache
def _nodes(name: str) -> tuple[Mapping[str, Any], ...]:
    return tuple(read_cluster_file(EXAMPLES / name)[0])


def _state(name: str, policy: ChainPolicy | None = None) -> DesiredState:
    return desired_state(_nodes(name), ["default"], policy or ChainPolicy(manufacturers=MFRS))


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {HOSTNAME_LABEL: name, **labels}}}


def test_the_five_dumps_are_there() -> None:
    assert DUMPS == [
        "topology-eks-p5.yaml",
        "topology-gb200-rack.yaml",
        "topology-gke-a3-ultra.yaml",
        "topology-mixed.yaml",
        "topology-topograph.yaml",
    ]


@pytest.mark.parametrize("dump", DUMPS)
def test_plan_of_each_dump_is_a_sound_tas_chain(dump: str) -> None:
    state = _state(dump)
    topologies = {t["metadata"]["name"]: topology_levels(t) for t in state.topologies}
    assert topologies, "every dump has nodes publishing levels"
    for levels in topologies.values():
        assert levels[-1] == HOSTNAME_LABEL and HOSTNAME_LABEL not in levels[:-1]
        assert len(set(levels)) == len(levels) <= 16
    members = flavor_nodes(state.nodes, MFRS)
    tas_flavors = set()
    for flavor in state.resource_flavors:
        name, spec = flavor["metadata"]["name"], flavor["spec"]
        nodes = members[name]
        # nodeLabels select exactly the flavor's own nodes: no overlap between flavors
        selected = [
            n
            for n in state.nodes
            if all(labels_of(n).get(k) == v for k, v in spec["nodeLabels"].items())
        ]
        if "topologyName" not in spec:
            continue
        tas_flavors.add(name)
        assert 1 <= len(spec["nodeLabels"]) <= 8
        assert sorted(map(name_of, selected)) == sorted(map(name_of, nodes))
        levels = topologies[spec["topologyName"]]
        for node in nodes:
            assert all(labels_of(node).get(key) for key in levels), name_of(node)
    assert tas_flavors
    for queue in state.cluster_queues:
        names = [f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]]
        kinds = {n in tas_flavors for n in names}
        assert len(kinds) == 1, f"{queue['metadata']['name']} mixes TAS and non-TAS flavors"
        name = queue["metadata"]["name"]
        assert name.endswith("-tas") == kinds.pop()
        # Kueue labels Pods with their ClusterQueue's name only when it is a DNS label.
        if is_valid_dns_label(strip_tas_suffix(name)):
            assert is_valid_dns_label(name), name
    used = {f["spec"].get("topologyName") for f in state.resource_flavors} - {None}
    assert used == set(topologies), "one Topology per level set in use, none unused"
    order = [o["kind"] for o in state.objects()]
    assert order.index("Topology") < order.index("ResourceFlavor")


def test_gke_blocks_and_sub_blocks() -> None:
    state = _state("topology-gke-a3-ultra.yaml")
    [topology] = state.topologies
    assert topology_levels(topology) == (*GKE, HOSTNAME_LABEL)
    assert topology["apiVersion"] == "kueue.x-k8s.io/v1beta2"


def test_eks_layer_four_is_a_level_set_of_its_own() -> None:
    state = _state("topology-eks-p5.yaml")
    sets = sorted(topology_levels(t) for t in state.topologies)
    assert sets == [(*EKS[:3], HOSTNAME_LABEL), (*EKS, HOSTNAME_LABEL)]
    device = [f for f in state.resource_flavors if "nvidia" in f["metadata"]["name"]]
    quotas = {
        f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}
        for q in state.cluster_queues
        for g in q["spec"]["resourceGroups"]
        for f in g["flavors"]
    }
    assert sorted(quotas[f["metadata"]["name"]]["nvidia.com/gpu"] for f in device) == ["16", "32"]


def test_gb200_cliques() -> None:
    state = _state("topology-gb200-rack.yaml")
    [topology] = state.topologies
    assert topology_levels(topology) == ("nvidia.com/gpu.clique", HOSTNAME_LABEL)
    cliques = {labels_of(n)["nvidia.com/gpu.clique"] for n in state.nodes}
    assert len(cliques) == 2


def test_topograph_tiers_run_from_far_to_near_and_old_keys_are_read() -> None:
    state = _state("topology-topograph.yaml")
    sets = sorted(topology_levels(t) for t in state.topologies)
    tiers = tuple(f"fabric.topograph.run/tier-{i}" for i in (2, 1, 0))
    old = tuple(f"network.topology.nvidia.com/{k}" for k in ("core", "spine", "leaf"))
    assert sets == [(*tiers, HOSTNAME_LABEL), (*old, HOSTNAME_LABEL)]


def test_nodes_without_levels_keep_the_pools_of_a_chain_without_tas() -> None:
    """The mixed dump's two nodes without levels keep the names and quotas they have with
    TAS off; the worked example (no levels anywhere) is unchanged, proven by the other
    domain tests, which all run with TAS on by default."""
    on = _state("topology-mixed.yaml")
    off = _state(
        "topology-mixed.yaml",
        ChainPolicy(manufacturers=MFRS, topology=TopologyPolicy(enabled=False)),
    )
    assert not off.topologies
    assert all(
        "topologyName" not in f["spec"] and TOPOLOGY_LABEL not in f["spec"]["nodeLabels"]
        for f in off.resource_flavors
    )
    plain_on = {
        f["metadata"]["name"]: f for f in on.resource_flavors if "topologyName" not in f["spec"]
    }
    members_on = flavor_nodes(on.nodes, MFRS)
    members_off = flavor_nodes(off.nodes, MFRS)
    for name in plain_on:
        assert name in {f["metadata"]["name"] for f in off.resource_flavors}
        assert sorted(map(name_of, members_on[name])) == ["gke-mix-5", "gke-mix-6"]
        assert len(members_off[name]) == 6  # without TAS every node shares one flavor
    plain_queues = {q["metadata"]["name"] for q in on.cluster_queues} & {
        q["metadata"]["name"] for q in off.cluster_queues
    }
    assert len(plain_queues) == 2


def _selects(flavor: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    labels = labels_of(node)
    return all(labels.get(k) == v for k, v in flavor["spec"]["nodeLabels"].items())


def test_plain_flavors_select_only_the_plain_nodes_of_their_profile() -> None:
    """docs/topology.md, "Plain nodes": in the mixed dump TAS and plain nodes share one
    profile; the plain nodes carry ``feature.gpustack.ai/topology=none`` and the plain
    flavors select it, so no plain flavor's ``nodeLabels`` match a TAS node."""
    on = _state("topology-mixed.yaml")
    plain = [f for f in on.resource_flavors if "topologyName" not in f["spec"]]
    assert plain
    for flavor in plain:
        assert flavor["spec"]["nodeLabels"][TOPOLOGY_LABEL] == TOPOLOGY_NONE
        selected = sorted(name_of(n) for n in on.nodes if _selects(flavor, n))
        assert selected == ["gke-mix-5", "gke-mix-6"], flavor["metadata"]["name"]
    tas_nodes = [n for n in on.nodes if labels_of(n).get(TOPOLOGY_LABEL) != TOPOLOGY_NONE]
    assert len(tas_nodes) == 4
    # Off, no node carries it and no flavor selects it.
    off = _state(
        "topology-mixed.yaml",
        ChainPolicy(manufacturers=MFRS, topology=TopologyPolicy(enabled=False)),
    )
    assert not any(TOPOLOGY_LABEL in labels_of(n) for n in off.nodes)


def test_a_plain_flavor_selects_the_label_only_once_all_its_nodes_carry_it() -> None:
    """The upgrade order (docs/topology.md, "Plain nodes"): a flavor whose nodes do not all
    carry the label yet is written without the selector, so no Pod is given a selector its
    nodes lack; a flavor of TAS nodes never selects ``none``."""
    on = _state("topology-mixed.yaml")
    nodes = [copy.deepcopy(dict(n)) for n in on.nodes]
    next(n for n in nodes if name_of(n) == "gke-mix-6")["metadata"]["labels"].pop(TOPOLOGY_LABEL)
    flavors = planned_flavors(nodes, MFRS, topology_on=True)
    plain = [f for f in flavors.values() if "topologyName" not in f["spec"]]
    assert plain
    assert all(TOPOLOGY_LABEL not in f["spec"]["nodeLabels"] for f in plain)
    tas = [f for f in flavors.values() if "topologyName" in f["spec"]]
    assert tas
    assert all(f["spec"]["nodeLabels"][TOPOLOGY_LABEL] != TOPOLOGY_NONE for f in tas)
    assert not selects_plain_nodes([], topology_on=True)


def _taint(node: Mapping[str, Any], key: str) -> dict[str, Any]:
    changed = copy.deepcopy(dict(node))
    changed.setdefault("spec", {})["taints"] = [{"key": key, "effect": "NoSchedule"}]
    return changed


def test_frozen_fields_change_only_with_the_name() -> None:
    """A change of a TAS flavor's tolerations or of its nodes' level set gives a flavor of
    another name; the ClusterQueue keeps its name; the same nodes give the same names."""
    nodes = list(_nodes("topology-gke-a3-ultra.yaml"))
    base = desired_state(nodes, [], ChainPolicy(manufacturers=MFRS))
    again = desired_state(list(reversed(nodes)), [], ChainPolicy(manufacturers=MFRS))
    assert base.objects() == again.objects()
    tainted = desired_state(
        [_taint(n, "dedicated") for n in nodes], [], ChainPolicy(manufacturers=MFRS)
    )
    relevelled_nodes = []
    for node in nodes:
        changed = copy.deepcopy(dict(node))
        del changed["metadata"]["labels"]["cloud.google.com/gce-topology-host"]
        relevelled_nodes.append(changed)
    relevelled = desired_state(relevelled_nodes, [], ChainPolicy(manufacturers=MFRS))

    def frozen(state: DesiredState) -> dict[str, Any]:
        return {
            f["metadata"]["name"]: (
                f["spec"]["nodeLabels"],
                f["spec"]["tolerations"],
                f["spec"]["topologyName"],
            )
            for f in state.resource_flavors
        }

    for other in (tainted, relevelled):
        assert not set(frozen(base)) & set(frozen(other))
        assert [q["metadata"]["name"] for q in other.cluster_queues] == [
            q["metadata"]["name"] for q in base.cluster_queues
        ]
    assert all(
        [t["key"] for t in frozen_fields[1]] == ["dedicated"]
        for frozen_fields in frozen(tainted).values()
    )
    assert {t["metadata"]["name"] for t in relevelled.topologies}.isdisjoint(
        {t["metadata"]["name"] for t in base.topologies}
    )


def test_level_detection() -> None:
    auto = TopologyPolicy()
    assert node_levels(_node("a"), auto) == ()
    assert node_levels(_node("a", **{EKS[0]: "x", EKS[1]: "y", EKS[2]: "z"}), auto) == (
        *EKS[:3],
        HOSTNAME_LABEL,
    )
    # a missing middle level cuts the set there
    cut = _node("a", **{GKE[0]: "b", GKE[2]: "h"})
    assert node_levels(cut, auto) == (GKE[0], HOSTNAME_LABEL)
    assert missing_level(cut, auto) == GKE[1]
    clique = {"nvidia.com/gpu.clique": "u.1"}
    assert node_levels(_node("a", **{GKE[0]: "b"}, **clique), auto) == (
        GKE[0],
        "nvidia.com/gpu.clique",
        HOSTNAME_LABEL,
    )
    topograph = {
        "fabric.topograph.run/tier-0": "l",
        "fabric.topograph.run/tier-1": "s",
        "accelerator.topograph.run/domain": "nvl1",
    }
    assert node_levels(_node("a", **topograph), auto) == (
        "fabric.topograph.run/tier-1",
        "fabric.topograph.run/tier-0",
        "accelerator.topograph.run/domain",
        HOSTNAME_LABEL,
    )
    # a zone alone is no level set (every cloud node has one); a person may list it
    zone = _node("a", **{"topology.kubernetes.io/zone": "z"})
    assert node_levels(zone, auto) == ()
    listed = TopologyPolicy(levels=("topology.kubernetes.io/zone", "rack"))
    assert node_levels(zone, listed) == ("topology.kubernetes.io/zone", HOSTNAME_LABEL)
    assert missing_level(zone, listed) == "rack"
    assert node_levels(_node("a"), listed) == (HOSTNAME_LABEL,)
    assert node_levels(zone, TopologyPolicy(enabled=False)) == ()
    assert "off" in explain_topology(zone, TopologyPolicy(enabled=False))
    assert explain_topology(zone, auto) == ""  # nothing to say: no level, none lacking


def test_topology_flag() -> None:
    assert topology_policy("auto") == TopologyPolicy()
    assert not topology_policy("off").enabled
    assert topology_policy("rack,kubernetes.io/hostname").levels == ("rack",)
    for bad in ("", "a,a", "kubernetes.io/hostname,rack", "not a key!"):
        with pytest.raises(argparse.ArgumentTypeError):
            topology_policy(bad)


def test_tas_names_parse_as_their_profile() -> None:
    state = _state("topology-gke-a3-ultra.yaml")
    for obj in (*state.resource_flavors, *state.cluster_queues):
        assert parse_node_profile(obj["metadata"]["name"]) is not None


def test_queues_shows_the_levels_a_local_queue_offers() -> None:
    state = _state("topology-mixed.yaml")
    levels = queue_levels(state.cluster_queues, state.resource_flavors, state.topologies)
    rows = pool_rows(state.cluster_queues, state.local_queues, levels)
    table = render_table(rows).splitlines()
    assert table[0].split()[-1] == "LEVELS"
    tas = [line for line in table[1:] if "gce-topology-block" in line]
    plain = [line for line in table[1:] if line.rstrip().endswith(" -")]
    assert len(tas) == 2 and len(plain) == 2  # the TAS pools and the two without levels
    assert (
        f"{GKE[0]},{GKE[1]},{GKE[2]},{HOSTNAME_LABEL} | {GKE[0]},{GKE[1]},{HOSTNAME_LABEL}"
        in tas[0]
    )
    # without TAS pools the table is as it always was
    off = _state(
        "topology-mixed.yaml",
        ChainPolicy(manufacturers=MFRS, topology=TopologyPolicy(enabled=False)),
    )
    assert "LEVELS" not in render_table(pool_rows(off.cluster_queues, off.local_queues))


def test_derived_queue_names_stay_dns_labels() -> None:
    """docs/naming.md, "Derived names": where a pool's name is a DNS label, its TAS queue
    and its team queues are too (Kueue sets kueue.x-k8s.io/cluster-queue-name on Pods only
    then); a longer pool name keeps the 253-character rule."""
    short = "gpustack--amd-25-1-ln-x64-12c-47g--nvidia-a10g-1d-8s"
    assert tas_queue_name(short) == f"{short}-tas"
    assert strip_tas_suffix(tas_queue_name(short)) == short
    assert strip_tas_suffix(f"{short}.tas") == short, "the older name still reads as TAS"
    at_edge = "gpustack--generic-16c-256g--nvidia-h100-80gb-hbm3-1d-2345678"  # 60 characters
    assert len(at_edge) == 60 and is_valid_dns_label(at_edge)
    for derived in (tas_queue_name(at_edge), team_queue_name(at_edge, "research")):
        assert is_valid_dns_label(derived) and len(derived) <= 63, derived
    assert tas_queue_name(at_edge).endswith("-tas")
    assert team_queue_name(at_edge, "research").endswith("-research")
    assert team_queue_name(at_edge, "research") != team_queue_name(at_edge + "9", "research")
    long_pool = "gpustack--" + "x" * 70 + "-1c-4g"
    assert team_queue_name(long_pool, "research") == f"{long_pool}-research"
