"""What the API server fills in on writes of Services and Secrets (docs/simulator.md,
"Built-in kinds"): a Service's defaults and cluster IP, a Secret's type and stringData."""

from __future__ import annotations

import base64
import ipaddress

import pytest

from gpustack_sim.apiserver.writedefaults import SERVICE_RANGE
from tests.integration.sim.helpers import call

pytestmark = pytest.mark.anyio

SERVICES = "/api/v1/namespaces/default/services"
SECRETS = "/api/v1/namespaces/default/secrets"
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"


def service(name: str, **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"ports": [{"port": 80}], **spec}}  # fmt: skip


async def test_a_new_service_gets_the_api_servers_defaults(kube):
    created = (await call(kube, "POST", SERVICES, service("web"))).json()
    spec = created["spec"]
    ip = spec["clusterIP"]
    assert ipaddress.IPv4Address(ip) in SERVICE_RANGE and ip != "10.96.0.1"  # the API server's
    assert spec["clusterIPs"] == [ip]
    assert spec["type"] == "ClusterIP" and spec["sessionAffinity"] == "None"
    assert spec["ipFamilies"] == ["IPv4"] and spec["ipFamilyPolicy"] == "SingleStack"
    assert spec["internalTrafficPolicy"] == "Cluster"
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    node_port = (await call(kube, "POST", SERVICES, service("np", type="NodePort"))).json()
    assert node_port["spec"]["externalTrafficPolicy"] == "Cluster"
    external = service("ext", type="ExternalName", externalName="example.com")
    named = (await call(kube, "POST", SERVICES, external)).json()["spec"]
    assert "clusterIP" not in named and "internalTrafficPolicy" not in named


async def test_cluster_ips_are_unique_and_kept_across_updates(kube):
    ips = set()
    for i in range(5):
        ips.add((await call(kube, "POST", SERVICES, service(f"s{i}"))).json()["spec"]["clusterIP"])
    assert len(ips) == 5
    current = (await call(kube, "GET", f"{SERVICES}/s0")).json()
    ip = current["spec"]["clusterIP"]
    # A PUT and an apply that leave the allocated fields out keep them, as on a real server.
    del current["spec"]["clusterIP"], current["spec"]["clusterIPs"]
    replaced = (await call(kube, "PUT", f"{SERVICES}/s0", current)).json()
    assert replaced["spec"]["clusterIP"] == ip and replaced["spec"]["clusterIPs"] == [ip]
    applied = await call(
        kube, "PATCH", f"{SERVICES}/s0", service("s0", selector={"app": "x"}),
        params={"fieldManager": "me", "force": "true"}, content_type=APPLY,
    )  # fmt: skip
    assert applied.status_code == 200, applied.text
    assert applied.json()["spec"]["clusterIP"] == ip


async def test_a_requested_cluster_ip_is_honoured_once(kube):
    wanted = "10.96.7.7"
    created = await call(kube, "POST", SERVICES, service("a", clusterIP=wanted))
    assert created.json()["spec"]["clusterIPs"] == [wanted]
    taken = await call(kube, "POST", SERVICES, service("b", clusterIP=wanted))
    assert taken.status_code == 422
    assert taken.json()["message"] == (
        f'Service "b" is invalid: spec.clusterIPs: Invalid value: ["{wanted}"]: failed to '
        f"allocate IP {wanted}: provided IP is already allocated"
    )
    headless = await call(kube, "POST", SERVICES, service("h", clusterIP="None"))
    assert headless.json()["spec"]["clusterIPs"] == ["None"]
    another = await call(kube, "POST", SERVICES, service("h2", clusterIP="None"))
    assert another.status_code == 201  # headless Services hold no address


async def test_a_secret_gets_its_type_and_string_data_is_merged_into_data(kube):
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": base64.b64encode(b"one").decode(), "b": "b2xk"},
            "stringData": {"b": "two"}}  # fmt: skip
    created = (await call(kube, "POST", SECRETS, body)).json()
    assert created["type"] == "Opaque"
    assert "stringData" not in created  # write-only: never stored or returned
    decoded = {k: base64.b64decode(v) for k, v in created["data"].items()}
    assert decoded == {"a": b"one", "b": b"two"}  # stringData wins over data
    patched = await call(
        kube, "PATCH", f"{SECRETS}/s", {"stringData": {"c": "three"}}, content_type=MERGE
    )
    assert base64.b64decode(patched.json()["data"]["c"]) == b"three"
    assert "stringData" not in (await call(kube, "GET", f"{SECRETS}/s")).json()
    bad_key = {**body, "metadata": {"name": "t"}, "stringData": {"a b": "x"}}
    refused = await call(kube, "POST", SECRETS, bad_key)
    assert refused.status_code == 422 and "data[a b]" in refused.json()["message"]
