"""kubectl against the simulator with the real Kueue and NFD CRDs loaded."""

from __future__ import annotations

import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.e2e.conftest import Kubectl

pytestmark = pytest.mark.anyio

FLAVOR = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: t4}
spec:
  nodeLabels: {gpustack.ai/flavor: t4}
"""

CLUSTER_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: gpu-t4}
spec:
  cohortName: gpustack
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: t4
      resources:
      - {name: cpu, nominalQuota: 16}
      - {name: nvidia.com/gpu, nominalQuota: 1}
"""


async def test_api_resources_lists_crd_kinds(crd_kubectl: Kubectl) -> None:
    out = await crd_kubectl.out("api-resources", "--api-group=kueue.x-k8s.io", "--no-headers")
    names = {line.split()[0] for line in out.splitlines()}
    assert {"clusterqueues", "resourceflavors", "localqueues", "cohorts"} <= names
    nfd = await crd_kubectl.out("api-resources", "--api-group=nfd.k8s-sigs.io", "--no-headers")
    assert "nodefeatures" in nfd


async def test_apply_flavor_and_cluster_queue(crd_kubectl: Kubectl, crd_sim: SimServer) -> None:
    assert "No resources found" in (await crd_kubectl("get", "clusterqueues")).stderr.decode()

    out = await crd_kubectl.out("apply", "-f", "-", stdin=FLAVOR)
    assert "resourceflavor.kueue.x-k8s.io/t4 created" in out
    out = await crd_kubectl.out("apply", "-f", "-", stdin=CLUSTER_QUEUE)
    assert "clusterqueue.kueue.x-k8s.io/gpu-t4 created" in out

    stored = crd_sim.store.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "gpu-t4")
    assert stored is not None
    assert stored["spec"]["queueingStrategy"] == "BestEffortFIFO"  # schema default applied

    table = await crd_kubectl.out("get", "clusterqueues")
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "COHORT", "PENDING", "WORKLOADS"]
    assert row.split()[:2] == ["gpu-t4", "gpustack"]

    out = await crd_kubectl.out(
        "apply", "-f", "-", stdin=CLUSTER_QUEUE.replace("nominalQuota: 16", "nominalQuota: 32")
    )
    assert "clusterqueue.kueue.x-k8s.io/gpu-t4 configured" in out
    stored = crd_sim.store.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "gpu-t4")
    assert stored is not None
    assert stored["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 32

    await crd_kubectl.out("label", "clusterqueue", "gpu-t4", "gpustack.ai/managed=true")
    stored = crd_sim.store.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "gpu-t4")
    assert stored is not None and stored["metadata"]["labels"] == {"gpustack.ai/managed": "true"}


async def test_invalid_cluster_queue_is_rejected_with_reasons(crd_kubectl: Kubectl) -> None:
    bad = CLUSTER_QUEUE.replace("cohortName: gpustack", "queueingStrategy: Random")
    result = await crd_kubectl("apply", "-f", "-", stdin=bad, check=False)
    assert result.returncode != 0
    err = result.stderr.decode()
    assert "is invalid" in err
    assert 'spec.queueingStrategy: Unsupported value: "Random"' in err


async def test_unknown_fields_are_refused_under_strict_validation(crd_kubectl: Kubectl) -> None:
    bad = FLAVOR + "  bogusField: 1\n"
    result = await crd_kubectl("apply", "-f", "-", stdin=bad, check=False)
    assert result.returncode != 0
    assert 'unknown field "spec.bogusField"' in result.stderr.decode()


async def test_client_side_then_server_side_apply_hands_the_fields_over(
    crd_kubectl: Kubectl, crd_sim: SimServer
) -> None:
    await crd_kubectl.out("apply", "-f", "-", stdin=FLAVOR)
    await crd_kubectl.out("apply", "-f", "-", stdin=CLUSTER_QUEUE)
    changed = CLUSTER_QUEUE.replace("nominalQuota: 16", "nominalQuota: 32")
    out = await crd_kubectl.out("apply", "--server-side", "-f", "-", stdin=changed)
    assert "clusterqueue.kueue.x-k8s.io/gpu-t4 serverside-applied" in out

    stored = crd_sim.store.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "gpu-t4")
    assert stored is not None
    quotas = stored["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert quotas[0] == {"name": "cpu", "nominalQuota": 32}
    managers = {e["manager"]: e for e in stored["metadata"]["managedFields"]}
    assert "f:resourceGroups" in managers["kubectl"]["fieldsV1"]["f:spec"]
