"""CRUD, conflicts, names, generation and /status through real HTTP (kr8s)."""

from __future__ import annotations

import pytest

from tests.conftest import REAL_CRDS_MISSING, shared_crds_dir
from tests.integration.sim.helpers import call, deployment

pytestmark = pytest.mark.anyio

CM = "/api/v1/namespaces/default/configmaps"


def configmap(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def assert_status(resp, code: int, reason: str) -> dict:
    body = resp.json()
    assert resp.status_code == code, resp.text
    assert body["kind"] == "Status" and body["apiVersion"] == "v1"
    assert body["status"] == "Failure" and body["code"] == code and body["reason"] == reason
    assert body["message"]
    return body


async def test_create_get_update_delete_round_trip(sim, kube):
    created = await call(kube, "POST", CM, configmap("a", k="v"))
    assert created.status_code == 201
    obj = created.json()
    meta = obj["metadata"]
    assert meta["namespace"] == "default" and meta["uid"] and meta["creationTimestamp"]
    assert int(meta["resourceVersion"]) == sim.store.resource_version
    assert "generation" not in meta  # core kinds like ConfigMap carry none, as on a cluster

    got = (await call(kube, "GET", f"{CM}/a")).json()
    assert got["data"] == {"k": "v"} and got["kind"] == "ConfigMap" and got["apiVersion"] == "v1"

    got["data"]["k"] = "w"
    updated = await call(kube, "PUT", f"{CM}/a", got)
    assert updated.status_code == 200
    assert int(updated.json()["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert updated.json()["metadata"]["uid"] == meta["uid"]

    deleted = await call(kube, "DELETE", f"{CM}/a")
    assert deleted.status_code == 200
    # an immediate deletion of a core kind answers a Success Status, as kube-apiserver does
    assert deleted.json()["status"] == "Success"
    assert deleted.json()["details"] == {"name": "a", "kind": "configmaps", "uid": meta["uid"]}
    assert_status(await call(kube, "GET", f"{CM}/a"), 404, "NotFound")
    assert sim.store.get("v1", "ConfigMap", "a", "default") is None


async def test_not_found_body_names_the_resource(kube):
    body = assert_status(
        await call(kube, "GET", "/apis/apps/v1/namespaces/default/deployments/x"), 404, "NotFound"
    )
    assert body["message"] == 'deployments.apps "x" not found'
    assert body["details"] == {"name": "x", "kind": "deployments", "group": "apps"}


async def test_unknown_resource_is_404(kube):
    assert_status(await call(kube, "GET", "/api/v1/widgets"), 404, "NotFound")
    assert_status(await call(kube, "GET", "/apis/nope.io/v1/things"), 404, "NotFound")


async def test_already_exists_and_stale_resource_version(kube):
    first = (await call(kube, "POST", CM, configmap("a"))).json()
    body = assert_status(await call(kube, "POST", CM, configmap("a")), 409, "AlreadyExists")
    assert body["message"] == 'configmaps "a" already exists'

    fresh = dict(first, data={"x": "1"})
    assert (await call(kube, "PUT", f"{CM}/a", fresh)).status_code == 200
    stale = dict(first, data={"x": "2"})  # still carries the first resourceVersion
    body = assert_status(await call(kube, "PUT", f"{CM}/a", stale), 409, "Conflict")
    assert "the object has been modified" in body["message"]
    current = (await call(kube, "GET", f"{CM}/a")).json()
    assert current["data"] == {"x": "1"}


async def test_create_in_missing_namespace_is_404_for_the_namespace(kube):
    body = assert_status(
        await call(kube, "POST", "/api/v1/namespaces/nope/configmaps", configmap("a")),
        404,
        "NotFound",
    )
    assert body["message"] == 'namespaces "nope" not found'


@pytest.mark.parametrize(
    ("name", "labels", "field"),
    [
        ("Bad_Name", {}, "metadata.name"),
        ("a" * 254, {}, "metadata.name"),
        ("ok", {"bad key!": "v"}, "metadata.labels"),
        ("ok", {"k": "x" * 64}, "metadata.labels"),
        ("ok", {("p" * 254) + "/k": "v"}, "metadata.labels"),
        ("ok", {"example.com/" + "n" * 64: "v"}, "metadata.labels"),
        ("ok", {"k": "-starts-with-dash"}, "metadata.labels"),
    ],
)
async def test_invalid_names_and_labels_are_422_with_causes(kube, name, labels, field):
    obj = configmap(name)
    obj["metadata"]["labels"] = labels
    body = assert_status(await call(kube, "POST", CM, obj), 422, "Invalid")
    assert body["details"]["kind"] == "ConfigMap"
    assert any(c["field"] == field for c in body["details"]["causes"])


async def test_valid_qualified_label_keys_are_accepted(kube):
    obj = configmap("ok")
    obj["metadata"]["labels"] = {"example.com/Name_1.x": "Value-1", "plain": ""}
    assert (await call(kube, "POST", CM, obj)).status_code == 201


async def test_rbac_names_may_contain_colons_but_namespaces_must_be_labels(kube):
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "system:gpustack:reader"},
        "rules": [],
    }
    resp = await call(kube, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    assert resp.status_code == 201
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}}
    assert_status(await call(kube, "POST", "/api/v1/namespaces", ns), 422, "Invalid")


