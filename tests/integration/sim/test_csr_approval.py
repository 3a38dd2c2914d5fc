"""CertificateSigningRequest approval: protobuf bodies as kubectl writes them, and the API's
rules for conditions (docs/simulator.md, "Built-in kinds" and "What it does not implement")."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpustack_sim.apiserver import protobuf
from gpustack_sim.apiserver.certificates import check_conditions
from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.server import SimServer
from tests.integration.sim.helpers import (
    call,
    certificate_signing_request,
    pb_envelope,
    pb_field,
    pb_number,
)

pytestmark = pytest.mark.anyio

CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
PROTOBUF = "application/vnd.kubernetes.protobuf"
PEM = b"-----BEGIN CERTIFICATE REQUEST-----\nMIHJ\n-----END CERTIFICATE REQUEST-----\n"


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[SimServer]:
    """A started simulator without CRDs: these tests need built-in kinds only."""
    server = SimServer(namespaces=["default"])
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _time(seconds: int) -> bytes:
    return pb_number(1, seconds) + pb_number(2, 0)  # meta/v1 Time: seconds, nanos


def _condition(kind: str, reason: str, updated: int | None = None) -> bytes:
    """A condition as kubectl's approve/deny adds it: no lastTransitionTime (an empty Time)."""
    stamp = pb_field(4, _time(updated)) if updated is not None else b""
    return (
        pb_field(1, kind.encode())
        + pb_field(2, reason.encode())
        + pb_field(3, b"by a test")
        + stamp
        + pb_field(5, b"")
        + pb_field(6, b"True")
    )


def _approval_body(created: dict[str, Any], condition: bytes) -> bytes:
    meta = created["metadata"]
    raw = (
        pb_field(
            1, pb_field(1, meta["name"].encode()) + pb_field(6, meta["resourceVersion"].encode())
        )
        + pb_field(2, pb_field(1, base64.b64decode(created["spec"]["request"])))
        + pb_field(3, pb_field(1, condition))
    )
    return pb_envelope("certificates.k8s.io/v1", "CertificateSigningRequest", raw)


def test_a_protobuf_csr_decodes_to_its_json_form() -> None:
    meta = (
        pb_field(1, b"jane")
        + pb_field(6, b"7")
        + pb_field(8, _time(1_700_000_000))
        + pb_field(17, pb_field(1, b"kubectl-create"))  # managedFields: the server keeps its own
    )
    spec = (
        pb_field(1, PEM)
        + pb_field(2, b"jane")
        + pb_field(3, b"u-1")
        + pb_field(4, b"system:masters")
        + pb_field(4, b"system:authenticated")
        + pb_field(5, b"client auth")
        + pb_field(5, b"digital signature")
        + pb_field(6, pb_field(1, b"scopes") + pb_field(2, pb_field(1, b"a") + pb_field(1, b"b")))
        + pb_field(7, b"kubernetes.io/kube-apiserver-client")
        + pb_number(8, 3600)
    )
    status = (
        pb_field(1, _condition("Approved", "KubectlApprove", updated=1_700_000_060))
        + pb_field(1, _condition("Failed", "NoCA"))
        + pb_field(2, b"-----BEGIN CERTIFICATE-----\n")
    )
    body = pb_envelope(
        "certificates.k8s.io/v1",
        "CertificateSigningRequest",
        pb_field(1, meta) + pb_field(2, spec) + pb_field(3, status),
    )

    assert protobuf.decode(body) == {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {
            "name": "jane",
            "resourceVersion": "7",
            "creationTimestamp": "2023-11-14T22:13:20Z",
        },
        "spec": {
            "request": base64.b64encode(PEM).decode(),
            "username": "jane",
            "uid": "u-1",
            "groups": ["system:masters", "system:authenticated"],
            "usages": ["client auth", "digital signature"],
            "extra": {"scopes": ["a", "b"]},
            "signerName": "kubernetes.io/kube-apiserver-client",
            "expirationSeconds": 3600,
        },
        "status": {
            "conditions": [
                {
                    "type": "Approved",
                    "reason": "KubectlApprove",
                    "message": "by a test",
                    "lastUpdateTime": "2023-11-14T22:14:20Z",
                    "status": "True",
                },
                {"type": "Failed", "reason": "NoCA", "message": "by a test", "status": "True"},
            ],
            "certificate": base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode(),
        },
    }


async def test_a_protobuf_approval_sets_the_condition_and_its_times(sim, kube) -> None:
    created = (await call(kube, "POST", CSRS, certificate_signing_request("jane"))).json()
    body = _approval_body(created, _condition("Approved", "KubectlApprove", updated=1_700_000_060))

    answer = await call(kube, "PUT", f"{CSRS}/jane/approval", raw=body, content_type=PROTOBUF)

    assert answer.status_code == 200, answer.text
    [approved] = answer.json()["status"]["conditions"]
    assert approved["type"] == "Approved" and approved["reason"] == "KubectlApprove"
    assert approved["lastUpdateTime"] == "2023-11-14T22:14:20Z"  # as sent
    assert approved["lastTransitionTime"].endswith("Z")  # new: stamped by the server
    stored = sim.store.get("certificates.k8s.io/v1", "CertificateSigningRequest", "jane")
    assert stored is not None and stored["spec"] == created["spec"]
    assert stored["status"]["conditions"] == [approved]


