"""vCluster tenants in ``plan`` (docs/tenants.md): detection, pseudo nodes, pools from
host-owned labels, merged pools, quota caps, DRA."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.cli import main
from gpustack_operator.commands.policy_flags import quota_caps, tenancy
from gpustack_operator.domain.chain.tenancy import (
    FAKE_NODE_LABEL,
    HOST_NODES_ANNOTATION,
    SHARED_CAPACITY_ANNOTATION,
    Tenancy,
    detect_tenancy,
    host_owned_keys,
    selects,
)
from gpustack_operator.domain.labels import MANAGED_LABEL
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.nodeview import labels_of, name_of
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy

REPO = Path(__file__).resolve().parents[3]
TENANT = REPO / "examples" / "vcluster-tenant.yaml"
ORDINARY = REPO / "examples" / "cluster.yaml"
MFRS = default_manufacturers()


def load(path: Path) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load(path.read_text())["items"]
    return [i for i in items if i["kind"] == "Node"]


def pseudo_node(name: str) -> dict[str, Any]:
    """A pseudo node as vCluster's fake-node syncer makes it: 16 CPU, 32Gi, no devices."""
    amounts = {"cpu": "16", "memory": "32Gi", "ephemeral-storage": "100Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {FAKE_NODE_LABEL: "true"}},
        "status": {"capacity": dict(amounts), "allocatable": dict(amounts)},
    }


def test_tenancy_is_told_from_the_nodes_and_a_setting_overrides_it() -> None:
    assert detect_tenancy(load(TENANT)) is Tenancy.SHARED_NODES
    assert detect_tenancy([pseudo_node("a"), pseudo_node("b")]) is Tenancy.PSEUDO_NODES
    assert detect_tenancy(load(ORDINARY)) is Tenancy.ORDINARY
    set_ordinary = ChainPolicy(MFRS, tenancy=tenancy("ordinary"))
    assert set_ordinary.tenant_settings(load(TENANT)).tenancy is Tenancy.ORDINARY
    auto = ChainPolicy(MFRS, tenancy=tenancy("auto"))
    assert auto.tenant_settings(load(TENANT)).tenancy is Tenancy.SHARED_NODES
    assert auto.with_tenancy_of(load(TENANT)).tenancy is Tenancy.SHARED_NODES
    assert auto.tenant_settings([]).tenancy is Tenancy.ORDINARY  # no Node: ordinary
    with pytest.raises(argparse.ArgumentTypeError, match="choose from auto, ordinary"):
        tenancy("private")