async def test_generate_name(kube):
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "cm-"}}
    resp = await call(kube, "POST", CM, obj)
    assert resp.status_code == 201
    name = resp.json()["metadata"]["name"]
    assert name.startswith("cm-") and len(name) == 8


async def test_url_and_body_must_agree(kube):
    created = (await call(kube, "POST", CM, configmap("a"))).json()
    created["metadata"]["name"] = "b"
    assert_status(await call(kube, "PUT", f"{CM}/a", created), 400, "BadRequest")
    wrong_kind = configmap("c")
    wrong_kind["kind"] = "Secret"
    assert_status(await call(kube, "POST", CM, wrong_kind), 400, "BadRequest")


async def test_method_not_allowed(kube):
    assert_status(await call(kube, "POST", f"{CM}/a", configmap("a")), 405, "MethodNotAllowed")
    assert_status(await call(kube, "PUT", CM, configmap("a")), 405, "MethodNotAllowed")


async def test_generation_bumps_only_on_spec_changes(sim, kube):
    dep = {**deployment("d", replicas=1), "status": {"replicas": 7}}
    path = "/apis/apps/v1/namespaces/default/deployments"
    created = (await call(kube, "POST", path, dep)).json()
    assert created["metadata"]["generation"] == 1
    assert "status" not in created  # a create resets status for kinds with /status

    created["metadata"]["labels"] = {"a": "b"}
    relabeled = (await call(kube, "PUT", f"{path}/d", created)).json()
    assert relabeled["metadata"]["generation"] == 1

    relabeled["spec"]["replicas"] = 3
    scaled = (await call(kube, "PUT", f"{path}/d", relabeled)).json()
    assert scaled["metadata"]["generation"] == 2

    status = dict(scaled, status={"replicas": 3})
    after_status = (await call(kube, "PUT", f"{path}/d/status", status)).json()
    assert after_status["metadata"]["generation"] == 2
    assert after_status["status"] == {"replicas": 3}


async def test_status_subresource_separation(kube):
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "spec": {"unschedulable": False},
        "status": {"capacity": {"cpu": "4"}},
    }
    created = (await call(kube, "POST", "/api/v1/nodes", node)).json()
    assert created["status"] == {"capacity": {"cpu": "4"}}  # Nodes keep status on create

    # the main endpoint ignores status changes
    main = dict(created, status={"capacity": {"cpu": "99"}}, spec={"unschedulable": True})
    after_main = (await call(kube, "PUT", "/api/v1/nodes/n1", main)).json()
    assert after_main["status"] == {"capacity": {"cpu": "4"}}
    assert after_main["spec"] == {"unschedulable": True}

    # the status endpoint ignores everything but status
    sub = dict(after_main, status={"capacity": {"cpu": "8"}}, spec={"unschedulable": False})
    sub["metadata"] = dict(sub["metadata"], labels={"ignored": "yes"})
    after_sub = (await call(kube, "PUT", "/api/v1/nodes/n1/status", sub)).json()
    assert after_sub["status"] == {"capacity": {"cpu": "8"}}
    assert after_sub["spec"] == {"unschedulable": True}
    assert "labels" not in after_sub["metadata"]

    patched = await call(
        kube,
        "PATCH",
        "/api/v1/nodes/n1/status",
        {"status": {"allocatable": {"cpu": "2"}}, "spec": {"x": 1}},
        content_type="application/merge-patch+json",
    )
    assert patched.json()["status"] == {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "2"}}
    assert patched.json()["spec"] == {"unschedulable": True}


async def test_status_of_kind_without_subresource_is_404(kube):
    await call(kube, "POST", CM, configmap("a"))
    assert_status(await call(kube, "GET", f"{CM}/a/status"), 404, "NotFound")


