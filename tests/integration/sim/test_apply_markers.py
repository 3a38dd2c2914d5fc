"""Server-side apply by the schema's markers: list maps, sets and atomic lists shared by two
managers, and the hand-over from client-side ``kubectl apply`` to ``kubectl`` apply."""

from __future__ import annotations

import json

import pytest

from tests.conftest import shared_crds_dir
from tests.integration.sim.helpers import call
from tests.integration.sim.test_apply import apply, owners

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(shared_crds_dir() is None, reason="needs the real Kueue CRDs"),
]

CQ = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def queue(spec: dict) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "gpu"},
        "spec": spec,
    }


def groups(quota: int) -> list[dict]:
    return [
        {
            "coveredResources": ["cpu"],
            "flavors": [{"name": "t4", "resources": [{"name": "cpu", "nominalQuota": quota}]}],
        }
    ]


def checks(*entries: tuple[str, list[str]]) -> dict:
    return {
        "admissionChecksStrategy": {
            "admissionChecks": [{"name": n, "onFlavors": f} for n, f in entries]
        }
    }


async def test_two_managers_share_a_list_map_entry_by_entry(kube):
    first = await apply(kube, f"{CQ}/gpu", queue(checks(("prov", ["t4"]))), "alice")
    assert first.status_code == 201, first.text
    second = await apply(kube, f"{CQ}/gpu", queue(checks(("scan", ["a100"]))), "bob")
    assert second.status_code == 200, second.text
    body = second.json()
    names = [c["name"] for c in body["spec"]["admissionChecksStrategy"]["admissionChecks"]]
    assert names == ["prov", "scan"]
    bob = owners(body)["bob"]["fieldsV1"]["f:spec"]["f:admissionChecksStrategy"]
    assert bob["f:admissionChecks"] == {
        'k:{"name":"scan"}': {".": {}, "f:name": {}, "f:onFlavors": {'v:"a100"': {}}}
    }

    # alice drops her entry: only hers goes; bob's stays
    dropped = await apply(kube, f"{CQ}/gpu", queue(checks(("other", ["t4"]))), "alice")
    listed = dropped.json()["spec"]["admissionChecksStrategy"]["admissionChecks"]
    assert [c["name"] for c in listed] == ["scan", "other"]


async def test_set_members_are_owned_one_by_one(kube):
    await apply(kube, f"{CQ}/gpu", queue(checks(("prov", ["t4"]))), "alice")
    shared = await apply(kube, f"{CQ}/gpu", queue(checks(("prov", ["a100"]))), "bob")
    assert shared.status_code == 200, shared.text
    entry = shared.json()["spec"]["admissionChecksStrategy"]["admissionChecks"][0]
    assert entry == {"name": "prov", "onFlavors": ["t4", "a100"]}


async def test_an_atomic_list_is_one_field(kube):
    """``spec.resourceGroups`` is ``x-kubernetes-list-type: atomic`` in Kueue's CRD: the
    flavors inside it are not shared entry by entry, the whole list conflicts."""
    await apply(kube, f"{CQ}/gpu", queue({"resourceGroups": groups(8)}), "alice")
    clash = await apply(kube, f"{CQ}/gpu", queue({"resourceGroups": groups(16)}), "bob")
    assert clash.status_code == 409
    assert clash.json()["details"]["causes"][0]["field"] == ".spec.resourceGroups"
    forced = await apply(
        kube, f"{CQ}/gpu", queue({"resourceGroups": groups(16)}), "bob", force=True
    )
    assert forced.status_code == 200
    assert "f:spec" not in owners(forced.json()).get("alice", {}).get("fieldsV1", {})


async def test_list_map_entry_field_conflicts_name_the_entry(kube):
    status = {
        "conditions": [
            {
                "type": "Active",
                "status": "True",
                "reason": "Ready",
                "message": "ok",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    path = f"{CQ}/gpu/status"
    await apply(kube, f"{CQ}/gpu", queue({}), "alice")
    await apply(kube, path, {**queue({}), "status": status}, "kueue")
    changed = json.loads(json.dumps(status))
    changed["conditions"][0]["status"] = "False"
    clash = await apply(kube, path, {**queue({}), "status": changed}, "other")
    assert clash.status_code == 409
    fields = {c["field"] for c in clash.json()["details"]["causes"]}
    assert '.status.conditions[type="Active"].status' in fields


async def test_server_side_apply_takes_over_from_client_side_apply(kube):
    """What ``kubectl apply`` then ``kubectl apply --server-side`` sends."""
    config = queue({"resourceGroups": groups(8)})
    annotated = json.loads(json.dumps(config))
    annotated["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(config)}
    created = await call(
        kube, "POST", CQ, annotated, params={"fieldManager": "kubectl-client-side-apply"}
    )
    assert created.status_code == 201, created.text

    bigger = queue({"resourceGroups": groups(16)})
    refused = await apply(kube, f"{CQ}/gpu", bigger, "someone-else")
    assert refused.status_code == 409  # only kubectl's own manager takes over

    taken = await apply(kube, f"{CQ}/gpu", bigger, "kubectl")
    assert taken.status_code == 200, taken.text
    body = taken.json()
    assert body["spec"]["resourceGroups"] == groups(16)
    assert json.loads(body["metadata"]["annotations"][LAST_APPLIED]) == bigger
    assert "f:resourceGroups" in owners(body)["kubectl"]["fieldsV1"]["f:spec"]
    csa = owners(body)["kubectl-client-side-apply"]["fieldsV1"].get("f:spec", {})
    assert "f:resourceGroups" not in csa


async def test_no_take_over_where_the_live_value_left_the_annotation(kube):
    config = queue({"resourceGroups": groups(8)})
    annotated = json.loads(json.dumps(config))
    annotated["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(config)}
    await call(kube, "POST", CQ, annotated, params={"fieldManager": "kubectl-client-side-apply"})
    edited = json.loads(json.dumps(annotated))
    edited["spec"]["resourceGroups"] = groups(12)
    await call(
        kube,
        "PATCH",
        f"{CQ}/gpu",
        {"spec": {"resourceGroups": groups(12)}},
        params={"fieldManager": "kubectl-edit"},
        content_type="application/merge-patch+json",
    )
    clash = await apply(kube, f"{CQ}/gpu", queue({"resourceGroups": groups(16)}), "kubectl")
    assert clash.status_code == 409
    assert 'conflict with "kubectl-edit"' in clash.json()["message"]


def deployment(manager_container: str, image: str) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": manager_container, "image": image}]},
            },
        },
    }


async def test_built_in_containers_are_a_list_map_by_name(kube):
    path = "/apis/apps/v1/namespaces/default/deployments/web"
    await apply(kube, path, deployment("app", "app:1"), "alice")
    both = await apply(kube, path, deployment("sidecar", "proxy:1"), "bob")
    assert both.status_code == 200, both.text
    containers = both.json()["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [
        ("app", "app:1"),
        ("sidecar", "proxy:1"),
    ]
    clash = await apply(kube, path, deployment("app", "app:2"), "bob")
    assert clash.status_code == 409
    assert '.spec.template.spec.containers[name="app"].image' in clash.json()["message"]
