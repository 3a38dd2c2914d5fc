"""The sim's Kueue stand-in over HTTP with hand-made Kueue objects shaped like the worker's
(docs/simulator.md, "Kueue admission stand-in"): credits transformations, cohort borrowing
under a sliced queue's borrowingLimit 0, a MIG pool, and the namespaceSelector."""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx
import pytest

from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.crds import stand_in_crds
from gpustack_sim.standins.kueue import KueueStandIn

pytestmark = pytest.mark.anyio

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
CREDITS = "credits.gpustack.ai/nvidia"
MIG = "nvidia.com/mig-1g.10gb"
CONFIG = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "resources": {
        "transformations": [
            {"input": "nvidia.com/gpu", "strategy": "Replace", "outputs": {CREDITS: "1"}}
        ]
    },
}


def cluster_queue(
    name: str, flavor: str, device: str, cards: int, *, cohort: str | None, sliced: bool = False
) -> dict[str, Any]:
    """A ClusterQueue like the worker's: one flavor; a sliced one may not borrow."""
    limit = {"borrowingLimit": "0"} if sliced else {}
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "MayStopSearch"},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", device],
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {"name": "cpu", "nominalQuota": "16", **limit},
                            {"name": device, "nominalQuota": str(cards), **limit},
                        ],
                    }
                ],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def job(
    name: str, queue: str, resource: str, count: int, namespace: str = "default"
) -> dict[str, Any]:
    requests = {"cpu": "1", resource: str(count)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": queue},
        },
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": requests}}
                    ],
                }
            }
        },
    }


async def reserved(
    http: httpx.AsyncClient, namespace: str, job_name: str, admitted: bool
) -> dict[str, Any]:
    """The QuotaReserved condition of the Job's Workload once it says *admitted*, polled."""
    deadline = time.monotonic() + 20
    while True:
        items = (await http.get(f"{KUEUE}/namespaces/{namespace}/workloads")).json()["items"]
        for wl in items:
            if wl["metadata"]["ownerReferences"][0]["name"] != job_name:
                continue
            for cond in (wl.get("status") or {}).get("conditions") or []:
                if cond["type"] == "QuotaReserved" and (cond["status"] == "True") == admitted:
                    return {**cond, "admission": wl["status"].get("admission")}
        assert time.monotonic() < deadline, f"{job_name}: {items}"
        await anyio.sleep(0.05)


