"""The manager's MultiKueue objects meet Kueue v0.19.2's real CRDs, at both served versions:
their OpenAPI schemas and CEL rules (the simulator's validator and CEL evaluator, as the
declared-pool objects are judged). Skips without ../shared/crds."""

from __future__ import annotations

from functools import cache

import pytest
import yaml

from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.multikueue import MultiKueuePolicy, manager_objects
from gpustack_sim.apiserver.celrules import rule_causes
from gpustack_sim.apiserver.kinds import KindInfo, kinds_from_crd
from gpustack_sim.apiserver.validation import prune_unknown_fields, validate_object
from tests.conftest import REAL_CRDS_MISSING, shared_crds_dir
from tests.unit.domain.test_multikueue import two_members

CRDS = shared_crds_dir()
pytestmark = pytest.mark.skipif(CRDS is None, reason=REAL_CRDS_MISSING)


@cache
def kueue_kind(kind: str, version: str) -> KindInfo:
    assert CRDS is not None
    crd = yaml.safe_load(
        (CRDS / "kueue-v0.19.2" / f"kueue.x-k8s.io_{kind.lower()}s.yaml").read_text()
    )
    return next(k for k in kinds_from_crd(crd) if k.version == version)


@pytest.mark.parametrize("version", list(KueueVersion))
def test_manager_objects_validate_against_kueue(version: KueueVersion) -> None:
    objects = manager_objects(two_members(), MultiKueuePolicy(kueue_version=version))
    kinds = {o["kind"] for o in objects}
    assert kinds == {
        "Secret",
        "MultiKueueCluster",
        "MultiKueueConfig",
        "AdmissionCheck",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
    }
    for obj in objects:
        if obj["kind"] == "Secret":
            continue
        assert obj["apiVersion"] == version.api_version
        kind = kueue_kind(obj["kind"], version.value)
        assert validate_object(kind, obj) == [], obj
        assert rule_causes(kind, obj) == [], obj
        assert prune_unknown_fields(kind, obj) == obj, "a field the schema does not declare"


def test_the_schemas_would_catch_a_wrong_shape() -> None:
    """The check is not vacuous: v1beta1's spec.kubeConfig is unknown to v1beta2, and a
    MultiKueueCluster with neither source breaks its CEL rule."""
    objects = manager_objects(two_members(), MultiKueuePolicy(kueue_version=KueueVersion.V1BETA1))
    cluster = next(o for o in objects if o["kind"] == "MultiKueueCluster")
    assert "kubeConfig" in cluster["spec"]
    v1beta2 = kueue_kind("MultiKueueCluster", "v1beta2")
    wrong = {**cluster, "apiVersion": "kueue.x-k8s.io/v1beta2", "spec": {"clusterSource": {}}}
    assert rule_causes(v1beta2, wrong) != []
    assert prune_unknown_fields(v1beta2, {**cluster, "apiVersion": wrong["apiVersion"]}) != {
        **cluster,
        "apiVersion": wrong["apiVersion"],
    }
    config = next(o for o in objects if o["kind"] == "MultiKueueConfig")
    too_many = {**config, "spec": {"clusters": [f"c{i}" for i in range(21)]}}
    assert validate_object(kueue_kind("MultiKueueConfig", "v1beta1"), too_many) != []
