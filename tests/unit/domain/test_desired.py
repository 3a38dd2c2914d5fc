"""Flavors, cohorts, queues, LocalQueues and NodeFeatures from nodes (docs/labels.md)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.queues import (
    QuotaResources,
    cohort_may_be_deleted,
    desired_cluster_queue,
    desired_cohorts,
    desired_local_queues,
    is_owned,
)
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.node.nodefeature import (
    device_manager_node_feature,
    is_device_manager_label,
    is_worker_label,
    merge_node_features,
    node_feature_name,
    worker_node_feature,
)
from gpustack_operator.domain.node.nodeprofiles import is_managed, node_profile_names, node_profiles
from gpustack_operator.domain.plan.desired import desired_state
from gpustack_operator.domain.plan.plan import apply_sim_devices, plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.validation import is_valid_dns_subdomain
from tests.unit.domain.nodes import planned_flavors

from .nodes import A, G, a10g, make_node, t4

MFRS = default_manufacturers()
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpustack-operator"}


def converged(*nodes: dict[str, Any]) -> list[dict[str, Any]]:
    """Nodes after the worker's NodeFeature is merged, as the NFD master would do."""
    return desired_state(nodes, [], ChainPolicy(manufacturers=MFRS)).nodes


def test_worker_node_feature_shape() -> None:
    node = make_node("n1", cpu="16", memory="31Gi", storage="97Gi", uid="u-1")
    nf = worker_node_feature(node, "gpustack-system", MFRS)
    assert nf is not None
    assert nf["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1" and nf["kind"] == "NodeFeature"
    assert nf["metadata"]["name"] == "n1-gpustack-worker"
    assert nf["metadata"]["namespace"] == "gpustack-system"
    assert nf["metadata"]["labels"] == {
        **MANAGED_BY,
        "nfd.node.kubernetes.io/node-name": "n1",
        "app.kubernetes.io/part-of": "gpustack-operator-worker",
    }
    assert nf["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "n1",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]
    assert nf["spec"]["labels"][G + "amd-25-1.ram"] == "32Gi"  # worker: 2 GiB per CPU


def test_worker_node_feature_without_uid_or_for_unlabellable_nodes() -> None:
    nf = worker_node_feature(make_node("n1"), "ns", MFRS)
    assert nf is not None and "ownerReferences" not in nf["metadata"]
    long_name = "n" * 64
    assert worker_node_feature(make_node(long_name), "ns", MFRS) is None
    deleting = make_node("n2")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert worker_node_feature(deleting, "ns", MFRS) is None


def test_node_feature_name_budget() -> None:
    assert node_feature_name("n1", "-gpustack-worker") == "n1-gpustack-worker"
    long_name = ".".join(["a" * 60] * 4)  # 243 chars, a valid node name
    name = node_feature_name(long_name, "-gpustack-device-manager")
    assert len(name) <= 253 and is_valid_dns_subdomain(name)
    assert name != node_feature_name(long_name[:-1] + "b", "-gpustack-device-manager")


def test_merge_replaces_owned_labels() -> None:
    node = make_node("n1", labels={G + "old-key": "true", "keep": "me"})
    feature = {
        "metadata": {"labels": {"nfd.node.kubernetes.io/node-name": "n1"}},
        "spec": {"labels": {G + "new-key": "true"}},
    }
    other = {
        "metadata": {"labels": {"nfd.node.kubernetes.io/node-name": "n2"}},
        "spec": {"labels": {"x": "y"}},
    }
    merged = merge_node_features(node, [feature, other], owned="worker")
    labels = merged["metadata"]["labels"]
    assert G + "old-key" not in labels and labels[G + "new-key"] == "true"
    assert labels["keep"] == "me" and "x" not in labels
    assert node["metadata"]["labels"][G + "old-key"] == "true"  # input untouched


def test_hybrid_node_flavors() -> None:
    """docs/naming.md flavor-extraction vectors."""
    mi300x = {A + "amd": "true", A + "amd-mi300x": "true", A + "amd-mi300x.count": "2"}
    node = make_node("h", cpu="32", memory="128Gi", storage="200Gi", labels={**t4(1), **mi300x})
    profiles = {p.flavor: p for p in node_profiles(converged(node)[0], MFRS)}
    t4_flavor = "gpustack--amd-25-1-32c-128g-200g--nvidia-tesla-t4-1d"
    mi_flavor = "gpustack--amd-25-1-32c-128g-200g--amd-mi300x-2d"
    assert t4_flavor in profiles and mi_flavor in profiles
    assert (
        profiles[t4_flavor].queue
        == profiles[t4_flavor].cohort
        == ("gpustack--amd-25-1-32c-128g--nvidia-tesla-t4-1d")
    )
    assert profiles[mi_flavor].queue == "gpustack--amd-25-1-16c-64g--amd-mi300x-1d"


def test_missing_general_label_suppresses_general_flavor() -> None:
    node = converged(make_node("n", cpu="16", memory="31Gi", storage="97Gi", labels=t4(1)))[0]
    assert any(not p.acceleratable for p in node_profiles(node, MFRS))
    for suffix in (".cpu", ".ram", ".storage", ".z-flavor", ".z-cohort"):
        broken = copy.deepcopy(node)
        del broken["metadata"]["labels"][G + "amd-25-1" + suffix]
        kinds = [p.acceleratable for p in node_profiles(broken, MFRS)]
        assert kinds == [True], suffix


def test_resource_flavor_shape() -> None:
    nodes = converged(make_node("n", cpu="8", memory="31Gi", storage="97Gi", labels=t4(2)))
    flavors = planned_flavors(nodes, MFRS)
    general = flavors["gpustack--amd-25-1-8c-16g-96g"]
    assert general["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert general["metadata"]["labels"] == {**MANAGED_BY, "resource.gpustack.ai/type": "nodes"}
    assert general["metadata"]["annotations"] == {
        "schedule.gpustack.ai/queue": "gpustack--amd-25-1-1c-2g",
        "schedule.gpustack.ai/cohort": "gpustack--amd-25-1-1c-2g",
        "note.gpustack.ai/acceleratable": "false",
        "note.gpustack.ai/manufacturer": "amd",
        "note.gpustack.ai/cpu": "8",
        "note.gpustack.ai/ram": "16Gi",
        "note.gpustack.ai/localStorage": "96Gi",
    }
    assert general["spec"] == {
        "nodeLabels": {"gpustack.ai/managed": "true", G + "amd-25-1.z-queue": "1c-2g"},
        "tolerations": [],
    }
    device = flavors["gpustack--amd-25-1-8c-32g-96g--nvidia-tesla-t4-2d"]
    assert device["metadata"]["annotations"]["note.gpustack.ai/accelerator"] == "2"
    assert device["metadata"]["annotations"]["note.gpustack.ai/manufacturer"] == "nvidia"
    assert device["spec"]["nodeLabels"] == {
        "gpustack.ai/managed": "true",
        A + "nvidia-tesla-t4.z-queue": "4c-16g-1d",
        G + "amd-25-1": "true",
    }


def test_generic_gkey_for_nodes_without_cpu_info() -> None:
    nodes = converged(
        make_node("n", cpu="8", memory="31Gi", storage="97Gi", labels=t4(2), amd=False)
    )
    flavors = planned_flavors(nodes, MFRS)
    assert list(flavors) == ["gpustack--generic-8c-32g-96g--nvidia-tesla-t4-2d"]
    node_labels = flavors["gpustack--generic-8c-32g-96g--nvidia-tesla-t4-2d"]["spec"]["nodeLabels"]
    assert G + "generic" not in node_labels and len(node_labels) == 2


def test_unmanaged_nodes_are_not_counted() -> None:
    node = make_node(
        "n", cpu="16", memory="31Gi", storage="97Gi", labels={"gpustack.ai/managed": "false"}
    )
    state = desired_state([node], ["default"], ChainPolicy(manufacturers=MFRS))
    assert len(state.node_features) == 1
    assert state.resource_flavors == state.cohorts == state.cluster_queues == []


def test_cluster_queue_aggregates_nodes() -> None:
    nodes = [
        make_node(
            f"n{i}",
            cpu="8",
            memory="31Gi",
            storage="97Gi",
            labels=t4(2),
            allocatable={"nvidia.com/gpu": "2"},
        )
        for i in range(3)
    ]
    state = desired_state(nodes, ["default"], ChainPolicy(manufacturers=MFRS))
    queues = {q["metadata"]["name"]: q for q in state.cluster_queues}
    device = queues["gpustack--amd-25-1-4c-16g--nvidia-tesla-t4-1d"]
    group = device["spec"]["resourceGroups"]
    assert group == [
        {
            "coveredResources": [
                "cpu",
                "memory",
                "ephemeral-storage",
                "nvidia.com/gpu",
            ],
            "flavors": [
                {
                    "name": "gpustack--amd-25-1-8c-32g-96g--nvidia-tesla-t4-2d",
                    "resources": [
                        {"name": "cpu", "nominalQuota": "24"},
                        {"name": "memory", "nominalQuota": "96Gi"},
                        {"name": "ephemeral-storage", "nominalQuota": "288Gi"},
                        {"name": "nvidia.com/gpu", "nominalQuota": "6"},
                    ],
                }
            ],
        }
    ]
    assert device["spec"]["cohortName"] == "gpustack--amd-25-1-4c-16g--nvidia-tesla-t4-1d"
    assert device["metadata"]["labels"] == {
        **MANAGED_BY,
        "resource.gpustack.ai/type": "instancetypes",
    }
    notes = device["metadata"]["annotations"]
    assert notes["note.gpustack.ai/acceleratable"] == "true"
    assert notes["note.gpustack.ai/manufacturer"] == "nvidia"
    assert notes["note.gpustack.ai/product"] == "Tesla-T4"
    assert notes["note.gpustack.ai/unitCPU"] == "4" and notes["note.gpustack.ai/unitRAM"] == "16Gi"
    assert "note.gpustack.ai/slicedAccelerator" not in notes
    general = queues["gpustack--amd-25-1-1c-2g"]["spec"]["resourceGroups"][0]
    assert general["coveredResources"] == ["cpu", "memory", "ephemeral-storage"]
    assert general["flavors"][0]["resources"][1] == {"name": "memory", "nominalQuota": "48Gi"}
    assert len(state.local_queues) == 2


def test_sliced_queue_has_zero_borrowing_limit_and_shares_cohort() -> None:
    sliced = make_node(
        "s",
        cpu="48",
        memory="188Gi",
        storage="196Gi",
        labels=a10g(4, **{A + "nvidia-a10g.sliced.partitions": "8"}),
        allocatable={"nvidia.com/gpu": "32"},
    )
    plain = make_node(
        "p",
        cpu="48",
        memory="188Gi",
        storage="196Gi",
        labels=a10g(4),
        allocatable={"nvidia.com/gpu": "4"},
    )
    state = desired_state([sliced, plain], [], ChainPolicy(manufacturers=MFRS))
    queues = {q["metadata"]["name"]: q for q in state.cluster_queues}
    sq = queues["gpustack--amd-25-1-12c-47g--nvidia-a10g-1d-8s"]
    pq = queues["gpustack--amd-25-1-12c-47g--nvidia-a10g-1d"]
    assert (
        sq["spec"]["cohortName"]
        == pq["spec"]["cohortName"]
        == ("gpustack--amd-25-1-12c-47g--nvidia-a10g-1d")
    )
    assert all(
        r["borrowingLimit"] == "0"
        for f in sq["spec"]["resourceGroups"][0]["flavors"]
        for r in f["resources"]
    )
    assert all(
        "borrowingLimit" not in r
        for f in pq["spec"]["resourceGroups"][0]["flavors"]
        for r in f["resources"]
    )
    assert sq["metadata"]["annotations"]["note.gpustack.ai/slicedAccelerator"] == "8"
    # docs/devices.md, "Quota resources": the device quota is the allocatable of the resource
    assert sq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][3] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "32",
        "borrowingLimit": "0",
    }


def test_credits_mode_measures_device_queues_in_credits() -> None:
    """docs/devices.md, "Quota resources": --quota-resources=credits keeps the credits."""
    nodes = [
        make_node(
            "n1",
            cpu="8",
            memory="31Gi",
            storage="97Gi",
            labels=t4(2),
            allocatable={"nvidia.com/gpu": "2"},
        ),
    ]
    state = desired_state(
        nodes, [], ChainPolicy(manufacturers=MFRS, quota_resources=QuotaResources.CREDITS)
    )
    queues = {q["metadata"]["name"]: q for q in state.cluster_queues}
    group = queues["gpustack--amd-25-1-4c-16g--nvidia-tesla-t4-1d"]["spec"]["resourceGroups"][0]
    assert group["coveredResources"][3] == "credits.gpustack.ai/nvidia"
    assert group["flavors"][0]["resources"][3] == {
        "name": "credits.gpustack.ai/nvidia",
        "nominalQuota": "2",
    }


def test_device_queue_never_covers_its_resource_with_zero_quota() -> None:
    """docs/devices.md, "Quota resources": a flavor whose nodes advertise none of the
    device resource (our agent on a MIG node, a plugin not registered yet) is left out."""
    with_gpus = make_node(
        "a",
        cpu="8",
        memory="31Gi",
        storage="97Gi",
        labels=t4(2),
        allocatable={"nvidia.com/gpu": "2"},
    )
    without = make_node("b", cpu="16", memory="63Gi", storage="97Gi", labels=t4(2))
    for mode in QuotaResources:
        state = desired_state(
            [with_gpus, without], [], ChainPolicy(manufacturers=MFRS, quota_resources=mode)
        )
        for queue in state.cluster_queues:
            for group in queue["spec"]["resourceGroups"]:
                for flavor in group["flavors"]:
                    for res in flavor["resources"]:
                        if res["name"] not in ("cpu", "memory", "ephemeral-storage"):
                            assert res["nominalQuota"] != "0", (mode, queue["metadata"]["name"])


def test_cluster_queue_flavor_order_and_zero_node_flavors() -> None:
    nodes = converged(
        make_node("a", cpu="16", memory="31Gi", storage="97Gi"),
        make_node("b", cpu="16", memory="31Gi", storage="199Gi"),
    )
    flavors = list(planned_flavors(nodes, MFRS).values())
    flavors[0]["metadata"]["creationTimestamp"] = "2026-02-01T00:00:00Z"
    flavors[1]["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    cq = desired_cluster_queue(
        "gpustack--amd-25-1-1c-2g", flavors, nodes[:1], MFRS, cohort_uid="cohort-uid"
    )
    assert cq is not None
    entries = cq["spec"]["resourceGroups"][0]["flavors"]
    # By name (docs/naming.md, "Flavor order and notes"): creation time, which a restart or the join
    # order of the nodes changes, does not count.
    assert [f["name"] for f in entries] == [
        "gpustack--amd-25-1-16c-32g-198g",
        "gpustack--amd-25-1-16c-32g-96g",
    ]
    # Only node a (the 96g flavor) is given: the 198g flavor is listed with zero quotas.
    assert [r["nominalQuota"] for r in entries[0]["resources"]] == ["0", "0", "0"]
    assert [r["nominalQuota"] for r in entries[1]["resources"]] == ["16", "32Gi", "96Gi"]
    assert cq["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "name": "gpustack--amd-25-1-1c-2g",
            "uid": "cohort-uid",
            "controller": True,
            "blockOwnerDeletion": False,
        }
    ]
    assert desired_cluster_queue("gpustack--other-1c-2g", flavors, nodes, MFRS) is None