async def _with_conditions(
    kube: Any, name: str, *conditions: dict[str, Any], via: str = "approval"
) -> Any:
    current = (await call(kube, "GET", f"{CSRS}/{name}")).json()
    current["status"] = {"conditions": list(conditions)}
    return await call(kube, "PUT", f"{CSRS}/{name}/{via}", current)


def _invalid(answer: Any, name: str, *causes: tuple[str, str, str]) -> None:
    """A 422 with these (field, reason, message) causes, printed as the API prints them."""
    assert answer.status_code == 422, answer.text
    body = answer.json()
    shown = [f"{field}: {message}" for field, _, message in causes]
    text = shown[0] if len(shown) == 1 else f"[{', '.join(shown)}]"
    assert body["message"] == f'CertificateSigningRequest "{name}" is invalid: {text}'
    assert [(c["field"], c["reason"], c["message"]) for c in body["details"]["causes"]] == list(
        causes
    )


DENIED = {"type": "Denied", "status": "True", "reason": "KubectlDeny"}
APPROVED = {"type": "Approved", "status": "True", "reason": "KubectlApprove"}


async def test_approved_and_denied_exclude_each_other(kube) -> None:
    await call(kube, "POST", CSRS, certificate_signing_request("joe"))
    assert (await _with_conditions(kube, "joe", DENIED)).status_code == 200
    stored = (await call(kube, "GET", f"{CSRS}/joe")).json()["status"]["conditions"]

    refused = await _with_conditions(kube, "joe", *stored, APPROVED)

    _invalid(
        refused,
        "joe",
        (
            "status.conditions[1].type",
            "FieldValueInvalid",
            'Invalid value: "Approved": Approved and Denied conditions are mutually exclusive',
        ),
    )


async def test_conditions_are_never_removed_nor_approved_through_status(kube) -> None:
    await call(kube, "POST", CSRS, certificate_signing_request("ann"))
    await _with_conditions(kube, "ann", APPROVED)
    [approved] = (await call(kube, "GET", f"{CSRS}/ann")).json()["status"]["conditions"]

    _invalid(
        await _with_conditions(kube, "ann"),
        "ann",
        (
            "status.conditions",
            "FieldValueForbidden",
            'Forbidden: updates may not remove a condition of type "Approved"',
        ),
    )
    # /status keeps the approval conditions as they were, and adds none.
    rewritten = {**approved, "reason": "Rewritten"}
    failed = {"type": "Failed", "status": "True", "reason": "NoCA"}
    kept = await _with_conditions(kube, "ann", rewritten, failed, via="status")
    assert kept.status_code == 200, kept.text
    conditions = kept.json()["status"]["conditions"]
    assert conditions[0] == approved and conditions[1]["reason"] == "NoCA"
    _invalid(
        await _with_conditions(kube, "ann", *conditions, DENIED, via="status"),
        "ann",
        (
            "status.conditions[2].type",
            "FieldValueInvalid",
            'Invalid value: "Denied": Approved and Denied conditions are mutually exclusive',
        ),
        (
            "status.conditions",
            "FieldValueForbidden",
            'Forbidden: updates may not add a condition of type "Denied"',
        ),
    )


async def test_each_condition_has_a_type_a_status_and_appears_once(kube) -> None:
    await call(kube, "POST", CSRS, certificate_signing_request("bob"))

    refused = await _with_conditions(
        kube,
        "bob",
        APPROVED,
        {**APPROVED, "reason": "Again"},
        {"type": "Failed", "status": "False"},
        {"type": "Ready"},
        {"status": "Unknown"},
        {"type": "Ready", "status": "Maybe"},
    )

    _invalid(
        refused,
        "bob",
        ("status.conditions[1].type", "FieldValueDuplicate", 'Duplicate value: "Approved"'),
        (
            "status.conditions[2].status",
            "FieldValueNotSupported",
            'Unsupported value: "False": supported values: "True"',
        ),
        ("status.conditions[3].status", "FieldValueRequired", "Required value"),
        ("status.conditions[4].type", "FieldValueRequired", "Required value"),
        (
            "status.conditions[5].status",
            "FieldValueNotSupported",
            'Unsupported value: "Maybe": supported values: "False", "True", "Unknown"',
        ),
        ("status.conditions[5].type", "FieldValueDuplicate", 'Duplicate value: "Ready"'),
    )


def test_what_the_stored_object_already_breaks_is_tolerated() -> None:
    """Objects stored before these rules (both Approved and Denied, a type twice, a type
    missing) may still be updated, as the API server keeps accepting existing data."""
    info = SimServer().store.info_for("certificates.k8s.io/v1", "CertificateSigningRequest")
    legacy = [APPROVED, DENIED, DENIED, {"status": "True"}]
    old = {"metadata": {"name": "old"}, "status": {"conditions": [dict(c) for c in legacy]}}
    new = {"metadata": {"name": "old"}, "status": {"conditions": [dict(c) for c in legacy]}}
    new["status"]["conditions"].append({"type": "Failed", "status": "True"})

    check_conditions(info, new, old)

    fresh = {"metadata": {"name": "new"}, "status": {"conditions": [APPROVED, DENIED]}}
    with pytest.raises(ApiError) as refused:
        check_conditions(info, fresh, {"metadata": {"name": "new"}})
    assert refused.value.code == 422
