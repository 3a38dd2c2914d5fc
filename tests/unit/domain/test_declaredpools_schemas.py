"""The declared-pool dumps and the objects made for them meet the real CRDs.

Karpenter v1.9.1's NodePool rules call CEL ``find()`` (docs/simulator.md, "CEL rules"); the
Kueue v0.19.2 schemas judge the flavors, queues, AdmissionChecks and
ProvisioningRequestConfigs of the pools. Skips without ../shared/crds.
"""

from __future__ import annotations

import pytest
import yaml

from gpustack_operator.commands.plan import read_cluster_input
from gpustack_sim.apiserver.celrules import rule_causes
from gpustack_sim.apiserver.kinds import KindInfo, kinds_from_crd
from gpustack_sim.apiserver.validation import validate_object
from tests.conftest import REAL_CRDS_MISSING, shared_crds_dir
from tests.unit.domain.test_crd_schemas import validate
from tests.unit.domain.test_declaredpools import EXAMPLES, _state

CRDS = shared_crds_dir()
pytestmark = pytest.mark.skipif(CRDS is None, reason=REAL_CRDS_MISSING)


def _nodepool_kind() -> KindInfo:
    assert CRDS is not None
    crd = yaml.safe_load((CRDS / "karpenter-v1.9.1" / "karpenter.sh_nodepools.yaml").read_text())
    return next(k for k in kinds_from_crd(crd) if k.version == "v1")


def test_the_example_nodepools_pass_karpenters_schema_and_cel_rules() -> None:
    kind = _nodepool_kind()
    pools = read_cluster_input(EXAMPLES / "pools-at-zero.yaml").pools
    nodepools = [p for p in pools if p["kind"] == "NodePool"]
    assert len(nodepools) == 3
    for nodepool in nodepools:
        assert validate_object(kind, nodepool) == []
        assert rule_causes(kind, nodepool) == []


def test_karpenters_find_rule_refuses_a_karpenter_sh_label_of_its_own() -> None:
    kind = _nodepool_kind()
    nodepool = read_cluster_input(EXAMPLES / "pools-at-zero.yaml").pools[0]
    bad = {**nodepool, "spec": {**nodepool["spec"]}}
    bad["spec"]["template"] = {
        **nodepool["spec"]["template"],
        "metadata": {"labels": {"team.karpenter.sh/owner": "x"}},
    }
    causes = rule_causes(kind, bad)
    assert causes and "karpenter.sh" in str(causes)


@pytest.mark.parametrize("provisioning", [True, False])
def test_pool_objects_validate_against_kueue(provisioning: bool) -> None:
    state = _state(provisioning=provisioning)
    kinds = {o["kind"] for o in state.objects()}
    expected = {"ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue"}
    if provisioning:
        expected |= {"AdmissionCheck", "ProvisioningRequestConfig"}
    assert kinds == expected
    for obj in state.objects():
        if obj["kind"] == "AdmissionCheck":
            # Its parameters.kind pattern starts with RE2's (?i) after ^, which Python's re
            # (and so jsonschema) cannot compile: the simulator's validator and CEL rules judge it.
            kind = _kueue_kind("kueue.x-k8s.io_admissionchecks.yaml", obj["apiVersion"])
            assert validate_object(kind, obj) == []
            assert rule_causes(kind, obj) == []
            continue
        validate(obj)


def _kueue_kind(file: str, api_version: str) -> KindInfo:
    assert CRDS is not None
    crd = yaml.safe_load((CRDS / "kueue-v0.19.2" / file).read_text())
    return next(k for k in kinds_from_crd(crd) if f"{k.group}/{k.version}" == api_version)