def test_more_than_64_flavors_are_capped_with_a_note() -> None:
    nodes = [
        make_node(f"n{i:03}", cpu="16", memory="31Gi", storage=f"{100 + 2 * i}Gi")
        for i in range(66)
    ]
    state = desired_state(nodes, [], ChainPolicy(manufacturers=MFRS))
    (cq,) = state.cluster_queues
    assert len(cq["spec"]["resourceGroups"]) == 1
    assert len(cq["spec"]["resourceGroups"][0]["flavors"]) == 64
    assert cq["metadata"]["annotations"]["note.gpustack.ai/omittedFlavors"] == "2"


def test_v1beta1_rendering() -> None:
    node = make_node("n", cpu="16", memory="31Gi", storage="97Gi")
    state = desired_state(
        [node], ["default"], ChainPolicy(manufacturers=MFRS, kueue_version=KueueVersion.V1BETA1)
    )
    assert {o["apiVersion"] for o in state.objects() if o["kind"] != "NodeFeature"} == {
        "kueue.x-k8s.io/v1beta1"
    }
    assert state.cluster_queues[0]["spec"]["cohort"] == "gpustack--amd-25-1-1c-2g"


def test_cohorts_and_safe_gc() -> None:
    nodes = converged(make_node("n", cpu="16", memory="31Gi", storage="97Gi"))
    cohorts = desired_cohorts(nodes, MFRS)
    assert cohorts == {
        "gpustack--amd-25-1-1c-2g": {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": "gpustack--amd-25-1-1c-2g", "labels": MANAGED_BY},
            "spec": {},
        }
    }
    name = "gpustack--amd-25-1-1c-2g"
    assert not cohort_may_be_deleted(name, nodes, [], MFRS)
    assert cohort_may_be_deleted(name, [], [], MFRS)
    referencing = {"spec": {"cohortName": name}}
    assert not cohort_may_be_deleted(name, [], [referencing], MFRS)
    assert not cohort_may_be_deleted(name, [], [{"spec": {"cohort": name}}], MFRS)
    assert is_owned(cohorts[name]) and not is_owned({"metadata": {"name": "x"}})


