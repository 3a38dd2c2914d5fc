"""StatefulSet, ReplicaSet, ReplicationController, Ingress, CertificateSigningRequest,
CSIStorageCapacity and APIService as kube-apiserver serves them: discovery, CRUD, their
subresources (docs/simulator.md, "Built-in kinds")."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.integration.sim.helpers import call

pytestmark = pytest.mark.anyio


def _template(app: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": app, "image": "nginx"}]},
    }


CSR_REQUEST = base64.b64encode(b"-----BEGIN CERTIFICATE REQUEST-----\n").decode()

# (collection path, a valid object) per kind, as a client would create them.
SAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "StatefulSet": (
        "/apis/apps/v1/namespaces/default/statefulsets",
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
         "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                  "template": _template("db")}},
    ),
    "ReplicaSet": (
        "/apis/apps/v1/namespaces/default/replicasets",
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
         "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                  "template": _template("web")}},
    ),
    "ReplicationController": (
        "/api/v1/namespaces/default/replicationcontrollers",
        {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "old"},
         "spec": {"replicas": 2, "selector": {"app": "old"}, "template": _template("old")}},
    ),
    "Ingress": (
        "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
        {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"},
         "spec": {"rules": [{"host": "web.example.com", "http": {"paths": [
             {"path": "/", "pathType": "Prefix",
              "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}},
    ),
    "CertificateSigningRequest": (
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
         "metadata": {"name": "jane"},
         "spec": {"request": CSR_REQUEST, "signerName": "kubernetes.io/kube-apiserver-client",
                  "usages": ["client auth"], "username": "someone-else"}},
    ),
    "CSIStorageCapacity": (
        "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities",
        {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
         "metadata": {"name": "zone-a"}, "storageClassName": "fast", "capacity": "100Gi"},
    ),
    "APIService": (
        "/apis/apiregistration.k8s.io/v1/apiservices",
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": "v1beta1.metrics.k8s.io"},
         "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                  "versionPriority": 100,
                  "service": {"namespace": "kube-system", "name": "metrics-server"}}},
    ),
}  # fmt: skip

# What kube-apiserver's discovery says of each: resource, namespaced, short names,
# categories, subresources.
DISCOVERY = {
    "StatefulSet": ("statefulsets", True, ["sts"], ["all"], {"status", "scale"}),
    "ReplicaSet": ("replicasets", True, ["rs"], ["all"], {"status", "scale"}),
    "ReplicationController": ("replicationcontrollers", True, ["rc"], ["all"], {"status", "scale"}),
    "Ingress": ("ingresses", True, ["ing"], None, {"status"}),
    "CertificateSigningRequest": (
        "certificatesigningrequests", False, ["csr"], None, {"approval", "status"}
    ),
    "CSIStorageCapacity": ("csistoragecapacities", True, None, None, set()),
    "APIService": ("apiservices", False, None, ["api-extensions"], {"status"}),
}  # fmt: skip


def _group_version(path: str) -> str:
    parts = path.split("/")
    return "/api/v1" if parts[1] == "api" else "/".join(parts[:4])


@pytest.mark.parametrize("kind", sorted(SAMPLES))
async def test_listed_in_discovery(kube, kind: str) -> None:
    path, _ = SAMPLES[kind]
    plural, namespaced, short, categories, subresources = DISCOVERY[kind]
    listed = (await call(kube, "GET", _group_version(path))).json()["resources"]
    entry = next(r for r in listed if r["name"] == plural)
    assert entry["kind"] == kind and entry["namespaced"] is namespaced
    assert entry.get("shortNames") == short and entry.get("categories") == categories
    assert {r["name"].partition("/")[2] for r in listed if r["name"].startswith(f"{plural}/")} == (
        subresources
    )


async def test_aggregated_discovery_carries_the_subresources(kube) -> None:
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    async with kube.call_api(
        "GET", version="", base="/apis", headers={"Accept": accept}, raise_for_status=False
    ) as resp:
        await resp.aread()
        groups = resp.json()["items"]
    resources = {
        r["responseKind"]["kind"]: r for g in groups for v in g["versions"] for r in v["resources"]
    }
    csr = resources["CertificateSigningRequest"]
    assert csr["scope"] == "Cluster" and csr["shortNames"] == ["csr"]
    assert {s["subresource"] for s in csr["subresources"]} == {"status", "approval"}
    sts = resources["StatefulSet"]
    assert {s["subresource"] for s in sts["subresources"]} == {"status", "scale"}
    assert resources["APIService"]["categories"] == ["api-extensions"]


@pytest.mark.parametrize("kind", sorted(SAMPLES))
async def test_create_get_list_delete(kube, kind: str) -> None:
    path, sample = SAMPLES[kind]
    name = sample["metadata"]["name"]
    created = await call(kube, "POST", path, sample)
    assert created.status_code == 201, created.text
    assert created.json()["kind"] == kind
    assert (await call(kube, "GET", f"{path}/{name}")).json()["metadata"]["uid"] == (
        created.json()["metadata"]["uid"]
    )
    listed = (await call(kube, "GET", path)).json()
    assert listed["kind"] == f"{kind}List" and [i["metadata"]["name"] for i in listed["items"]] == [
        name
    ]
    deleted = await call(kube, "DELETE", f"{path}/{name}")
    assert deleted.status_code == 200 and deleted.json()["status"] == "Success"
    assert (await call(kube, "GET", f"{path}/{name}")).status_code == 404


@pytest.mark.parametrize("kind", ["StatefulSet", "ReplicaSet", "ReplicationController"])
async def test_scale(kube, kind: str) -> None:
    path, sample = SAMPLES[kind]
    name = sample["metadata"]["name"]
    await call(kube, "POST", path, sample)
    scale = (await call(kube, "GET", f"{path}/{name}/scale")).json()
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == sample["spec"]["replicas"]
    assert scale["status"] == {"replicas": 0, "selector": f"app={name}"}
    scale["spec"]["replicas"] = 5
    assert (await call(kube, "PUT", f"{path}/{name}/scale", scale)).json()["spec"]["replicas"] == 5
    assert (await call(kube, "GET", f"{path}/{name}")).json()["spec"]["replicas"] == 5


async def test_generation_of_replication_controllers_and_ingresses(kube) -> None:
    for kind in ("ReplicationController", "Ingress"):
        path, sample = SAMPLES[kind]
        created = (await call(kube, "POST", path, sample)).json()
        assert created["metadata"]["generation"] == 1
        created["spec"]["rules" if kind == "Ingress" else "replicas"] = (
            [] if kind == "Ingress" else 4
        )
        updated = await call(kube, "PUT", f"{path}/{created['metadata']['name']}", created)
        assert updated.json()["metadata"]["generation"] == 2, updated.text


async def test_csr_names_its_requestor_and_is_approved_through_approval(kube) -> None:
    path, sample = SAMPLES["CertificateSigningRequest"]
    created = (await call(kube, "POST", path, sample)).json()
    # The requestor is who sent it (authentication is off: the administrator), not the body's.
    assert created["spec"]["username"] == "system:admin"
    assert "system:masters" in created["spec"]["groups"]
    assert "status" not in created

    approved = dict(created)
    approved["spec"] = {**created["spec"], "signerName": "example.com/other"}
    approved["status"] = {
        "conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}],
        "certificate": CSR_REQUEST,
    }
    resp = await call(kube, "PUT", f"{path}/jane/approval", approved)
    assert resp.status_code == 200, resp.text
    after = resp.json()
    # /approval changes the conditions alone: not the spec, not the issued certificate.
    assert list(after["status"]) == ["conditions"]
    [condition] = after["status"]["conditions"]
    stamps = {key: condition.pop(key) for key in ("lastUpdateTime", "lastTransitionTime")}
    assert condition == approved["status"]["conditions"][0]
    assert all(stamp.endswith("Z") for stamp in stamps.values())  # the server stamps them
    assert after["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client"

    issued = dict(after, status={**after["status"], "certificate": CSR_REQUEST})
    resp = await call(kube, "PUT", f"{path}/jane/status", issued)
    assert resp.json()["status"]["certificate"] == CSR_REQUEST


async def test_kubectl_columns(kube) -> None:
    table = "application/json;as=Table;v=v1;g=meta.k8s.io"
    expected = {
        "StatefulSet": ["Name", "Ready", "Age"],
        "ReplicaSet": ["Name", "Desired", "Current", "Ready", "Age"],
        "ReplicationController": ["Name", "Desired", "Current", "Ready", "Age"],
        "Ingress": ["Name", "Class", "Hosts", "Address", "Ports", "Age"],
        "CertificateSigningRequest": [
            "Name", "Age", "SignerName", "Requestor", "RequestedDuration", "Condition"
        ],
        "CSIStorageCapacity": ["Name", "StorageClassName", "Age"],
        "APIService": ["Name", "Service", "Available", "Age"],
    }  # fmt: skip
    for kind, (path, sample) in SAMPLES.items():
        await call(kube, "POST", path, sample)
        async with kube.call_api(
            "GET", version="", base=path, headers={"Accept": table}, raise_for_status=False
        ) as resp:
            await resp.aread()
            payload = resp.json()
        assert [c["name"] for c in payload["columnDefinitions"]] == expected[kind], kind
        cells = dict(zip(expected[kind], payload["rows"][0]["cells"], strict=True))
        if kind == "Ingress":
            assert (cells["Class"], cells["Hosts"], cells["Ports"]) == (
                "<none>",
                "web.example.com",
                "80",
            )
        if kind == "CertificateSigningRequest":
            assert (cells["Requestor"], cells["Condition"]) == ("system:admin", "Pending")
        if kind == "APIService":
            assert cells["Service"] == "kube-system/metrics-server"


async def test_in_both_openapi_documents(kube) -> None:
    """kubectl finds every kind in /openapi/v3 (field validation) and /openapi/v2."""
    root = (await call(kube, "GET", "/openapi/v3")).json()["paths"]
    v2 = (await call(kube, "GET", "/openapi/v2")).json()["definitions"]
    v2_kinds = {gvk["kind"] for d in v2.values() for gvk in d["x-kubernetes-group-version-kind"]}
    for kind, (path, _) in SAMPLES.items():
        group_version = _group_version(path).lstrip("/")
        document = (await call(kube, "GET", root[group_version]["serverRelativeURL"])).json()
        kinds = {
            gvk["kind"]
            for schema in document["components"]["schemas"].values()
            for gvk in schema["x-kubernetes-group-version-kind"]
        }
        assert kind in kinds and kind in v2_kinds, kind
