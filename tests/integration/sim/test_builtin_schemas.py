"""Writes of built-in kinds checked against their published OpenAPI as kube-apiserver decodes
and validates them: wrong types (400), required fields (422), unknown fields by
``fieldValidation`` (docs/simulator.md, "Built-in kinds")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.sim.helpers import call, deployment

pytestmark = pytest.mark.anyio

PODS = "/api/v1/namespaces/default/pods"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
MERGE = "application/merge-patch+json"
APPLY = "application/apply-patch+yaml"


def pod(name: str, **container: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "x", **container}]}}  # fmt: skip


async def test_a_value_of_the_wrong_type_is_a_bad_request(kube) -> None:
    resp = await call(kube, "POST", DEPLOYMENTS, deployment("d", replicas="3"))
    assert resp.status_code == 400
    assert resp.json()["reason"] == "BadRequest"
    assert resp.json()["message"] == (
        'Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal '
        "string into Go struct field DeploymentSpec.spec.replicas of type int32"
    )
    port = await call(kube, "POST", PODS, pod("p", ports=[{"containerPort": 8.5}]))
    assert port.status_code == 400
    assert port.json()["message"].endswith(
        "json: cannot unmarshal number 8.5 into Go struct field "
        "ContainerPort.spec.containers.ports.containerPort of type int32"
    )
    listed = await call(kube, "POST", PODS, {**pod("q"), "spec": {"containers": "c"}})
    assert listed.json()["message"].endswith(
        "cannot unmarshal string into Go struct field PodSpec.spec.containers of type "
        "[]v1.Container"
    )


async def test_quantities_and_bytes_are_decoded_as_the_api_server_does(kube) -> None:
    bad = await call(kube, "POST", PODS, pod("p", resources={"limits": {"cpu": "1 core"}}))
    assert bad.status_code == 400
    assert bad.json()["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular '
        "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )
    limits = {"cpu": 2, "memory": "1Gi"}
    good = await call(kube, "POST", PODS, pod("q", resources={"limits": limits}))
    assert good.status_code == 201, good.text
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
              "data": {"token": "not base64!"}}  # fmt: skip
    refused = await call(kube, "POST", "/api/v1/namespaces/default/secrets", secret)
    assert refused.status_code == 400
    assert refused.json()["message"] == (
        'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3'
    )


async def test_missing_required_fields_are_invalid_with_every_cause(kube) -> None:
    resp = await call(kube, "POST", PODS, {**pod("p"), "spec": {"containers": [{"ports": []}]}})
    assert resp.status_code == 422
    body = resp.json()
    assert body["message"] == (
        'Pod "p" is invalid: [spec.containers[0].name: Required value, '
        "spec.containers[0].image: Required value]"
    )
    assert body["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value",
         "field": "spec.containers[0].name"},
        {"reason": "FieldValueRequired", "message": "Required value",
         "field": "spec.containers[0].image"},
    ]  # fmt: skip
    no_selector = deployment("d")
    del no_selector["spec"]["selector"]
    refused = await call(kube, "POST", DEPLOYMENTS, no_selector)
    assert refused.status_code == 422
    assert refused.json()["message"] == 'Deployment "d" is invalid: spec.selector: Required value'
    empty = await call(kube, "POST", PODS, {**pod("e"), "spec": {"containers": []}})
    assert empty.json()["message"] == 'Pod "e" is invalid: spec.containers: Required value'


async def test_unknown_fields_follow_field_validation(kube) -> None:
    typo = deployment("warned", replica=2)
    warned = await call(kube, "POST", DEPLOYMENTS, typo)
    assert warned.status_code == 201
    assert warned.headers.get_list("Warning") == ['299 - "unknown field \\"spec.replica\\""']
    assert "replica" not in warned.json()["spec"]

    strict = await call(
        kube,
        "POST",
        DEPLOYMENTS,
        deployment("strict", replica=2),
        params={"fieldValidation": "Strict"},
    )
    assert strict.status_code == 400
    assert strict.json()["message"] == 'strict decoding error: unknown field "spec.replica"'

    ignored = await call(
        kube,
        "POST",
        DEPLOYMENTS,
        deployment("quiet", replica=2),
        params={"fieldValidation": "Ignore"},
    )
    assert ignored.status_code == 201 and "Warning" not in ignored.headers
    assert "replica" not in ignored.json()["spec"]


async def test_patches_and_apply_are_checked_after_merging(kube) -> None:
    await call(kube, "POST", DEPLOYMENTS, deployment("d"))
    patched = await call(
        kube, "PATCH", f"{DEPLOYMENTS}/d", {"spec": {"paused": "yes"}}, content_type=MERGE
    )
    assert patched.status_code == 400
    assert "of type bool" in patched.json()["message"]
    unknown = await call(
        kube,
        "PATCH",
        f"{DEPLOYMENTS}/d",
        {"spec": {"template": {"spec": {"containers": [{"name": "main", "imag": "x"}]}}}},
        content_type=MERGE,
        params={"fieldValidation": "Strict"},
    )
    assert unknown.status_code == 400
    assert unknown.json()["message"] == (
        'strict decoding error: unknown field "spec.template.spec.containers[0].imag"'
    )
    applied = await call(
        kube,
        "PATCH",
        f"{DEPLOYMENTS}/d",
        raw=json.dumps({**deployment("d"), "spec": {"replicas": "two"}}),
        content_type=APPLY,
        params={"fieldManager": "me"},
    )
    assert applied.status_code == 400
    assert "DeploymentSpec.spec.replicas of type int32" in applied.json()["message"]


async def test_nulls_are_dropped_as_decoding_and_encoding_again_would(kube) -> None:
    created = await call(kube, "POST", PODS, pod("p", workingDir=None, args=None))
    assert created.status_code == 201, created.text
    container = created.json()["spec"]["containers"][0]
    assert "workingDir" not in container
    assert "args" not in container
    assert (container["name"], container["image"]) == ("c", "x")
