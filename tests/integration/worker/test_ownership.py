"""Kueue objects a person made under a name the worker wants are left alone (docs/worker.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack_operator.domain.plan.desired import desired_state
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    KUEUE,
    MANAGED_BY,
    eventually,
    fast_config,
    kueue_objects,
    nfd_master,
    node,
    put_node,
    worker_running,
)

pytestmark = [
    pytest.mark.anyio,
]


def names(sim: SimServer, kind: str) -> set[str]:
    return {o["metadata"]["name"] for o in kueue_objects(sim, kind)}


async def test_objects_a_person_made_are_never_touched(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    config = fast_config()
    small, big = node("small", cpu="16"), node("big", cpu="32", memory="128Gi")
    # The names the worker will want, computed offline from the same nodes.
    plan = desired_state([small, big], ["default"], config.policy)
    (queue,) = plan.cluster_queues
    (cohort,) = plan.cohorts
    flavors = sorted(f["metadata"]["name"] for f in plan.resource_flavors)
    taken_flavor = next(f for f in flavors if "-32c-" in f)
    own_flavor = next(f for f in flavors if f != taken_flavor)
    sim.store.create(
        {"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": cohort["metadata"]["name"]}}
    )
    sim.store.create(
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": taken_flavor, "labels": {"team": "mine"}},
            "spec": {"nodeLabels": {"team": "mine"}},
        }
    )
    persons = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
        for kind in ("Cohort", "ResourceFlavor")
        for o in kueue_objects(sim, kind, managed=False)
    }
    # Managed LocalQueues left from an earlier configuration: one in a namespace that is now
    # excluded, one whose ClusterQueue is gone. The worker removes both.
    for namespace, target in (("kube-system", queue["metadata"]["name"]), ("default", "gone")):
        sim.store.create(
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {
                    "name": f"stale-{namespace}",
                    "namespace": namespace,
                    "labels": {MANAGED_BY: "gpustack-operator"},
                },
                "spec": {"clusterQueue": target},
            }
        )
    put_node(sim, small)
    put_node(sim, big)

    async with nfd_master(sim), worker_running(sim_kubeconfig, config):
        queue_name = queue["metadata"]["name"]
        await eventually(lambda: queue_name in names(sim, "ClusterQueue"), "the ClusterQueue")
        await eventually(lambda: names(sim, "ResourceFlavor") == {own_flavor}, "our flavor")
        cq = sim.store.get(KUEUE, "ClusterQueue", queue_name)
        assert cq is not None
        # Only our flavor is in the queue, and a person's Cohort is not made its owner.
        assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == [own_flavor]
        assert cq["spec"]["cohortName"] == cohort["metadata"]["name"]
        assert not cq["metadata"].get("ownerReferences")
        (local_queue,) = plan.local_queues
        await eventually(
            lambda: names(sim, "LocalQueue") == {local_queue["metadata"]["name"]},
            "stale LocalQueues deleted, ours created",
        )
        await eventually(
            lambda: any(
                e.get("reason") == "NotManaged" for e in sim.store.list("v1", "Event", "default")
            ),
            "a NotManaged Warning event",
        )

        # The nodes go: our objects go, the person's stay as they were.
        sim.store.delete("v1", "Node", "small")
        sim.store.delete("v1", "Node", "big")
        await eventually(
            lambda: not names(sim, "ResourceFlavor") and not names(sim, "ClusterQueue"),
            "our flavor and queue to be deleted",
        )

    after = {
        (o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
        for kind in ("Cohort", "ResourceFlavor")
        for o in kueue_objects(sim, kind, managed=False)
    }
    assert after == persons
    assert all(
        MANAGED_BY not in o["metadata"].get("labels", {}) for o in sim.store.list(KUEUE, "Cohort")
    )
