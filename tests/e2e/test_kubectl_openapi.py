"""kubectl validates, applies and explains against the simulator as against a real cluster:
``/openapi/v2`` (client-side validation) and ``/openapi/v3`` (explain, field validation)
carry every served kind (docs/simulator.md, "OpenAPI")."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.crds import stand_in_crds
from tests.e2e.conftest import Kubectl, started_sim

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


def _listed(*items: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)})


def _cluster_queue(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture
async def stand_in_kubectl(kubectl_bin: Path, tmp_path: Path) -> AsyncIterator[Kubectl]:
    sim: SimServer = await started_sim(stand_in_crds())
    try:
        config = sim.write_kubeconfig(tmp_path / "kubeconfig.yaml", context="sim")
        yield Kubectl(kubectl_bin, config, tmp_path / "kube-cache")
    finally:
        await sim.stop()


async def test_apply_validates_the_example_cluster_without_flags(
    stand_in_kubectl: Kubectl,
) -> None:
    out = await stand_in_kubectl.out("apply", "-f", str(REPO / "examples" / "cluster.yaml"))
    assert "node/cpu-epyc-1 created" in out


async def test_client_side_validation_refuses_an_unknown_top_level_field(
    stand_in_kubectl: Kubectl,
) -> None:
    """A ``kind: List`` is validated on the client, from /openapi/v2."""
    bad = _cluster_queue("typo", {})
    bad["sepc"] = bad.pop("spec")
    result = await stand_in_kubectl("apply", "-f", "-", stdin=_listed(bad), check=False)
    assert result.returncode != 0
    assert 'unknown field "sepc"' in result.stderr.decode()
    good = _cluster_queue("fine", {"cohortName": "c"})
    assert "created" in await stand_in_kubectl.out("apply", "-f", "-", stdin=_listed(good))


async def test_explain_and_columns_of_the_stand_in_queues(stand_in_kubectl: Kubectl) -> None:
    explained = await stand_in_kubectl.out("explain", "clusterqueue.spec")
    assert "FIELD: spec <Object>" in explained
    assert "desired state of a ClusterQueue" in explained
    await stand_in_kubectl.out(
        "apply", "-f", "-", stdin=json.dumps(_cluster_queue("cq-a", {"cohortName": "team"}))
    )
    header, row = (await stand_in_kubectl.out("get", "clusterqueues")).splitlines()[:2]
    assert header.split()[:4] == ["NAME", "COHORT", "PENDING", "WORKLOADS"]
    assert row.split()[:2] == ["cq-a", "team"]
    wide = (await stand_in_kubectl.out("get", "clusterqueues", "-o", "wide")).splitlines()[0]
    assert "STRATEGY" in wide and "ADMITTED WORKLOADS" in wide
    lq_header = (await stand_in_kubectl.out("get", "localqueues", "-A")).splitlines()
    assert not lq_header or "CLUSTERQUEUE" in lq_header[0]


async def test_real_crds_validate_nested_fields_on_the_client(crd_kubectl: Kubectl) -> None:
    explained = await crd_kubectl.out("explain", "clusterqueue.spec.resourceGroups")
    assert "coveredResources" in explained
    bad = _cluster_queue("nested", {"cohortName": "c", "nope": 1})
    result = await crd_kubectl("apply", "-f", "-", stdin=_listed(bad), check=False)
    assert result.returncode != 0
    assert 'ValidationError(ClusterQueue.spec): unknown field "nope"' in result.stderr.decode()
    good = _cluster_queue("nested", {"cohortName": "c"})
    assert "created" in await crd_kubectl.out("apply", "-f", "-", stdin=_listed(good))