def test_local_queues() -> None:
    namespaces = [
        "default",
        "team-a",
        "gpustack-system",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        {"metadata": {"name": "gone"}, "status": {"phase": "Terminating"}},
        {"metadata": {"name": "team-b"}, "status": {"phase": "Active"}},
        "Not_Valid",
    ]
    cqs = ["q1", {"metadata": {"name": "q2", "uid": "uid-2"}}]
    lqs = desired_local_queues(cqs, namespaces, system_namespace="gpustack-system")
    assert sorted({ns for ns, _ in lqs}) == ["default", "team-a", "team-b"]
    assert len(lqs) == 6
    (_, name), lq = next(iter(lqs.items()))
    assert lq["metadata"]["annotations"] == {"schedule.gpustack.ai/cluster-queue": "q1"}
    assert lq["spec"] == {"clusterQueue": "q1"} and lq["metadata"]["name"] == name
    owned = [v for v in lqs.values() if v["spec"]["clusterQueue"] == "q2"]
    assert owned[0]["metadata"]["ownerReferences"][0]["uid"] == "uid-2"
    assert "ownerReferences" not in lq["metadata"]
    custom = desired_local_queues(
        ["q1"], ["default", "kube-system"], system_namespace="x", excluded=["default"]
    )
    assert [ns for ns, _ in custom] == ["kube-system"]


