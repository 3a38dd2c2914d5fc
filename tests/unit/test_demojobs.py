"""Which Jobs ``sim --demo-jobs`` submits for a chain (docs/simulator.md, "Demo jobs")."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gpustack_operator.commands.plan import read_cluster_file
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_sim.demojobs import DemoJob, outcome, pick_demo_jobs

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"


def jobs_for(names: Iterable[str]) -> dict[str, DemoJob]:
    """The demo Jobs for the chain of examples/cluster.yaml's Nodes *names*."""
    nodes, _, _ = read_cluster_file(EXAMPLE)
    wanted = set(names)
    chosen = [n for n in nodes if n["metadata"]["name"] in wanted]
    state = plan_state(chosen, ["default"], ChainPolicy(manufacturers=load_manufacturers()))
    return {j.name: j for j in pick_demo_jobs(state.cluster_queues, state.local_queues)}


def test_t4_nodes_get_one_unit_a_card_too_many_and_a_card_in_the_cpu_pool() -> None:
    jobs = jobs_for(["gpu-t4-1", "gpu-t4-2"])
    fits, too_big, wrong = jobs["demo-fits"], jobs["demo-too-big"], jobs["demo-wrong-queue"]
    # The T4 pool's unit is 4 CPU + 16Gi per card; the two nodes hold 4 cards.
    assert fits.requests == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    assert too_big.requests == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "5"}
    assert too_big.queue == fits.queue and fits.namespace == "default"
    assert wrong.queue != fits.queue
    assert wrong.requests["nvidia.com/gpu"] == "1"


def test_no_whole_card_pool_no_jobs() -> None:
    assert jobs_for(["cpu-epyc-1"]) == {}
    assert jobs_for(["gpu-a10g-sliced"]) == {}  # sliced cards only


def test_the_outcome_waits_for_kueue_and_for_the_job_to_start() -> None:
    pending = {
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "no room",
                }
            ]
        }
    }
    assert outcome(None, None) is None
    assert outcome({"status": {}}, None) is None
    assert outcome(pending, None) == "waiting: no room"
    admitted = {
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [{"name": "main", "flavors": {"cpu": "f"}}],
            },
        }
    }
    assert outcome(admitted, {"spec": {"suspend": True}}) is None  # not unsuspended yet
    started = {"spec": {"suspend": False, "template": {"spec": {"nodeSelector": {"a": "1"}}}}}
    assert outcome(admitted, started) == (
        "admitted to ClusterQueue cq, flavor f, pinned to nodeSelector a=1"
    )