async def test_borrowing_transformations_mig_and_namespace_selector(sim: SimServer) -> None:
    if sim.registry.by_kind("kueue.x-k8s.io/v1beta2", "ClusterQueue") is None:
        sim.load_crds(stand_in_crds())
    store = sim.store
    for flavor in ("shared", "mig"):
        store.create(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": {"nodeLabels": {"pool": flavor}},
            }
        )
    store.create(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "c"}}
    )
    store.create(cluster_queue("sliced", "shared", CREDITS, 2, cohort="c", sliced=True))
    store.create(cluster_queue("whole", "shared", CREDITS, 4, cohort="c"))
    mig = cluster_queue("mig", "mig", MIG, 7, cohort=None)
    mig["spec"]["namespaceSelector"] = {"matchLabels": {"team": "a"}}
    store.create(mig)
    for name in ("sliced", "whole", "mig"):
        store.create(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"clusterQueue": name},
            }
        )
    async with KueueStandIn(sim, CONFIG), httpx.AsyncClient(base_url=sim.url, timeout=10) as http:
        jobs = "/apis/batch/v1/namespaces/default/jobs"
        # A sliced queue may not borrow: 3 cards never fit its 2.
        (
            await http.post(jobs, json=job("sliced-3", "sliced", "nvidia.com/gpu", 3))
        ).raise_for_status()
        cond = await reserved(http, "default", "sliced-3", admitted=False)
        assert f"insufficient quota for {CREDITS} in flavor shared" in cond["message"]
        assert "> maximum capacity (2)" in cond["message"]
        # The other queue borrows the sliced queue's idle cards (nvidia.com/gpu -> credits).
        (
            await http.post(jobs, json=job("whole-5", "whole", "nvidia.com/gpu", 5))
        ).raise_for_status()
        cond = await reserved(http, "default", "whole-5", admitted=True)
        assert cond["admission"]["podSetAssignments"][0]["resourceUsage"][CREDITS] == "5"
        status = (await http.get(f"{KUEUE}/clusterqueues/whole")).json()["status"]
        usage = status["flavorsReservation"][0]["resources"][1]
        assert usage == {"name": CREDITS, "total": "5", "borrowed": "1"}
        local = (await http.get(f"{KUEUE}/namespaces/default/localqueues/whole")).json()
        assert local["status"]["admittedWorkloads"] == 1
        assert local["status"]["flavorsReservation"][0]["resources"][1] == {
            "name": CREDITS,
            "total": "5",
        }
        # ... so now 2 cards in the sliced queue must wait for the one lent.
        (
            await http.post(jobs, json=job("sliced-2", "sliced", "nvidia.com/gpu", 2))
        ).raise_for_status()
        cond = await reserved(http, "default", "sliced-2", admitted=False)
        assert (
            f"insufficient unused quota for {CREDITS} in flavor shared, 1 more needed"
            in cond["message"]
        )

        # A MIG pool admits MIG requests, once the namespace matches its selector.
        (await http.post(jobs, json=job("mig-2", "mig", MIG, 2))).raise_for_status()
        cond = await reserved(http, "default", "mig-2", admitted=False)
        assert cond["message"] == "workload namespace doesn't match ClusterQueue selector"
        namespace = (await http.get("/api/v1/namespaces/default")).json()
        namespace["metadata"].setdefault("labels", {})["team"] = "a"
        (await http.put("/api/v1/namespaces/default", json=namespace)).raise_for_status()
        cond = await reserved(http, "default", "mig-2", admitted=True)
        assert cond["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": "mig", MIG: "mig"}
        started = (await http.get(f"{jobs}/mig-2")).json()
        assert started["spec"]["suspend"] is False
        assert started["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "mig"}


def _tas_objects(flavor: str, topology: str | None, cards: int) -> list[dict[str, Any]]:
    """A flavor (a TAS one when *topology* is given, with levels block and hostname), its
    ClusterQueue with *cards* GPUs and a LocalQueue of the same name in ``default``."""
    objects: list[dict[str, Any]] = []
    if topology:
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Topology",
                "metadata": {"name": topology},
                "spec": {
                    "levels": [{"nodeLabel": "block"}, {"nodeLabel": "kubernetes.io/hostname"}]
                },
            }
        )
    flavor_spec: dict[str, Any] = {"nodeLabels": {"pool": flavor}}
    if topology:
        flavor_spec["topologyName"] = topology
    objects += [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": flavor_spec,
        },
        cluster_queue(flavor, flavor, "nvidia.com/gpu", cards, cohort=None),
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": flavor, "namespace": "default"},
            "spec": {"clusterQueue": flavor},
        },
    ]
    return objects


def _tas_job(name: str, queue: str, cards: int, level: str) -> dict[str, Any]:
    manifest = job(name, queue, "nvidia.com/gpu", cards)
    template = manifest["spec"]["template"]
    template["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": level}}
    return manifest


async def _held(sim: SimServer, manifest: dict[str, Any]) -> dict[str, Any]:
    """The QuotaReserved condition of *manifest*'s Workload once it waits, with the flavors
    of :func:`_tas_objects` (a plain one with 4 cards, a TAS one with 1) in place."""
    if sim.registry.by_kind("kueue.x-k8s.io/v1beta2", "ClusterQueue") is None:
        sim.load_crds(stand_in_crds())
    for obj in [*_tas_objects("plain", None, 4), *_tas_objects("tas", "default-topology", 1)]:
        sim.store.create(obj)
    async with KueueStandIn(sim), httpx.AsyncClient(base_url=sim.url, timeout=10) as http:
        jobs = "/apis/batch/v1/namespaces/default/jobs"
        (await http.post(jobs, json=manifest)).raise_for_status()
        return await reserved(http, "default", manifest["metadata"]["name"], admitted=False)


async def test_a_job_requiring_a_topology_waits_in_a_queue_without_tas(sim: SimServer) -> None:
    """Kueue v0.19.2 refuses a flavor without ``topologyName`` to a pod set that requires a
    topology (tas_flavorassigner.go, checkPodSetAndFlavorMatchForTAS)."""
    cond = await _held(sim, _tas_job("no-tas", "plain", 1, "block"))
    assert cond["reason"] == "Pending"
    assert cond["message"] == (
        "couldn't assign flavors to pod set main: "
        'Flavor "plain" does not support TopologyAwareScheduling'
    )


async def test_a_missing_level_is_the_reason_even_when_quota_is_short(sim: SimServer) -> None:
    """Kueue v0.19.2 judges a flavor's TAS fit before its quota (flavorassigner.go,
    checkFlavorForPodSets, then fitsResourceQuota): 2 cards in a 1-card queue at a level
    the flavor's Topology lacks wait for the level, not for quota."""
    cond = await _held(sim, _tas_job("no-rack", "tas", 2, "rack"))
    assert cond["message"] == (
        "couldn't assign flavors to pod set main: "
        'Flavor "tas" does not contain the requested level'
    )
