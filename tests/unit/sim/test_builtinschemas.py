"""The published-OpenAPI checks of built-in kinds, without a server (docs/simulator.md,
"Built-in kinds")."""

from __future__ import annotations

import copy
import importlib.util
from typing import Any

import pytest

from gpustack_sim.apiserver import builtinschemas
from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.kinds import KindInfo, KindRegistry

REGISTRY = KindRegistry.with_builtins()


def kind(api_version: str, name: str) -> KindInfo:
    found = REGISTRY.by_kind(api_version, name)
    assert found is not None
    return found


POD = kind("v1", "Pod")


def pod_with(**container: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x", **container}]}}  # fmt: skip


def decode_error(info: KindInfo, obj: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as caught:
        builtinschemas.check(info, obj, prune=False)
    assert caught.value.status["code"] == 400
    return str(caught.value.status["message"]).partition(f"as a {info.kind}: ")[2]


def test_every_served_built_in_kind_has_its_schema() -> None:
    assert all(builtinschemas.has_schema(info) for info in REGISTRY)
    custom = KindInfo("example.com", "v1", "Pod", "pods", "pod", True, schema={"type": "object"})
    assert not builtinschemas.has_schema(custom)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("1.5Gi", None),
        ("100m", None),
        ("1e3", None),
        (" 2 ", None),
        ("1 core", "quantities must match the regular expression"),
        ("", "quantities must match the regular expression"),
        ("1.2.3", "unable to parse numeric part of quantity"),
        ("5kk", "unable to parse quantity's suffix"),
        (True, "quantities must match the regular expression"),
    ],
)
def test_quantities(text: Any, error: str | None) -> None:
    obj = pod_with(resources={"requests": {"cpu": text}})
    if error is None:
        builtinschemas.check(POD, obj, prune=False)
    else:
        assert decode_error(POD, obj).startswith(error)


@pytest.mark.parametrize(
    ("value", "offset"), [("aGVsbG8=", None), ("aGVs\nbG8=", None), ("ab$d", 2), ("abcde", 4)]
)
def test_base64_bytes(value: str, offset: int | None) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": value}}
    if offset is None:
        builtinschemas.check(kind("v1", "Secret"), secret, prune=False)
    else:
        assert decode_error(kind("v1", "Secret"), secret) == (
            f"illegal base64 data at input byte {offset}"
        )


def test_integers_by_their_format() -> None:
    port = decode_error(POD, pod_with(ports=[{"containerPort": 2**31}]))
    assert port.startswith("json: cannot unmarshal number 2147483648 into Go struct field")
    assert port.endswith("of type int32")
    flag = decode_error(POD, pod_with(tty=1))
    assert flag == (
        "json: cannot unmarshal number into Go struct field Container.spec.containers.tty of "
        "type bool"
    )
    target = decode_error(
        kind("v1", "Service"),
        {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80, "targetPort": True}]}},
    )
    assert target.endswith("ServicePort.spec.ports.targetPort of type int32")
    builtinschemas.check(
        kind("v1", "Service"),
        {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80, "targetPort": "http"}]}},
        prune=False,
    )


def test_unknown_fields_nested_in_lists_and_pruning() -> None:
    obj = pod_with(imagePullPolicy="Always", colour="red", env=[{"name": "A", "vlue": "1"}])
    obj["spec"]["nodeName"] = None
    before = copy.deepcopy(obj)
    found = builtinschemas.check(POD, obj, prune=False)
    assert found.unknown == ["spec.containers[0].colour", "spec.containers[0].env[0].vlue"]
    assert obj == before  # no pruning asked for
    builtinschemas.check(POD, obj, prune=True)
    container = obj["spec"]["containers"][0]
    assert container == {"name": "c", "image": "x", "imagePullPolicy": "Always",
                         "env": [{"name": "A"}]}  # fmt: skip
    assert "nodeName" not in obj["spec"]


def test_free_form_and_recursive_types() -> None:
    """A CRD's schema (JSONSchemaProps refers to itself) and managedFields' fieldsV1 (any
    JSON) are walked without complaint."""
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "things.example.com",
            "managedFields": [
                {"manager": "m", "operation": "Apply", "fieldsV1": {"f:spec": {"f:group": {}}}}
            ],
        },
        "spec": {
            "group": "example.com",
            "names": {"plural": "things", "kind": "Thing"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "default": 1}},
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    found = builtinschemas.check(kind("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
                                 crd, prune=False)  # fmt: skip
    assert found.unknown == [] and found.missing == []


def test_required_fields_are_those_of_the_schema() -> None:
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "b"}, "subjects": [{"name": "jane"}]}  # fmt: skip
    found = builtinschemas.check(kind("rbac.authorization.k8s.io/v1", "RoleBinding"), binding,
                                 prune=False)  # fmt: skip
    assert found.missing == ["subjects[0].kind", "roleRef"]


def test_the_schemas_come_from_the_served_release() -> None:
    assert builtinschemas.SCHEMA_RELEASE == "v1.34.0"
    assert importlib.util.find_spec("kubernetes_validate") is not None


def test_required_fields_of_a_status_are_not_insisted_on() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
            "status": {"nodeInfo": {"kubeletVersion": "v1.34.0"}}}  # fmt: skip
    assert builtinschemas.check(kind("v1", "Node"), node, prune=False).missing == []
