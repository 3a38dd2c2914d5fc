"""The v2 form of CRD schemas (docs/simulator.md, "OpenAPI"): what v2 cannot express is left
untyped, the rest keeps its types, fields and required lists."""

from __future__ import annotations

from gpustack_sim.apiserver.kinds import KindRegistry, kinds_from_crd
from gpustack_sim.apiserver.openapiv2 import encode_document, openapi_v2_document, v2_schema
from gpustack_sim.apiserver.protobuf import _fields
from gpustack_sim.standins.crds import stand_in_crds


def test_untyped_parts_and_kept_structure() -> None:
    schema = {
        "type": "object",
        "required": ["a", "gone"],
        "properties": {
            "a": {"type": "string", "format": "date-time", "description": "A."},
            "b": {"type": "string", "nullable": True, "description": "B."},
            "c": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}]},
            "d": {"type": "array", "items": {"type": "integer"}},
            "e": {"type": "object", "additionalProperties": {"type": "string"}},
            "f": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    assert v2_schema(schema) == {
        "type": "object",
        "required": ["a"],
        "properties": {
            "a": {"type": "string", "format": "date-time", "description": "A."},
            "b": {"description": "B."},
            "c": {},
            "d": {"type": "array", "items": {"type": "integer"}},
            "e": {"type": "object", "additionalProperties": {"type": "string"}},
            "f": {},
        },
    }


def test_every_registered_kind_has_a_definition_with_its_gvk() -> None:
    registry = KindRegistry.with_builtins()
    for crd in stand_in_crds():
        registry.register_all(kinds_from_crd(crd))
    document = openapi_v2_document(registry)
    gvk = document["definitions"]["io.x-k8s.kueue.v1beta2.ClusterQueue"][
        "x-kubernetes-group-version-kind"
    ]
    assert gvk == [{"group": "kueue.x-k8s.io", "kind": "ClusterQueue", "version": "v1beta2"}]
    assert "io.k8s.api.core.v1.Node" in document["definitions"]
    fields = _fields(encode_document(document))
    assert [number for number, _, _ in fields] == [1, 2, 8, 9]
    assert fields[0][2] == b"2.0"
