"""Discovery documents and OpenAPI v3 built from a KindRegistry."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_sim.apiserver.discovery import (
    OpenApiCache,
    aggregated_discovery,
    api_group,
    api_group_list,
    api_resource_list,
    openapi_v3_group_version,
    openapi_v3_root,
    preferred_version,
)
from gpustack_sim.apiserver.kinds import KindInfo, KindRegistry, kinds_from_crd


@pytest.fixture
def registry(crd_docs: dict[str, list[dict[str, Any]]]) -> KindRegistry:
    reg = KindRegistry.with_builtins()
    for name, docs in crd_docs.items():
        if name.startswith("kueue.x-k8s.io_"):
            for doc in docs:
                reg.register_all(kinds_from_crd(doc))
    return reg


def test_core_resource_list_has_subresources_and_short_names(registry: KindRegistry) -> None:
    doc = api_resource_list(registry, "", "v1")
    assert doc is not None and doc["groupVersion"] == "v1"
    by_name = {r["name"]: r for r in doc["resources"]}
    assert by_name["nodes"]["kind"] == "Node"
    assert by_name["nodes"]["namespaced"] is False
    assert by_name["nodes"]["shortNames"] == ["no"]
    assert "watch" in by_name["nodes"]["verbs"]
    assert by_name["nodes/status"]["verbs"] == ["get", "patch", "update"]
    assert "configmaps/status" not in by_name
    assert api_resource_list(registry, "", "v2") is None


def test_the_token_subresource_is_listed_as_create_only(registry: KindRegistry) -> None:
    """``serviceaccounts/token`` as kube-apiserver lists it (TokenRequest, create only)."""
    doc = api_resource_list(registry, "", "v1")
    assert doc is not None
    token = next(r for r in doc["resources"] if r["name"] == "serviceaccounts/token")
    assert token["verbs"] == ["create"]
    assert (token["group"], token["version"], token["kind"]) == (
        "authentication.k8s.io",
        "v1",
        "TokenRequest",
    )
    core = aggregated_discovery(registry, core=True, version="v2")["items"][0]["versions"][0]
    accounts = next(r for r in core["resources"] if r["resource"] == "serviceaccounts")
    assert accounts["subresources"] == [
        {
            "subresource": "token",
            "responseKind": {
                "group": "authentication.k8s.io",
                "version": "v1",
                "kind": "TokenRequest",
            },
            "verbs": ["create"],
        }
    ]


def test_groups_prefer_the_highest_kubernetes_version(registry: KindRegistry) -> None:
    assert preferred_version(registry, "kueue.x-k8s.io") == "v1beta2"
    group = api_group(registry, "kueue.x-k8s.io")
    assert group is not None
    assert [v["version"] for v in group["versions"]] == ["v1beta2", "v1beta1"]
    assert group["preferredVersion"]["groupVersion"] == "kueue.x-k8s.io/v1beta2"
    names = [g["name"] for g in api_group_list(registry)["groups"]]
    assert "apps" in names and "kueue.x-k8s.io" in names and "" not in names
    kueue = api_resource_list(registry, "kueue.x-k8s.io", "v1beta2")
    assert kueue is not None
    cq = next(r for r in kueue["resources"] if r["name"] == "clusterqueues")
    assert cq["shortNames"] == ["cq"]
    assert cq["singularName"] == "clusterqueue"


def test_registry_changes_show_at_once() -> None:
    reg = KindRegistry.with_builtins()
    assert api_group(reg, "example.com") is None
    reg.register(KindInfo("example.com", "v1", "Widget", "widgets", "widget", True, ("wd",)))
    group = api_group(reg, "example.com")
    assert group is not None and group["preferredVersion"]["version"] == "v1"


def test_aggregated_discovery_splits_core_and_groups(registry: KindRegistry) -> None:
    core = aggregated_discovery(registry, core=True, version="v2")
    assert core["apiVersion"] == "apidiscovery.k8s.io/v2"
    assert [i["metadata"]["name"] for i in core["items"]] == [""]
    nodes = next(
        r for r in core["items"][0]["versions"][0]["resources"] if r["resource"] == "nodes"
    )
    assert nodes["scope"] == "Cluster"
    assert nodes["subresources"][0]["subresource"] == "status"
    groups = aggregated_discovery(registry, core=False, version="v2")
    kueue = next(i for i in groups["items"] if i["metadata"]["name"] == "kueue.x-k8s.io")
    assert [v["version"] for v in kueue["versions"]] == ["v1beta2", "v1beta1"]


def test_openapi_v3_carries_crd_schemas_and_field_validation(registry: KindRegistry) -> None:
    root = openapi_v3_root(registry)
    assert "apis/kueue.x-k8s.io/v1beta2" in root["paths"]
    assert root["paths"]["api/v1"]["serverRelativeURL"].startswith("/openapi/v3/api/v1?hash=")
    doc = openapi_v3_group_version(registry, "kueue.x-k8s.io", "v1beta2")
    assert doc is not None
    schema = doc["components"]["schemas"]["io.x-k8s.kueue.v1beta2.ClusterQueue"]
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "kueue.x-k8s.io", "version": "v1beta2", "kind": "ClusterQueue"}
    ]
    assert "resourceGroups" in schema["properties"]["spec"]["properties"]
    patch = doc["paths"]["/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{name}"]["patch"]
    assert {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}} in patch[
        "parameters"
    ]
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    assert openapi_v3_group_version(registry, "nope.io", "v1") is None


def test_openapi_cache_follows_registry_changes() -> None:
    reg = KindRegistry.with_builtins()
    widget = KindInfo(
        "example.com", "v1", "Widget", "widgets", "widget", True, schema={"type": "object"}
    )
    reg.register(widget)
    cache = OpenApiCache()
    body, digest = cache.document(reg, "example.com", "v1")
    assert cache.document(reg, "example.com", "v1") == (body, digest)
    assert openapi_v3_root(reg, cache)["paths"]["apis/example.com/v1"]["serverRelativeURL"] == (
        f"/openapi/v3/apis/example.com/v1?hash={digest}"
    )
    reg.register(
        KindInfo(
            "example.com",
            "v1",
            "Widget",
            "widgets",
            "widget",
            True,
            schema={"type": "object", "properties": {"spec": {"type": "object"}}},
        )
    )
    new_body, new_digest = cache.document(reg, "example.com", "v1")
    assert new_digest != digest and b'"spec"' in new_body
    reg.unregister_group_resource("example.com", "widgets")
    assert cache.document(reg, "example.com", "v1") == (b"", "")