def test_pseudo_nodes_get_no_pools_and_the_vcluster_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    state = plan_state([pseudo_node("vn-1"), pseudo_node("vn-2")], ["default"], ChainPolicy(MFRS))
    assert state.tenancy is Tenancy.PSEUDO_NODES
    assert state.resource_flavors == [] and state.cluster_queues == []
    assert state.node_features == []
    codes = [[r.code for r in e.reasons] for e in state.explanations]
    assert codes == [["vcluster-pseudo-node"], ["vcluster-pseudo-node"]]
    path = tmp_path / "pseudo.yaml"
    path.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [pseudo_node("vn-1")]})
    )
    assert main(["plan", "--nodes", str(path), "--explain", "vn-1"]) == 0
    out = capsys.readouterr().out
    assert "vcluster-pseudo-node" in out and "sync.fromHost.nodes" in out
    assert "run NFD" not in out
    assert main(["plan", "--nodes", str(path), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tenancy"] == "pseudo-nodes"
    assert doc["explanations"][0]["reasons"][0]["code"] == "vcluster-pseudo-node"
    assert main(["plan", "--nodes", str(path)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("Tenancy: pseudo-nodes")
    assert "vn-1: vcluster-pseudo-node" in table


def test_shared_node_flavors_select_host_owned_labels_of_their_own_pool_only() -> None:
    nodes = load(TENANT)
    state = plan_state(nodes, ["default"], ChainPolicy(MFRS))
    assert state.tenancy is Tenancy.SHARED_NODES
    assert state.node_features == []  # nothing for NFD: no NodeFeature is written
    assert state.resource_flavors
    for flavor in state.resource_flavors:
        selector = flavor["spec"]["nodeLabels"]
        assert selector
        members = [n for n in nodes if selects(selector, {"metadata": {"labels": labels_of(n)}})]
        for node in members:
            assert set(selector) <= host_owned_keys(node), flavor["metadata"]["name"]
        # the nodes the selector matches are exactly the pool's nodes
        count = int(flavor["metadata"]["annotations"][HOST_NODES_ANNOTATION].split("-")[0])
        pool = {name_of(n) for n in state.nodes if flavor["metadata"]["name"] in _flavors(state, n)}
        assert {name_of(n) for n in members} == pool and len(pool) == count


def _flavors(state: Any, node: dict[str, Any]) -> list[str]:
    return next(list(e.flavors) for e in state.explanations if e.node == name_of(node))


def test_pools_host_labels_cannot_tell_apart_become_one_and_say_so() -> None:
    state = plan_state(load(TENANT), ["default"], ChainPolicy(MFRS))
    t4 = [f for f in state.resource_flavors if "tesla-t4" in f["metadata"]["name"]]
    assert len(t4) == 1  # host-t4-1 (8 CPU) and host-t4-2 (16 CPU) share every host label
    assert t4[0]["metadata"]["name"].endswith("-8c-32g-400g--nvidia-tesla-t4-1d")  # the smaller
    reasons = {e.node: [r.code for r in e.reasons] for e in state.explanations}
    assert "tenant-pools-merged" in reasons["host-t4-2"]


def test_a_tenant_without_vcluster_labels_gets_the_ordinary_chain() -> None:
    """A tenant on private nodes sees ordinary Nodes: same chain as any cluster."""
    nodes = load(ORDINARY)
    auto = plan_state(nodes, ["default"], ChainPolicy(MFRS))
    ordinary = plan_state(nodes, ["default"], ChainPolicy(MFRS, tenancy=Tenancy.ORDINARY))
    assert auto.tenancy is Tenancy.ORDINARY
    assert auto.as_list() == ordinary.as_list()
    assert auto.node_features  # the worker's NodeFeatures, as in any cluster


def test_a_declared_cap_bounds_device_quota_else_an_annotation_says_it_is_shared() -> None:
    nodes = load(TENANT)

    def device_quota(state: Any) -> dict[str, int]:
        return {
            q["metadata"]["name"]: sum(
                int(r["nominalQuota"])
                for g in q["spec"]["resourceGroups"]
                for f in g["flavors"]
                for r in f["resources"]
                if r["name"] == "nvidia.com/gpu"
            )
            for q in state.cluster_queues
            if "nvidia" in q["metadata"]["name"]
        }

    shared = plan_state(nodes, ["default"], ChainPolicy(MFRS))
    assert set(device_quota(shared).values()) == {2, 4}
    for queue in shared.cluster_queues:
        note = queue["metadata"].get("annotations", {}).get(SHARED_CAPACITY_ANNOTATION)
        assert ("nvidia.com/gpu" in (note or "")) == ("nvidia" in queue["metadata"]["name"])
    capped = plan_state(
        nodes, ["default"], ChainPolicy(MFRS, tenant_quota_caps={"nvidia.com/gpu": 3})
    )
    assert set(device_quota(capped).values()) == {2, 3}
    for queue in capped.cluster_queues:
        assert SHARED_CAPACITY_ANNOTATION not in queue["metadata"].get("annotations", {})


def test_dra_slices_give_a_tenant_no_pools_and_are_explained() -> None:
    text = (REPO / "examples" / "dra-h100.yaml").read_text()
    items = yaml.safe_load(text)["items"]
    nodes = [i for i in items if i["kind"] == "Node"]
    slices = [i for i in items if i["kind"] == "ResourceSlice"]
    for node in nodes:  # the same node as a shared-node tenant would see it
        node["metadata"]["labels"]["vcluster.loft.sh/managed-by"] = "t"
        node["metadata"].setdefault("annotations", {})["vcluster.loft.sh/managed-labels"] = (
            "\n".join(node["metadata"]["labels"])
        )
    ordinary = plan_state(
        copy.deepcopy(nodes),
        ["default"],
        ChainPolicy(MFRS, tenancy=Tenancy.ORDINARY),
        resource_slices=slices,
    )
    assert any("nvidia" in f["metadata"]["name"] for f in ordinary.resource_flavors)
    state = plan_state(nodes, ["default"], ChainPolicy(MFRS), resource_slices=slices)
    assert not any("nvidia" in f["metadata"]["name"] for f in state.resource_flavors)
    codes = [r.code for e in state.explanations for r in e.reasons]
    assert "tenant-no-dra" in codes


def test_the_virtual_scheduler_setting_lets_flavors_use_tenant_labels() -> None:
    nodes = load(TENANT)
    sizes = {"host-t4-1": "small", "host-t4-2": "big"}
    for node in nodes:  # labels only the tenant wrote, telling the T4 nodes apart
        if name_of(node) in sizes:
            node["metadata"]["labels"]["node.kubernetes.io/instance-type"] = sizes[name_of(node)]
    host = plan_state(copy.deepcopy(nodes), ["default"], ChainPolicy(MFRS))
    virtual = plan_state(nodes, ["default"], ChainPolicy(MFRS, virtual_scheduler=True))
    count = lambda s: sum("tesla-t4" in f["metadata"]["name"] for f in s.resource_flavors)  # noqa: E731
    assert (count(host), count(virtual)) == (1, 2)
    assert all(MANAGED_LABEL not in f["spec"]["nodeLabels"] for f in virtual.resource_flavors)


def test_quota_caps_read_resource_equals_count() -> None:
    assert quota_caps("nvidia.com/gpu=4, amd.com/gpu=0") == {"nvidia.com/gpu": 4, "amd.com/gpu": 0}
    for bad in ("nvidia.com/gpu", "nvidia.com/gpu=four", "=3"):
        with pytest.raises(argparse.ArgumentTypeError, match="RESOURCE=N"):
            quota_caps(bad)


def test_pools_still_indistinguishable_after_merging_get_no_nodes() -> None:
    """Two CPU nodes whose host labels match but whose CPU keys differ (NFD's cpu-name
    annotation): their flavors' names cannot be made one, and a selector of either would
    match both, so neither feeds a pool, and plan says why (not as an opt-out)."""
    cpu = next(n for n in load(TENANT) if name_of(n) == "host-cpu-1")
    nodes = []
    for name, model in (("c-a", "AMD EPYC 7763 64-Core Processor"), ("c-b", "AMD EPYC 7443")):
        node = copy.deepcopy(cpu)
        node["metadata"]["name"] = name
        node["metadata"]["annotations"]["feature.gpustack.ai/cpu-name"] = model
        nodes.append(node)
    state = plan_state(nodes, ["default"], ChainPolicy(MFRS))
    assert state.resource_flavors == [] and state.cluster_queues == []
    codes = {e.node: [r.code for r in e.reasons] for e in state.explanations}
    assert codes == {
        "c-a": ["tenant-pools-indistinguishable"],
        "c-b": ["tenant-pools-indistinguishable"],
    }


def test_a_tenant_node_without_host_identity_labels_gets_no_pool_that_selects_everything() -> None:
    """Tenancy forced on Nodes whose annotation lists no identity label: a flavor would have
    empty nodeLabels, matching every node, so its nodes get no pools instead."""
    nodes = load(TENANT)
    bare = copy.deepcopy(next(n for n in nodes if name_of(n) == "host-cpu-1"))
    bare["metadata"]["name"] = "host-bare"
    bare["metadata"]["annotations"]["vcluster.loft.sh/managed-labels"] = "kubernetes.io/os"
    bare["metadata"]["annotations"]["feature.gpustack.ai/cpu-name"] = "AMD EPYC 7763"
    bare["status"]["capacity"]["cpu"] = bare["status"]["allocatable"]["cpu"] = "4"
    state = plan_state([*nodes, bare], ["default"], ChainPolicy(MFRS))
    assert all(f["spec"]["nodeLabels"] for f in state.resource_flavors)
    codes = {e.node: [r.code for r in e.reasons] for e in state.explanations}
    assert "tenant-pools-indistinguishable" in codes["host-bare"]
    assert "tenant-pools-indistinguishable" not in codes["host-cpu-1"]  # the others keep theirs
    alone = plan_state(nodes, ["default"], ChainPolicy(MFRS))
    assert state.resource_flavors == alone.resource_flavors