async def test_no_op_update_keeps_resource_version(kube):
    created = (await call(kube, "POST", CM, configmap("a", k="v"))).json()
    again = (await call(kube, "PUT", f"{CM}/a", created)).json()
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_merge_patch_and_json_patch(kube):
    await call(kube, "POST", CM, configmap("a", k="v", drop="me"))
    merged = await call(
        kube,
        "PATCH",
        f"{CM}/a",
        {"data": {"drop": None, "n": "1"}},
        content_type="application/merge-patch+json",
    )
    assert merged.status_code == 200 and merged.json()["data"] == {"k": "v", "n": "1"}

    ops = [
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "replace", "path": "/data/k", "value": "w"},
        {"op": "add", "path": "/metadata/labels", "value": {"a": "b"}},
        {"op": "remove", "path": "/data/n"},
    ]
    jp = await call(kube, "PATCH", f"{CM}/a", ops, content_type="application/json-patch+json")
    assert jp.status_code == 200, jp.text
    assert jp.json()["data"] == {"k": "w"} and jp.json()["metadata"]["labels"] == {"a": "b"}

    failed = await call(
        kube,
        "PATCH",
        f"{CM}/a",
        [{"op": "test", "path": "/data/k", "value": "x"}],
        content_type="application/json-patch+json",
    )
    assert_status(failed, 422, "Invalid")
    missing = await call(
        kube, "PATCH", f"{CM}/zzz", {"data": {}}, content_type="application/merge-patch+json"
    )
    assert_status(missing, 404, "NotFound")
    unknown = await call(kube, "PATCH", f"{CM}/a", {"data": {}}, content_type="text/plain")
    assert_status(unknown, 415, "UnsupportedMediaType")


async def test_patch_with_stale_resource_version_conflicts(kube):
    created = (await call(kube, "POST", CM, configmap("a"))).json()
    await call(
        kube, "PATCH", f"{CM}/a", {"data": {"x": "1"}}, content_type="application/merge-patch+json"
    )
    stale = {
        "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
        "data": {"x": "2"},
    }
    resp = await call(kube, "PATCH", f"{CM}/a", stale, content_type="application/merge-patch+json")
    assert_status(resp, 409, "Conflict")


async def test_delete_preconditions(kube):
    created = (await call(kube, "POST", CM, configmap("a"))).json()
    wrong_uid = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "nope"}}
    assert_status(await call(kube, "DELETE", f"{CM}/a", wrong_uid), 409, "Conflict")
    wrong_rv = {"preconditions": {"resourceVersion": "1"}}
    assert_status(await call(kube, "DELETE", f"{CM}/a", wrong_rv), 409, "Conflict")
    right = {
        "preconditions": {
            "uid": created["metadata"]["uid"],
            "resourceVersion": created["metadata"]["resourceVersion"],
        }
    }
    assert (await call(kube, "DELETE", f"{CM}/a", right)).status_code == 200


async def test_cluster_scoped_and_namespaced_paths(kube):
    assert (
        await call(
            kube,
            "POST",
            "/api/v1/nodes",
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}},
        )
    ).status_code == 201
    # a namespaced kind addressed without a namespace is not a resource path
    assert_status(await call(kube, "GET", "/api/v1/configmaps/a"), 404, "NotFound")
    ns = (await call(kube, "GET", "/api/v1/namespaces/default")).json()
    assert ns["status"]["phase"] == "Active"