def test_sim_devices_and_allocatable_default() -> None:
    node = make_node(
        "n",
        cpu="8",
        memory="31Gi",
        storage="97Gi",
        annotations={
            "sim.gpustack.ai/devices": '[{"manufacturer": "nvidia", "name": "Tesla T4", '
            '"memoryMiB": 15360, "count": 2}]'
        },
    )
    preset = copy.deepcopy(node)
    preset["metadata"]["name"] = "p"
    preset["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    nodes, features = apply_sim_devices([node, preset], MFRS)
    assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert nodes[1]["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert [f["metadata"]["name"] for f in features] == [
        "n-gpustack-device-manager",
        "p-gpustack-device-manager",
    ]
    assert features[0]["metadata"]["labels"]["app.kubernetes.io/part-of"] == (
        "gpustack-operator-device-manager"
    )
    assert nodes[0]["metadata"]["labels"][A + "nvidia-tesla-t4.count"] == "2"
    state = plan_state([node], ["default"], ChainPolicy(manufacturers=MFRS))
    assert len(state.node_features) == 2


def test_output_does_not_depend_on_node_order() -> None:
    nodes = [
        make_node("b", cpu="8", memory="31Gi", storage="97Gi", labels=t4(2)),
        make_node("a", cpu="16", memory="31Gi", storage="97Gi"),
        make_node("c", cpu="8", memory="31Gi", storage="97Gi", labels=t4(2)),
    ]
    first = desired_state(nodes, ["default"], ChainPolicy(manufacturers=MFRS)).as_list()
    again = desired_state(
        list(reversed(nodes)), ["default"], ChainPolicy(manufacturers=MFRS)
    ).as_list()
    assert first == again


def test_node_profile_names_for_indexes() -> None:
    (node,) = converged(make_node("n", cpu="8", memory="31Gi", storage="97Gi", labels=t4(2)))
    assert node_profile_names(node, MFRS, "cohort") == [
        "gpustack--amd-25-1-1c-2g",
        "gpustack--amd-25-1-4c-16g--nvidia-tesla-t4-1d",
    ]
    assert len(node_profile_names(node, MFRS, "flavor")) == 2
    node["metadata"]["labels"]["gpustack.ai/managed"] = "false"
    assert node_profile_names(node, MFRS, "queue") == []


def test_device_manager_node_feature_and_label_ownership() -> None:
    nf = device_manager_node_feature("n1", "uid", {A + "nvidia": "true"}, "gpustack-system")
    assert nf is not None and nf["metadata"]["name"] == "n1-gpustack-device-manager"
    assert nf["metadata"]["labels"]["app.kubernetes.io/part-of"] == (
        "gpustack-operator-device-manager"
    )
    assert is_device_manager_label(A + "nvidia-tesla-t4.count")
    assert is_device_manager_label("feature.gpustack.ai/acceleratable")
    assert not is_device_manager_label(A + "nvidia-tesla-t4.sliced.partitions")
    assert not is_device_manager_label(A + "nvidia-tesla-t4.z-queue")
    assert is_worker_label(A + "nvidia-tesla-t4.z-queue") and is_worker_label(G + "amd")
    assert is_worker_label("gpustack.ai/managed") and not is_worker_label("kubernetes.io/os")


@pytest.mark.parametrize(
    ("labels", "meta", "managed"),
    [
        ({"gpustack.ai/managed": "true"}, {}, True),
        ({"gpustack.ai/managed": True}, {}, True),  # an unquoted YAML true
        ({"gpustack.ai/managed": "false"}, {}, False),
        ({"gpustack.ai/managed": "yes"}, {}, False),
        # Absent (or empty) is what the worker publishes as true: managed (docs/labels.md).
        ({}, {}, True),
        ({"gpustack.ai/managed": ""}, {}, True),
        ({"gpustack.ai/managed": "true"}, {"deletionTimestamp": "2026-01-01T00:00:00Z"}, False),
        ({}, {"deletionTimestamp": "2026-01-01T00:00:00Z"}, False),
        (None, {}, True),
    ],
)
def test_is_managed_reads_the_label_as_kubectl_would_store_it(
    labels: object, meta: dict[str, object], managed: bool
) -> None:
    node = {"metadata": {"name": "n", "labels": labels, **meta}}
    assert is_managed(node) is managed
