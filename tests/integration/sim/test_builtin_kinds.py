"""Built-in kinds as a real API server answers them (docs/simulator.md, "Built-in kinds"):
status on create, validation messages, DELETE answers, list options."""

from __future__ import annotations

import pytest

from gpustack_sim.apiserver.builtinkinds import qos_class
from tests.integration.sim.helpers import call

pytestmark = pytest.mark.anyio

PODS = "/api/v1/namespaces/default/pods"
CMS = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"


def pod(name: str, containers: list[dict]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": containers}}  # fmt: skip


async def test_a_new_pod_is_pending_with_its_qos_class(kube):
    created = await call(kube, "POST", PODS, pod("p", [{"name": "c", "image": "x"}]))
    assert created.status_code == 201
    assert created.json()["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


def test_qos_classes() -> None:
    def spec(*resources: dict) -> dict:
        return {"containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)]}

    both = {"cpu": "1", "memory": "1Gi"}
    assert qos_class(spec({})) == "BestEffort"
    assert qos_class(spec({"limits": both})) == "Guaranteed"  # requests default to limits
    assert qos_class(spec({"limits": both, "requests": both})) == "Guaranteed"
    assert qos_class(spec({"limits": both, "requests": {"cpu": "500m"}})) == "Burstable"
    assert qos_class(spec({"limits": both}, {})) == "Burstable"
    assert qos_class(spec({"requests": {"memory": "1Gi"}})) == "Burstable"


async def test_a_container_without_a_name_is_refused(kube):
    refused = await call(kube, "POST", PODS, pod("p", [{"image": "x"}]))
    assert refused.status_code == 422
    assert refused.json()["message"] == (
        'Pod "p" is invalid: spec.containers[0].name: Required value'
    )
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"image": "x"}]}}},
    }  # fmt: skip
    resp = await call(kube, "POST", "/apis/apps/v1/namespaces/default/deployments", deployment)
    assert resp.status_code == 422
    assert "spec.template.spec.containers[0].name: Required value" in resp.json()["message"]


async def test_service_status_and_delete_answer(kube):
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
           "spec": {"ports": [{"port": 80}]}}  # fmt: skip
    path = "/api/v1/namespaces/default/services"
    created = await call(kube, "POST", path, svc)
    assert created.json()["status"] == {"loadBalancer": {}}
    deleted = await call(kube, "DELETE", f"{path}/s")
    assert deleted.status_code == 200
    assert deleted.json()["kind"] == "Service" and deleted.json()["metadata"]["name"] == "s"


async def test_config_map_keys_and_immutability(kube):
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad"},
           "data": {"a b": "1"}}  # fmt: skip
    refused = await call(kube, "POST", CMS, bad)
    assert refused.status_code == 422
    assert (
        'data[a b]: Invalid value: "a b": a valid config key must consist'
        in (refused.json()["message"])
    )

    frozen = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f"},
              "data": {"a": "1"}, "immutable": True}  # fmt: skip
    assert (await call(kube, "POST", CMS, frozen)).status_code == 201
    patched = await call(kube, "PATCH", f"{CMS}/f", {"data": {"a": "2"}}, content_type=MERGE)
    assert patched.status_code == 422
    assert patched.json()["message"] == (
        'ConfigMap "f" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    )
    thawed = await call(kube, "PATCH", f"{CMS}/f", {"immutable": False}, content_type=MERGE)
    assert thawed.status_code == 422
    labelled = await call(
        kube, "PATCH", f"{CMS}/f", {"metadata": {"labels": {"x": "y"}}}, content_type=MERGE
    )
    assert labelled.status_code == 200  # metadata stays writable

    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
              "data": {"k": "dg=="}, "immutable": True}  # fmt: skip
    secrets = "/api/v1/namespaces/default/secrets"
    assert (await call(kube, "POST", secrets, secret)).status_code == 201
    changed = await call(kube, "PATCH", f"{secrets}/s", {"data": {"k": "dw=="}}, content_type=MERGE)
    assert changed.status_code == 422


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"resourceVersionMatch": "Exact"}, "forbidden unless resourceVersion is provided"),
        ({"resourceVersionMatch": "Newest", "resourceVersion": "1"}, 'Unsupported value: "Newest"'),
        ({"resourceVersionMatch": "Exact", "resourceVersion": "0"}, 'for resourceVersion "0"'),
    ],
)
async def test_list_resource_version_match_rules(kube, params, fragment):
    resp = await call(kube, "GET", CMS, params=params)
    assert resp.status_code == 422
    message = resp.json()["message"]
    assert message.startswith('ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: ')
    assert fragment in message
    ok = await call(kube, "GET", CMS, params={"resourceVersionMatch": "NotOlderThan",
                                              "resourceVersion": "1"})  # fmt: skip
    assert ok.status_code == 200


async def test_the_kubernetes_service_is_there(kube):
    resp = await call(kube, "GET", "/api/v1/namespaces/default/services/kubernetes")
    assert resp.status_code == 200
    service = resp.json()
    assert service["metadata"]["labels"] == {"component": "apiserver", "provider": "kubernetes"}
    assert service["spec"]["ports"][0]["name"] == "https"
    assert service["status"] == {"loadBalancer": {}}
