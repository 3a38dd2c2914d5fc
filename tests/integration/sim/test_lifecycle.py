"""Finalizers, deletionTimestamp, ownerReference garbage collection, namespace deletion."""

from __future__ import annotations

import pytest

from tests.integration.sim.helpers import call, eventually

pytestmark = pytest.mark.anyio

CM = "/api/v1/namespaces/default/configmaps"


def cm(name: str, namespace: str = "default", **meta) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, **meta},
    }


def ref(owner: dict, **extra) -> dict:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        **extra,
    }


async def test_finalizers_hold_deletion_until_removed(sim, kube):
    await call(kube, "POST", CM, cm("a", finalizers=["example.com/keep"]))
    deleting = await call(kube, "DELETE", f"{CM}/a")
    assert deleting.status_code == 200
    meta = deleting.json()["metadata"]
    assert meta["deletionTimestamp"] and meta["deletionGracePeriodSeconds"] == 0

    current = (await call(kube, "GET", f"{CM}/a")).json()
    assert current["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]
    # a second DELETE changes nothing
    again = (await call(kube, "DELETE", f"{CM}/a")).json()
    assert again["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]

    # no new finalizers once deleting
    current["metadata"]["finalizers"].append("example.com/late")
    refused = await call(kube, "PUT", f"{CM}/a", current)
    assert refused.status_code == 422 and "no new finalizers" in refused.json()["message"]

    # removing the last finalizer completes the deletion
    done = await call(
        kube,
        "PATCH",
        f"{CM}/a",
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    assert done.status_code == 200
    assert (await call(kube, "GET", f"{CM}/a")).status_code == 404


async def test_owner_gc_deletes_dependents_in_the_background(sim):
    owner = sim.store.create(cm("owner"))
    sim.store.create(cm("dep", ownerReferences=[ref(owner, controller=True)]))
    sim.store.create(
        cm("grandchild", ownerReferences=[ref(sim.store.get("v1", "ConfigMap", "dep", "default"))])
    )
    sim.store.delete("v1", "ConfigMap", "owner", "default")
    await eventually(lambda: sim.store.get("v1", "ConfigMap", "dep", "default") is None)
    await eventually(lambda: sim.store.get("v1", "ConfigMap", "grandchild", "default") is None)


async def test_cluster_scoped_owner_of_namespaced_dependent(sim, kube):
    node = sim.store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
    sim.store.create(cm("per-node", namespace="kube-system", ownerReferences=[ref(node)]))
    assert (await call(kube, "DELETE", "/api/v1/nodes/n")).status_code == 200
    await eventually(lambda: sim.store.get("v1", "ConfigMap", "per-node", "kube-system") is None)


async def test_namespaced_owner_only_counts_in_its_own_namespace(sim):
    owner = sim.store.create(cm("owner", namespace="kube-system"))
    # the same uid referenced from another namespace resolves to nothing: the GC deletes it
    sim.store.create(cm("elsewhere", ownerReferences=[ref(owner)]))
    sim.store.create(cm("same-ns", namespace="kube-system", ownerReferences=[ref(owner)]))
    await eventually(lambda: sim.store.get("v1", "ConfigMap", "elsewhere", "default") is None)
    assert sim.store.get("v1", "ConfigMap", "same-ns", "kube-system") is not None


async def test_dangling_references_are_dropped_when_other_owners_remain(sim):
    first = sim.store.create(cm("first"))
    second = sim.store.create(cm("second"))
    sim.store.create(cm("dep", ownerReferences=[ref(first), ref(second)]))
    sim.store.delete("v1", "ConfigMap", "first", "default")

    def only_second():
        dep = sim.store.get("v1", "ConfigMap", "dep", "default")
        refs = dep["metadata"]["ownerReferences"] if dep else None
        return refs == [ref(second)]

    await eventually(only_second)


async def test_orphan_policy_keeps_dependents_and_drops_the_reference(sim, kube):
    owner = sim.store.create(cm("owner"))
    keep = ref(sim.store.create(cm("other-owner")))
    sim.store.create(cm("dep", ownerReferences=[ref(owner), keep]))
    sim.store.create(cm("solo", ownerReferences=[ref(owner)]))
    resp = await call(kube, "DELETE", f"{CM}/owner", {"propagationPolicy": "Orphan"})
    assert resp.status_code == 200
    dep = sim.store.get("v1", "ConfigMap", "dep", "default")
    solo = sim.store.get("v1", "ConfigMap", "solo", "default")
    assert dep["metadata"]["ownerReferences"] == [keep]
    assert "ownerReferences" not in solo["metadata"]
    # and a garbage-collection pass leaves them alone afterwards
    sim.controllers.collect_garbage()
    assert sim.store.get("v1", "ConfigMap", "solo", "default") is not None
    assert sim.store.get("v1", "ConfigMap", "dep", "default") is not None


async def test_owner_with_finalizer_keeps_dependents_until_gone(sim):
    owner = sim.store.create(cm("owner", finalizers=["example.com/hold"]))
    sim.store.create(cm("dep", ownerReferences=[ref(owner)]))
    sim.store.delete("v1", "ConfigMap", "owner", "default")
    assert sim.store.get("v1", "ConfigMap", "owner", "default")["metadata"]["deletionTimestamp"]
    assert sim.store.get("v1", "ConfigMap", "dep", "default") is not None
    held = sim.store.get("v1", "ConfigMap", "owner", "default")
    held["metadata"]["finalizers"] = []
    sim.store.update(held)
    await eventually(lambda: sim.store.get("v1", "ConfigMap", "dep", "default") is None)


async def test_namespace_deletion_terminates_then_removes_everything(sim, kube):
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
    assert (await call(kube, "POST", "/api/v1/namespaces", ns)).status_code == 201
    sim.store.create(cm("a", namespace="team"))
    sim.store.create(cm("held", namespace="team", finalizers=["example.com/x"]))
    sim.store.create(cm("other"))
    deleting = (await call(kube, "DELETE", "/api/v1/namespaces/team")).json()
    assert deleting["status"]["phase"] == "Terminating"
    refused = await call(kube, "POST", "/api/v1/namespaces/team/configmaps", cm("b", "team"))
    assert refused.status_code == 403 and refused.json()["reason"] == "Forbidden"

    await eventually(lambda: sim.store.get("v1", "ConfigMap", "a", "team") is None)
    held = sim.store.get("v1", "ConfigMap", "held", "team")
    assert held["metadata"]["deletionTimestamp"]
    assert sim.store.get("v1", "Namespace", "team") is not None  # waits for "held"
    held["metadata"]["finalizers"] = []
    sim.store.update(held)
    await eventually(lambda: sim.store.get("v1", "Namespace", "team") is None)
    assert sim.store.get("v1", "ConfigMap", "other", "default") is not None


async def test_deletecollection_with_selector(sim, kube):
    sim.store.create(cm("a", labels={"app": "x"}))
    sim.store.create(cm("b", labels={"app": "x"}))
    sim.store.create(cm("c", labels={"app": "y"}))
    resp = await call(kube, "DELETE", CM, params={"labelSelector": "app=x"})
    assert resp.status_code == 200
    assert sorted(i["metadata"]["name"] for i in resp.json()["items"]) == ["a", "b"]
    assert [o["metadata"]["name"] for o in sim.store.list("v1", "ConfigMap", "default")] == ["c"]


async def test_foreground_deletion_waits_for_blocking_dependents(sim, kube):
    owner = sim.store.create(cm("owner"))
    sim.store.create(
        cm(
            "blocker",
            finalizers=["example.com/hold"],
            ownerReferences=[ref(owner, blockOwnerDeletion=True)],
        )
    )
    sim.store.create(cm("plain", ownerReferences=[ref(owner)]))
    resp = await call(kube, "DELETE", f"{CM}/owner", {"propagationPolicy": "Foreground"})
    assert resp.status_code == 200
    meta = resp.json()["metadata"]
    assert meta["deletionTimestamp"] and meta["finalizers"] == ["foregroundDeletion"]

    def blocker_deleting():
        obj = sim.store.get("v1", "ConfigMap", "blocker", "default")
        return obj and obj["metadata"].get("deletionTimestamp")

    await eventually(blocker_deleting)
    await eventually(lambda: sim.store.get("v1", "ConfigMap", "plain", "default") is None)
    assert sim.store.get("v1", "ConfigMap", "owner", "default") is not None  # still waiting
    blocker = sim.store.get("v1", "ConfigMap", "blocker", "default")
    blocker["metadata"]["finalizers"] = []
    sim.store.update(blocker)
    await eventually(lambda: sim.store.get("v1", "ConfigMap", "owner", "default") is None)


async def test_foreground_deletion_without_dependents_completes(sim, kube):
    sim.store.create(cm("lonely"))
    await call(kube, "DELETE", f"{CM}/lonely", params={"propagationPolicy": "Foreground"})
    await eventually(lambda: sim.store.get("v1", "ConfigMap", "lonely", "default") is None)


async def test_settle_waits_for_cascading_garbage_collection(sim):
    parent = sim.store.create(cm("p0"))
    for i in range(1, 30):  # a chain: each object owns the next
        parent = sim.store.create(cm(f"p{i}", ownerReferences=[ref(parent)]))
    sim.store.delete("v1", "ConfigMap", "p0", "default")
    await sim.settle()
    assert [o["metadata"]["name"] for o in sim.store.list("v1", "ConfigMap", "default")] == []


async def test_system_namespaces_may_not_be_deleted(sim, kube):
    resp = await call(kube, "DELETE", "/api/v1/namespaces/default")
    assert resp.status_code == 403 and resp.json()["reason"] == "Forbidden"
    assert sim.store.get("v1", "Namespace", "default")["status"]["phase"] == "Active"
