"""The simulator's TAS admission stand-in (docs/simulator.md, "TAS admission stand-in")."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from gpustack_sim.standins.kueuetas import (
    PREFERRED,
    REQUIRED,
    TAS_LABEL,
    TasPass,
    TasRequest,
    assignment_placement,
    flavor_check,
    pin,
    pinned_node,
    place,
    pod_usage,
    topology_assignment,
)

RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"
LEVELS = (RACK, HOST)
FLAVOR = {"metadata": {"name": "f"}, "spec": {"nodeLabels": {"pool": "a"}, "topologyName": "t"}}


def node(name: str, rack: str, gpus: int = 8, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"pool": "a", RACK: rack, HOST: name}},
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def cluster() -> list[dict[str, Any]]:
    """Two racks of two 8-GPU nodes."""
    return [node("a1", "ra"), node("a2", "ra"), node("b1", "rb"), node("b2", "rb")]


def request(count: int, gpus: int = 8, **annotations: str) -> TasRequest:
    return TasRequest(
        name="main",
        count=count,
        per_pod={"nvidia.com/gpu": Fraction(gpus)},
        pod_spec={},
        annotations=annotations,
    )


def test_fits_in_one_domain() -> None:
    placed = place(request(2, **{REQUIRED: RACK}), FLAVOR, "t", LEVELS, cluster(), {})
    assert placed in ([("a1", 1), ("a2", 1)], [("b1", 1), ("b2", 1)])


def test_enough_in_total_but_no_single_domain_waits_with_kueues_message() -> None:
    placed = place(request(3, **{REQUIRED: RACK}), FLAVOR, "t", LEVELS, cluster(), {})
    assert placed == 'topology "t" allows to fit only 2 out of 3 pod(s)'
    none = place(request(1, gpus=9, **{REQUIRED: RACK}), FLAVOR, "t", LEVELS, cluster(), {})
    assert none == 'topology "t" doesn\'t allow to fit any of 1 pod(s)'


def test_best_fit_takes_the_fullest_domain_that_fits() -> None:
    used = {"a1": {"nvidia.com/gpu": Fraction(4)}}
    placed = place(request(1, gpus=4, **{REQUIRED: RACK}), FLAVOR, "t", LEVELS, cluster(), used)
    assert placed == [("a1", 1)] or placed == [("a2", 1)]


def test_cordoned_not_ready_and_tainted_nodes_offer_nothing() -> None:
    nodes = cluster()
    nodes[0]["spec"]["unschedulable"] = True
    nodes[2]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    nodes[3]["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    placed = place(request(2, **{REQUIRED: RACK}), FLAVOR, "t", LEVELS, nodes, {})
    assert placed == 'topology "t" allows to fit only 1 out of 2 pod(s)'
    # the flavor's tolerations count as the pod's (Kueue checks both)
    tolerant = {
        **FLAVOR,
        "spec": {**FLAVOR["spec"], "tolerations": [{"key": "maintenance", "operator": "Exists"}]},
    }
    assert place(request(1, **{REQUIRED: RACK}), tolerant, "t", LEVELS, nodes[2:], {}) == [
        ("b2", 1)
    ]


def test_pods_kueue_does_not_manage_take_capacity() -> None:
    daemon = {
        "metadata": {"name": "d", "labels": {}},
        "spec": {
            "nodeName": "a1",
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}],
        },
    }
    placed_by_tas = {**daemon, "metadata": {"name": "p", "labels": {TAS_LABEL: "true"}}}
    used = pod_usage([daemon, placed_by_tas])
    assert used == {"a1": {"nvidia.com/gpu": Fraction(1)}}
    only = place(request(2, **{REQUIRED: RACK}), FLAVOR, "t", LEVELS, cluster()[:2], used)
    assert only == 'topology "t" allows to fit only 1 out of 2 pod(s)'


def test_preferred_spreads_when_no_domain_fits_and_unconstrained_packs() -> None:
    spread = place(request(3, **{PREFERRED: RACK}), FLAVOR, "t", LEVELS, cluster(), {})
    assert isinstance(spread, list) and sum(p for _, p in spread) == 3
    used = {"b2": {"nvidia.com/gpu": Fraction(6)}}
    packed = place(request(1, gpus=2), FLAVOR, "t", LEVELS, cluster(), used)
    assert packed == [("b2", 1)]  # least free capacity first


def test_a_level_the_topology_lacks_and_nodes_missing_a_level() -> None:
    bad = place(request(1, **{REQUIRED: "zone"}), FLAVOR, "t", LEVELS, cluster(), {})
    assert bad == 'Flavor "f" does not contain the requested level'
    unlabelled = cluster()
    for n in unlabelled:
        del n["metadata"]["labels"][RACK]
    assert "doesn't allow" in str(place(request(1), FLAVOR, "t", LEVELS, unlabelled, {}))


@pytest.mark.parametrize("version", ["kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"])
def test_assignment_round_trip_and_pinning(version: str) -> None:
    placement = [("a1", 2), ("a2", 1)]
    assert assignment_placement(topology_assignment(placement, version)) == placement
    template: dict[str, Any] = {}
    pin(template, placement)
    assert template["metadata"]["labels"][TAS_LABEL] == "true"
    assert [pinned_node(template, i) for i in range(4)] == ["a1", "a1", "a2", None]


def test_a_pass_charges_admitted_workloads() -> None:
    template = {
        "metadata": {"annotations": {REQUIRED: RACK}},
        "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
    }
    running = {
        "spec": {"podSets": [{"name": "main", "count": 2, "template": template}]},
        "status": {
            "admission": {
                "podSetAssignments": [
                    {
                        "name": "main",
                        "topologyAssignment": topology_assignment(
                            [("a1", 1), ("a2", 1)], "kueue.x-k8s.io/v1beta2"
                        ),
                    }
                ]
            }
        },
    }
    topology = {"metadata": {"name": "t"}, "spec": {"levels": [{"nodeLabel": k} for k in LEVELS]}}
    tas = TasPass.of(cluster(), [topology], [], [running])

    class PodSet:
        name, count, spec = "main", 2, template["spec"]

    pending = {"spec": {"podSets": [{"name": "main", "template": template}]}}
    placed = tas.place(pending, [PodSet], {"main": {"nvidia.com/gpu": "f"}}, {"f": FLAVOR})
    assert placed == {"main": [("b1", 1), ("b2", 1)]}
    tas.admitted([PodSet], placed)
    again = tas.place(pending, [PodSet], {"main": {"nvidia.com/gpu": "f"}}, {"f": FLAVOR})
    assert again == (
        "couldn't assign flavors to pod set main: "
        'topology "t" doesn\'t allow to fit any of 2 pod(s)'
    )


def test_flavor_check_follows_kueues_tas_match_before_quota() -> None:
    """checkPodSetAndFlavorMatchForTAS (Kueue v0.19.2 tas_flavorassigner.go)."""
    gpu = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]}
    plain = {"spec": {"nodeLabels": {"pool": "a"}}}
    tas = {"spec": {"nodeLabels": {"pool": "a"}, "topologyName": "t"}}
    levels = {"t": ["block", HOST]}
    required = {REQUIRED: "block"}
    covered = ("nvidia.com/gpu",)

    def check(annotations: dict[str, str], flavor: dict[str, Any], tas_only: bool) -> str | None:
        return flavor_check(annotations, gpu, flavor, "f", covered, levels, tas_only)

    assert check(required, plain, False) == 'Flavor "f" does not support TopologyAwareScheduling'
    # ... unless the flavor serves none of the pod's resources (quota-only ones)
    assert flavor_check(required, gpu, plain, "f", ("cpu",), levels, False) is None
    assert check(required, tas, False) is None
    assert (
        check({REQUIRED: "rack"}, tas, False) == 'Flavor "f" does not contain the requested level'
    )
    assert check({}, tas, False) == 'Flavor "f" supports only TopologyAwareScheduling'
    assert check({}, tas, True) is None  # a TAS-only queue implies TAS
    assert check({}, plain, False) is None
