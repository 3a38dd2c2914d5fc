"""Deleting a CRD goes through ``Terminating`` while its instances are deleted
(docs/simulator.md, "CRD deletion")."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.sim.helpers import call, eventually, watch_lines

pytestmark = pytest.mark.anyio

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NAME = "gadgets.example.com"
GADGETS = "/apis/example.com/v1/namespaces/default/gadgets"
CLEANUP = "customresourcecleanup.apiextensions.k8s.io"

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": NAME},
    "spec": {
        "group": "example.com",
        "names": {"kind": "Gadget", "plural": "gadgets"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def gadget(name: str, *finalizers: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": meta}


def terminating(crd: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in crd["status"]["conditions"] if c["type"] == "Terminating")


async def test_a_deleted_crd_terminates_until_its_instances_are_gone(sim, kube):
    assert (await call(kube, "POST", CRDS, CRD)).status_code == 201
    for obj in (gadget("free"), gadget("held", "example.com/keep")):
        assert (await call(kube, "POST", GADGETS, obj)).status_code == 201
    rv = (await call(kube, "GET", GADGETS)).json()["metadata"]["resourceVersion"]
    marked: dict[str, Any] = {}

    async def delete_the_crd_and_release_the_held_one() -> None:
        answer = await call(kube, "DELETE", f"{CRDS}/{NAME}")
        assert answer.status_code == 200
        marked.update(answer.json())
        await sim.settle()
        # The free instance is gone, the held one is being deleted, the CRD waits for it.
        assert (await call(kube, "GET", f"{GADGETS}/free")).status_code == 404
        held = (await call(kube, "GET", f"{GADGETS}/held")).json()
        assert held["metadata"]["deletionTimestamp"]
        crd = (await call(kube, "GET", f"{CRDS}/{NAME}")).json()
        assert terminating(crd)["status"] == "True"
        assert terminating(crd)["reason"] == "InstanceDeletionInProgress"
        assert terminating(crd)["message"] == "CustomResource deletion is in progress"
        refused = await call(kube, "POST", GADGETS, gadget("late"))
        assert refused.status_code == 405
        assert refused.json()["reason"] == "MethodNotAllowed"
        assert refused.json()["message"] == (
            "create not allowed while custom resource definition is terminating"
        )
        assert refused.json()["details"] == {"group": "example.com", "kind": "gadgets"}
        released = await call(
            kube,
            "PATCH",
            f"{GADGETS}/held",
            {"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )
        assert released.status_code == 200

    events = await watch_lines(
        kube,
        GADGETS,
        {"resourceVersion": rv},
        stop_after=3,
        on_ready=delete_the_crd_and_release_the_held_one,
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("DELETED", "free"),
        ("MODIFIED", "held"),
        ("DELETED", "held"),
    ]
    # The first DELETE only marked the CRD, as the apiextensions server does.
    assert marked["metadata"]["deletionTimestamp"]
    assert CLEANUP in marked["metadata"]["finalizers"]
    assert terminating(marked)["reason"] == "InstanceDeletionPending"
    assert terminating(marked)["status"] == "True"

    await sim.settle()
    assert (await call(kube, "GET", f"{CRDS}/{NAME}")).status_code == 404
    assert (await call(kube, "GET", "/apis/example.com/v1")).status_code == 404
    assert (await call(kube, "GET", GADGETS)).status_code == 404
    groups = (await call(kube, "GET", "/apis")).json()
    assert "example.com" not in [g["name"] for g in groups.get("groups", [])]


async def test_a_crd_without_instances_goes_at_once_and_keeps_other_finalizers(sim, kube):
    crd = {**CRD, "metadata": {"name": NAME, "finalizers": ["example.com/audit"]}}
    assert (await call(kube, "POST", CRDS, crd)).status_code == 201
    await call(kube, "DELETE", f"{CRDS}/{NAME}")
    # The cleanup is done; another finalizer still holds the CRD, now marked completed.
    kept = await eventually(
        lambda: (
            (c := sim.store.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", NAME))
            and c["metadata"]["finalizers"] == ["example.com/audit"]
            and c
        )
    )
    assert terminating(kept)["status"] == "False"
    assert terminating(kept)["reason"] == "InstanceDeletionCompleted"
    assert terminating(kept)["message"] == "removed all instances"
    released = await call(
        kube,
        "PATCH",
        f"{CRDS}/{NAME}",
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    assert released.status_code == 200
    assert (await call(kube, "GET", f"{CRDS}/{NAME}")).status_code == 404
