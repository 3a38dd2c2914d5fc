"""The project's NFD CRDs: structural, and everything we render fits both them and NFD's own."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.domain.bootstrap import BootstrapSettings, render_cpu_info_rule
from gpustack_operator.domain.bootstrap.crds import render_nfd_crds
from gpustack_operator.domain.node.nodefeature import build_node_feature
from gpustack_sim.apiserver.kinds import KindInfo, kinds_from_crd
from gpustack_sim.apiserver.validation import find_unknown_fields, validate_object
from tests.conftest import shared_crds_dir

NS = "gpustack-system"


def kinds(crds: list[dict[str, Any]]) -> dict[str, KindInfo]:
    return {info.kind: info for crd in crds for info in kinds_from_crd(crd)}


def real_kinds() -> dict[str, KindInfo]:
    shared = shared_crds_dir()
    if shared is None:
        pytest.skip("real NFD CRDs not found at ../shared/crds (set GPUSTACK_SHARED_CRDS)")
    path = Path(shared) / "nfd-v0.19.0" / "nfd-api-crds.yaml"
    return kinds([d for d in yaml.safe_load_all(path.read_text()) if d])


def rendered_objects() -> list[dict[str, Any]]:
    """Every NFD object the project writes, plus what nfd-worker and a person would write."""
    settings = BootstrapSettings()
    node_feature = build_node_feature(
        "node-1",
        "uid-1",
        {"acceleratable.feature.gpustack.ai/nvidia": "true"},
        system_namespace=NS,
        suffix="-gpustack-device-manager",
        part_of="gpustack-operator-device-manager",
    )
    assert node_feature is not None
    nfd_worker_feature = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {"name": "node-1", "namespace": NS},
        "spec": {
            "features": {
                "flags": {"cpu.cpuid": {"elements": {"AVX2": {}}}},
                "attributes": {"cpu.model": {"elements": {"vendor_id": "AMD", "family": "25"}}},
                "instances": {
                    "pci.device": {
                        "elements": [{"attributes": {"class": "0302", "vendor": "10de"}}]
                    }
                },
            },
            "labels": {"feature.node.kubernetes.io/pci-10de.present": "true"},
        },
    }
    group = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeatureGroup",
        "metadata": {"name": "gpu-nodes", "namespace": NS},
        "spec": {
            "featureGroupRules": [
                {
                    "name": "nvidia",
                    "matchFeatures": [
                        {
                            "feature": "pci.device",
                            "matchExpressions": {"vendor": {"op": "In", "value": ["10de"]}},
                        }
                    ],
                }
            ]
        },
    }
    rule = render_cpu_info_rule(settings.pci_class_prefixes, settings.manufacturers)
    return [node_feature, nfd_worker_feature, group, rule]


def walk(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), Mapping):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def test_crds_are_structural_and_labelled() -> None:
    crds = render_nfd_crds()
    assert [c["metadata"]["name"] for c in crds] == [
        "nodefeatures.nfd.k8s-sigs.io",
        "nodefeaturerules.nfd.k8s-sigs.io",
        "nodefeaturegroups.nfd.k8s-sigs.io",
    ]
    for crd in crds:
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpustack-operator"
        for version in crd["spec"]["versions"]:
            for path, node in walk(version["schema"]["openAPIV3Schema"]):
                assert "type" in node, f"{crd['metadata']['name']}{path}: no type"


def test_scopes_and_names_match_nfd() -> None:
    ours, real = kinds(render_nfd_crds()), real_kinds()
    for kind in ("NodeFeature", "NodeFeatureRule", "NodeFeatureGroup"):
        mine, theirs = ours[kind], real[kind]
        assert (mine.group, mine.version, mine.plural, mine.namespaced) == (
            theirs.group,
            theirs.version,
            theirs.plural,
            theirs.namespaced,
        )
        assert mine.has_status == theirs.has_status


@pytest.mark.parametrize("which", ["ours", "nfd"])
def test_rendered_objects_validate_and_lose_nothing(which: str) -> None:
    schemas = kinds(render_nfd_crds()) if which == "ours" else real_kinds()
    for obj in rendered_objects():
        info = schemas[obj["kind"]]
        assert validate_object(info, obj) == [], (which, obj["kind"])
        assert find_unknown_fields(info, obj) == [], (which, obj["kind"])


def test_invalid_objects_are_rejected_by_our_schema() -> None:
    info = kinds(render_nfd_crds())["NodeFeatureRule"]
    bad_op = render_cpu_info_rule(("03",), BootstrapSettings().manufacturers)
    bad_op["spec"]["rules"][0]["matchFeatures"][0]["matchExpressions"]["vendor_id"]["op"] = "Is"
    assert validate_object(info, bad_op)
    no_name = render_cpu_info_rule(("03",), BootstrapSettings().manufacturers)
    del no_name["spec"]["rules"][0]["name"]
    assert validate_object(info, no_name)
    label_not_string = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {"name": "x", "namespace": NS},
        "spec": {"labels": {"a": 1}},
    }
    assert validate_object(kinds(render_nfd_crds())["NodeFeature"], label_not_string)
