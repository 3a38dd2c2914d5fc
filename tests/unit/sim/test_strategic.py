"""Strategic merge patch: the server-side merge kubectl relies on for built-in kinds."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_sim.apiserver.kinds import KindInfo, KindRegistry
from gpustack_sim.apiserver.strategic import (
    StrategicMergePatchError,
    StrategicMergeUnsupportedError,
    strategic_merge_patch,
)

REGISTRY = KindRegistry.with_builtins()
DEPLOYMENT = REGISTRY.by_kind("apps/v1", "Deployment")
NODE = REGISTRY.by_kind("v1", "Node")
POD = REGISTRY.by_kind("v1", "Pod")
CLUSTER_QUEUE = KindInfo(
    "kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues", "clusterqueue", False
)


def _kind(info: KindInfo | None) -> KindInfo:
    assert info is not None
    return info


def deployment(**spec: Any) -> dict[str, Any]:
    pod_spec = {
        "containers": [
            {
                "name": "app",
                "image": "app:1",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "ports": [{"containerPort": 80}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            },
            {"name": "sidecar", "image": "side:1"},
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "tolerations": [{"key": "a", "operator": "Exists"}],
        **spec,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}, "finalizers": ["a/b"]},
        "spec": {"replicas": 1, "template": {"spec": pod_spec}},
    }


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def test_maps_merge_and_null_deletes() -> None:
    patch = {"metadata": {"labels": {"tier": "front", "app": None}}, "spec": {"replicas": 3}}
    out = strategic_merge_patch(deployment(), patch, _kind(DEPLOYMENT))
    assert out["metadata"]["labels"] == {"tier": "front"}
    assert out["spec"]["replicas"] == 3
    assert out["metadata"]["name"] == "web"


def test_inputs_are_not_modified() -> None:
    original = deployment()
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}}
    strategic_merge_patch(original, patch, _kind(DEPLOYMENT))
    assert original == deployment()
    assert patch == {
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}
    }


def test_containers_merge_by_name_and_keep_others() -> None:
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "app:2",
                            "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                        },
                        {"name": "new", "image": "new:1"},
                    ]
                }
            }
        }
    }
    out = pod_spec(strategic_merge_patch(deployment(), patch, _kind(DEPLOYMENT)))
    assert [c["name"] for c in out["containers"]] == ["app", "sidecar", "new"]
    app = out["containers"][0]
    assert app["image"] == "app:2"
    assert app["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "3"},
        {"name": "C", "value": "4"},
    ]
    assert app["ports"] == [{"containerPort": 80}]


def test_ports_merge_by_container_port_and_mounts_by_path() -> None:
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "ports": [
                                {"containerPort": 80, "name": "http"},
                                {"containerPort": 443},
                            ],
                            "volumeMounts": [{"mountPath": "/data", "readOnly": True}],
                        }
                    ]
                }
            }
        }
    }
    app = pod_spec(strategic_merge_patch(deployment(), patch, _kind(DEPLOYMENT)))["containers"][0]
    assert app["ports"] == [{"containerPort": 80, "name": "http"}, {"containerPort": 443}]
    assert app["volumeMounts"] == [{"name": "data", "mountPath": "/data", "readOnly": True}]


def test_delete_directive_removes_a_list_element() -> None:
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "sidecar", "$patch": "delete"},
                        {"name": "app", "env": [{"name": "A", "$patch": "delete"}]},
                    ]
                }
            }
        }
    }
    out = pod_spec(strategic_merge_patch(deployment(), patch, _kind(DEPLOYMENT)))
    assert [c["name"] for c in out["containers"]] == ["app"]
    assert out["containers"][0]["env"] == [{"name": "B", "value": "2"}]


def test_replace_directive_in_a_list_replaces_it() -> None:
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"$patch": "replace"},
                        {"name": "only", "image": "only:1"},
                    ]
                }
            }
        }
    }
    out = pod_spec(strategic_merge_patch(deployment(), patch, _kind(DEPLOYMENT)))
    assert out["containers"] == [{"name": "only", "image": "only:1"}]


def test_replace_and_delete_directives_on_maps() -> None:
    patch = {
        "metadata": {"labels": {"$patch": "replace", "x": "y"}},
        "spec": {"template": {"spec": {"securityContext": {"$patch": "delete"}}}},
    }
    original = deployment(securityContext={"runAsUser": 1})
    out = strategic_merge_patch(original, patch, _kind(DEPLOYMENT))
    assert out["metadata"]["labels"] == {"x": "y"}
    assert "securityContext" not in pod_spec(out)


def test_lists_without_merge_key_are_replaced() -> None:
    patch = {"spec": {"template": {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}}}
    out = pod_spec(strategic_merge_patch(deployment(), patch, _kind(DEPLOYMENT)))
    assert out["tolerations"] == [{"key": "b", "operator": "Exists"}]


def test_finalizers_merge_as_a_set_and_delete_from_primitive_list() -> None:
    added = strategic_merge_patch(
        deployment(), {"metadata": {"finalizers": ["c/d", "a/b"]}}, _kind(DEPLOYMENT)
    )
    assert added["metadata"]["finalizers"] == ["a/b", "c/d"]
    removed = strategic_merge_patch(
        added, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/b"]}}, _kind(DEPLOYMENT)
    )
    assert removed["metadata"]["finalizers"] == ["c/d"]


def test_set_element_order_is_honoured() -> None:
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
                    "containers": [{"name": "app", "image": "app:3"}],
                }
            }
        }
    }
    out = pod_spec(strategic_merge_patch(deployment(), patch, _kind(DEPLOYMENT)))
    assert [c["name"] for c in out["containers"]] == ["sidecar", "app"]
    assert out["containers"][1]["image"] == "app:3"
    assert "$setElementOrder/containers" not in out


def test_retain_keys_clears_other_union_members() -> None:
    original = deployment()
    original["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
    out = strategic_merge_patch(original, patch, _kind(DEPLOYMENT))
    assert out["spec"]["strategy"] == {"type": "Recreate"}


def test_node_labels_and_conditions_by_type() -> None:
    node = {
        "metadata": {"name": "n1", "labels": {"a": "1"}},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "DiskPressure", "status": "False"},
            ]
        },
    }
    patch = {
        "metadata": {"labels": {"b": "2"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    out = strategic_merge_patch(node, patch, _kind(NODE))
    assert out["metadata"]["labels"] == {"a": "1", "b": "2"}
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "DiskPressure", "status": "False"},
    ]


def test_owner_references_merge_by_uid() -> None:
    pod = {"metadata": {"name": "p", "ownerReferences": [{"uid": "1", "name": "a"}]}}
    patch = {"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}}
    out = strategic_merge_patch(pod, patch, _kind(POD))
    assert [o["uid"] for o in out["metadata"]["ownerReferences"]] == ["1", "2"]


def test_custom_resources_are_refused_with_415() -> None:
    with pytest.raises(StrategicMergeUnsupportedError) as caught:
        strategic_merge_patch({"spec": {}}, {"spec": {"x": 1}}, CLUSTER_QUEUE)
    assert caught.value.status_code == 415


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"template": {"spec": {"containers": [{"image": "no-name"}]}}}},
        {"spec": {"template": {"spec": {"containers": ["not-a-map"]}}}},
        {"metadata": {"$patch": "explode"}},
        {"$patch": "delete"},
    ],
)
def test_malformed_patches_are_bad_requests(patch: dict[str, Any]) -> None:
    with pytest.raises(StrategicMergePatchError) as caught:
        strategic_merge_patch(deployment(), patch, _kind(DEPLOYMENT))
    assert caught.value.status_code == 400
