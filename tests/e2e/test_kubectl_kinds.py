"""kubectl against the simulator's StatefulSets, ReplicationControllers, Ingresses,
CertificateSigningRequests, CSIStorageCapacities and APIServices, and its checks of built-in
kinds from their published schemas (docs/simulator.md, "Built-in kinds")."""

from __future__ import annotations

import json

import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.e2e.conftest import Kubectl
from tests.integration.sim.helpers import certificate_signing_request, deployment
from tests.integration.sim.test_builtin_kind_catalogue import SAMPLES

pytestmark = pytest.mark.anyio

# kubectl api-resources: name -> (short names, APIVERSION, NAMESPACED, KIND)
API_RESOURCES = {
    "statefulsets": ("sts", "apps/v1", "true", "StatefulSet"),
    "replicationcontrollers": ("rc", "v1", "true", "ReplicationController"),
    "ingresses": ("ing", "networking.k8s.io/v1", "true", "Ingress"),
    "certificatesigningrequests": ("csr", "certificates.k8s.io/v1", "false",
                                   "CertificateSigningRequest"),
    "csistoragecapacities": ("", "storage.k8s.io/v1", "true", "CSIStorageCapacity"),
    "apiservices": ("", "apiregistration.k8s.io/v1", "false", "APIService"),
}  # fmt: skip


async def test_api_resources_lists_them(kubectl: Kubectl) -> None:
    rows = (await kubectl.out("api-resources")).splitlines()[1:]
    found = {}
    for row in rows:
        cells = row.split()
        if cells[0] in API_RESOURCES:
            # A resource without short names has an empty SHORTNAMES column.
            short = cells[1] if len(cells) == 5 else ""
            found[cells[0]] = (short, *cells[-3:])
    assert found == API_RESOURCES
    everything = (await kubectl.out("api-resources", "--categories=all", "-o", "name")).split()
    assert {"statefulsets.apps", "replicationcontrollers"} <= set(everything)
    assert "apiservices.apiregistration.k8s.io" in (
        await kubectl.out("api-resources", "--categories=api-extensions", "-o", "name")
    )


async def test_create_get_scale_delete(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    for _, sample in SAMPLES.values():
        out = await kubectl.out("create", "-f", "-", stdin=json.dumps(sample))
        assert "created" in out, out
    listed = await kubectl.out("get", "sts,rc,ing,csistoragecapacities")
    assert "statefulset.apps/db" in listed and "0/0" in listed
    assert "replicationcontroller/old" in listed
    assert "ingress.networking.k8s.io/web" in listed and "web.example.com" in listed
    assert "csistoragecapacity.storage.k8s.io/zone-a" in listed and "fast" in listed
    csr = (await kubectl.out("get", "csr")).splitlines()
    assert csr[0].split() == [
        "NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"
    ]  # fmt: skip
    # Authentication is off: every request is the administrator's, and the CSR says so.
    assert csr[1].split()[2:] == [
        "kubernetes.io/kube-apiserver-client", "system:admin", "<none>", "Pending"
    ]  # fmt: skip
    service = (await kubectl.out("get", "apiservices")).splitlines()[1].split()
    assert service[:3] == ["v1beta1.metrics.k8s.io", "kube-system/metrics-server", "Unknown"]

    assert "scaled" in await kubectl.out("scale", "statefulset/db", "--replicas=3")
    assert "scaled" in await kubectl.out("scale", "rc/old", "--replicas=0")
    stored = e2e_sim.store.get("apps/v1", "StatefulSet", "db", "default")
    assert stored is not None and stored["spec"]["replicas"] == 3

    deleted = await kubectl.out(
        "delete", "sts/db", "rc/old", "ing/web", "csr/jane", "apiservice/v1beta1.metrics.k8s.io"
    )
    assert deleted.count("deleted") == 5
    assert "No resources found" in (
        (await kubectl("get", "sts,rc,ing,csr,apiservices")).stderr.decode()
    )


async def test_unknown_and_mistyped_fields_of_built_in_kinds(kubectl: Kubectl) -> None:
    """kubectl asks for Strict field validation by default, Warn with --validate=warn."""
    typo = deployment("web", replica=2)
    refused = await kubectl("apply", "-f", "-", stdin=json.dumps(typo), check=False)
    assert refused.returncode != 0
    assert 'unknown field "spec.replica"' in refused.stderr.decode()

    warned = await kubectl("apply", "--validate=warn", "-f", "-", stdin=json.dumps(typo))
    assert 'unknown field "spec.replica"' in warned.stderr.decode()
    assert "deployment.apps/web created" in warned.stdout.decode()

    mistyped = deployment("api", replicas="two")
    bad = await kubectl("apply", "-f", "-", stdin=json.dumps(mistyped), check=False)
    assert bad.returncode != 0
    assert "cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas" in (
        bad.stderr.decode()
    )
    nameless = deployment("nameless")
    del nameless["spec"]["template"]["spec"]["containers"][0]["name"]
    invalid = await kubectl("apply", "-f", "-", stdin=json.dumps(nameless), check=False)
    assert "spec.template.spec.containers[0].name: Required value" in invalid.stderr.decode()


async def test_certificate_approve_and_deny(kubectl: Kubectl, e2e_sim: SimServer) -> None:
    """kubectl writes /approval in protobuf; a CSR is approved or denied, never both."""
    for name in ("jane", "joe"):
        created = await kubectl.out(
            "create", "-f", "-", stdin=json.dumps(certificate_signing_request(name))
        )
        assert f"certificatesigningrequest.certificates.k8s.io/{name} created" in created

    approved = await kubectl.out("certificate", "approve", "jane")
    assert approved.strip() == "certificatesigningrequest.certificates.k8s.io/jane approved"
    denied = await kubectl.out("certificate", "deny", "joe")
    assert denied.strip() == "certificatesigningrequest.certificates.k8s.io/joe denied"

    status = json.loads(await kubectl.out("get", "csr", "jane", "-o", "jsonpath={.status}"))
    [condition] = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Approved",
        "True",
        "KubectlApprove",
    )
    assert condition["message"] == "This CSR was approved by kubectl certificate approve."
    assert condition["lastUpdateTime"] and condition["lastTransitionTime"]
    rows = [row.split() for row in (await kubectl.out("get", "csr")).splitlines()[1:]]
    assert {row[0]: row[-1] for row in rows} == {"jane": "Approved", "joe": "Denied"}
    stored = e2e_sim.store.get("certificates.k8s.io/v1", "CertificateSigningRequest", "joe")
    assert stored is not None
    assert [c["reason"] for c in stored["status"]["conditions"]] == ["KubectlDeny"]

    # kubectl itself refuses to approve a CSR it reads as denied, --force or not; a write
    # that bypasses kubectl's check meets the API server's validation.
    for force in ((), ("--force",)):
        again = await kubectl("certificate", "approve", *force, "joe", check=False)
        assert again.returncode == 1
        assert again.stderr.decode().strip() == (
            'error: certificate signing request "joe" is already Denied'
        )
    patch = [
        {
            "op": "add",
            "path": "/status/conditions/-",
            "value": {"type": "Approved", "status": "True"},
        }
    ]
    forced = await kubectl(
        "patch", "csr", "joe", "--subresource=approval", "--type=json", "-p", json.dumps(patch),
        check=False,
    )  # fmt: skip
    assert forced.returncode == 1
    assert forced.stderr.decode().strip() == (
        'The CertificateSigningRequest "joe" is invalid: status.conditions[1].type: '
        'Invalid value: "Approved": Approved and Denied conditions are mutually exclusive'
    )