async def test_crd_objects_are_served_in_every_version(sim, kube):
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
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
                },
                {
                    "name": "v1beta1",
                    "served": True,
                    "storage": False,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                },
            ],
        },
    }
    resp = await call(kube, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert resp.status_code == 201, resp.text
    conditions = {c["type"]: c["status"] for c in resp.json()["status"]["conditions"]}
    assert conditions["Established"] == "True"
    widget = {
        "apiVersion": "example.com/v1beta1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1},
    }
    path = "/apis/example.com/v1beta1/namespaces/default/widgets"
    assert (await call(kube, "POST", path, widget)).status_code == 201
    as_v1 = (await call(kube, "GET", "/apis/example.com/v1/namespaces/default/widgets/w")).json()
    assert as_v1["apiVersion"] == "example.com/v1" and as_v1["spec"] == {"size": 1}
    items = (await call(kube, "GET", "/apis/example.com/v1/widgets")).json()["items"]
    assert [i["apiVersion"] for i in items] == ["example.com/v1"]  # CR list items keep it

    deleted = await call(kube, "DELETE", "/apis/example.com/v1/namespaces/default/widgets/w")
    assert deleted.json()["kind"] == "Widget"  # custom resources return the deleted object
    gone = await call(
        kube,
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
    )
    assert gone.status_code == 200
    assert sim.registry.lookup("example.com", "v1", "widgets") is None
    assert_status(await call(kube, "GET", path), 404, "NotFound")


async def test_builtin_list_items_carry_no_kind(kube):
    await call(kube, "POST", CM, configmap("a"))
    items = (await call(kube, "GET", CM)).json()["items"]
    assert "kind" not in items[0] and "apiVersion" not in items[0]


KUEUE = "/apis/kueue.x-k8s.io/v1beta1"


def needs_kueue(sim) -> None:
    """These tests check the real Kueue schema; the stand-in CRDs have open schemas."""
    if shared_crds_dir() is None:
        pytest.skip(REAL_CRDS_MISSING)
    assert sim.registry.lookup("kueue.x-k8s.io", "v1beta1", "resourceflavors") is not None


async def test_custom_resources_are_validated_against_the_crd_schema(sim, kube):
    needs_kueue(sim)
    bad = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "f"},
        "spec": {"nodeLabels": {"x": True}},
    }
    body = assert_status(await call(kube, "POST", f"{KUEUE}/resourceflavors", bad), 422, "Invalid")
    assert "spec.nodeLabels" in body["message"]
    assert sim.store.get("kueue.x-k8s.io/v1beta1", "ResourceFlavor", "f") is None


async def test_field_validation_strict_warn_and_pruning(sim, kube):
    needs_kueue(sim)
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "f"},
        "spec": {"nodeLabels": {"x": "y"}, "bogus": 1},
    }
    strict = await call(
        kube, "POST", f"{KUEUE}/resourceflavors", obj, params={"fieldValidation": "Strict"}
    )
    body = assert_status(strict, 400, "BadRequest")
    assert 'unknown field "spec.bogus"' in body["message"]
    warned = await call(kube, "POST", f"{KUEUE}/resourceflavors", obj)
    assert warned.status_code == 201
    assert "spec.bogus" in warned.headers["Warning"]
    assert warned.json()["spec"] == {"nodeLabels": {"x": "y"}}  # pruned, as a real server does


async def test_strategic_merge_patch_for_builtins_and_415_for_custom_resources(sim, kube):
    dep = deployment("d")
    dep["spec"]["template"]["spec"]["containers"] = [
        {"name": "a", "image": "x:1"},
        {"name": "b", "image": "y:1"},
    ]
    path = "/apis/apps/v1/namespaces/default/deployments"
    await call(kube, "POST", path, dep)
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "y:2"}]}}}}
    resp = await call(
        kube, "PATCH", f"{path}/d", patch, content_type="application/strategic-merge-patch+json"
    )
    assert resp.status_code == 200, resp.text
    containers = resp.json()["spec"]["template"]["spec"]["containers"]
    assert containers == [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:2"}]

    needs_kueue(sim)
    sim.store.create(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "f"},
            "spec": {},
        }
    )
    resp = await call(
        kube,
        "PATCH",
        f"{KUEUE}/resourceflavors/f",
        {"spec": {}},
        content_type="application/strategic-merge-patch+json",
    )
    assert_status(resp, 415, "UnsupportedMediaType")


async def test_protobuf_bodies_from_kubectl_create_are_decoded(sim, kube):
    # what `kubectl create configmap x --from-literal=a=b` sends (kubectl 1.37)
    body = (
        b'k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12\x1b\n\x11\n\x01x\x12\x00\x1a\x00"\x00*'
        b'\x002\x008\x00B\x00\x12\x06\n\x01a\x12\x01b\x1a\x00"\x00'
    )
    resp = await call(
        kube, "POST", CM, raw=body, content_type="application/vnd.kubernetes.protobuf"
    )
    assert resp.status_code == 201, resp.text
    assert resp.json()["data"] == {"a": "b"} and resp.json()["metadata"]["name"] == "x"
    # kinds without a decoder are a clear 415
    dep = b"k8s\x00\n\x15\n\x07apps/v1\x12\nDeployment\x12\x00"
    resp = await call(
        kube,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        raw=dep,
        content_type="application/vnd.kubernetes.protobuf",
    )
    body = assert_status(resp, 415, "UnsupportedMediaType")
    assert "Deployment" in body["message"]
