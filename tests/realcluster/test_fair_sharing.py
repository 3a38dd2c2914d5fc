"""Fair sharing on real Kueue (docs/teams.md, "Fair sharing"; docs/realcluster.md).

Kueue's configuration turns fair sharing on. Three teams share the example's H100 pool of 8
cards: alpha 50% (4 cards), beta and gamma 25% (2 each). The team ClusterQueues carry their
shares as ``spec.fairSharing.weight``. beta borrows one card, then alpha borrows one; when
gamma submits within its share, Kueue preempts beta's Workload, not alpha's: both borrow one
card, and beta borrowed more for its weight (a reclaim: gamma stays within its nominal
quota). With a weight of 1 for every team the two shares tie and Kueue takes the most
recently admitted, alpha's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal

from gpustack_operator.domain.node.simdevices import SIM_DEVICES_ANNOTATION
from tests.realcluster.cluster import (
    SYSTEM_NAMESPACE,
    Operator,
    condition,
    device_job,
    get_all,
    is_admitted,
    load_nodes,
    wait_converged,
    workload_of,
    workloads,
)
from tests.realcluster.conftest import register
from tests.realcluster.controlplane import (
    DEFAULT_KUEUE_CONFIGURATION,
    REPO,
    ControlPlane,
    wait_until,
)
from tests.realcluster.nodes import NodeAgents

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]

EXAMPLE = REPO / "examples" / "cluster.yaml"
POOL_NODE = "gpu-no-cpu-info"
TEAMS = """\
teams:
  - name: alpha
    namespaces: [alpha]
    shares:
      - pools: {manufacturer: nvidia}
        share: 50%
  - name: beta
    namespaces: [beta]
    shares:
      - pools: {manufacturer: nvidia}
        share: 25%
  - name: gamma
    namespaces: [gamma]
    shares:
      - pools: {manufacturer: nvidia}
        share: 25%
"""
FAIR_SHARING = {
    **DEFAULT_KUEUE_CONFIGURATION,
    "fairSharing": {
        "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    },
}


@pytest.fixture(scope="module")
def fair_cluster(
    plane: ControlPlane,
    operator: Operator,
    agents: NodeAgents,
    portal: BlockingPortal,
    tmp_path_factory: pytest.TempPathFactory,
) -> Operator:
    plane.start_kueue(FAIR_SHARING)
    nodes = [n for n in load_nodes(EXAMPLE) if n["metadata"]["name"] == POOL_NODE]
    plane.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            for ns in ("alpha", "beta", "gamma")
        ]
    )
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "gpustack-teams", "namespace": SYSTEM_NAMESPACE},
                "data": {"teams.yaml": TEAMS},
            }
        ]
    )
    register(portal, agents, nodes)
    operator.start_device_managers(
        n["metadata"]["name"]
        for n in nodes
        if SIM_DEVICES_ANNOTATION in (n["metadata"].get("annotations") or {})
    )
    operator.start_worker()
    teams_file = tmp_path_factory.mktemp("teams") / "teams.yaml"
    teams_file.write_text(TEAMS)
    wait_converged(plane, operator, f"--teams={teams_file}")
    return operator


def _local_queue(plane: ControlPlane, namespace: str) -> tuple[str, dict[str, Any]]:
    """(LocalQueue, ClusterQueue) of the H100 pool in *namespace* (its only pool)."""
    for local in get_all(plane, "localqueues.kueue.x-k8s.io", namespaced=True):
        if local["metadata"]["namespace"] == namespace:
            name = local["spec"]["clusterQueue"]
            queue = json.loads(plane.kubectl_run("get", "clusterqueue", name, "-o", "json"))
            return local["metadata"]["name"], queue
    raise AssertionError(f"no LocalQueue in {namespace}")


def _submit(plane: ControlPlane, namespace: str, count: int) -> list[str]:
    local, _ = _local_queue(plane, namespace)
    names = [f"{namespace}-{i}" for i in range(count)]
    for name in names:
        plane.kubectl_run("apply", "-f", "-", stdin=json.dumps(device_job(name, namespace, local)))
    wait_until(
        lambda: all(is_admitted(workload_of(plane, n, namespace)) for n in names),
        timeout=120,
        what=f"{namespace}'s {count} Jobs admitted",
    )
    return names


def test_team_queues_carry_their_shares_and_kueue_preempts_by_them(
    plane: ControlPlane, fair_cluster: Operator
) -> None:
    _submit(plane, "beta", 3)  # 2 of its own, 1 borrowed
    _submit(plane, "alpha", 5)  # 4 of its own, 1 borrowed: all 8 cards in use
    _submit(plane, "gamma", 1)  # within its share: someone's borrowed card comes back

    def preempted() -> list[dict[str, Any]]:
        return [
            w
            for w in workloads(plane)
            if (c := condition(w, "Preempted")) is not None and c["status"] == "True"
        ]

    wait_until(lambda: bool(preempted()), timeout=60, what="a Workload preempted for gamma's")
    (victim,) = preempted()
    assert victim["metadata"]["namespace"] == "beta", victim["metadata"]
    reason = condition(victim, "Preempted")
    # gamma stays within its nominal quota: Kueue's FairSharingPreemptWithinNominal (on by
    # default) preempts the target the shares chose as a reclaim (docs/teams.md).
    assert reason is not None and reason["reason"] == "InCohortReclamation", reason
    weights = {
        ns: _local_queue(plane, ns)[1]["spec"].get("fairSharing", {}).get("weight")
        for ns in ("alpha", "beta", "gamma")
    }
    assert weights == {"alpha": "500m", "beta": "250m", "gamma": "250m"}
