"""``sim --cluster FILE`` converges to exactly what ``plan --nodes FILE`` prints
(docs/simulator.md).

What is compared: both commands' ``-o json`` Lists, item by item and in order, after removing
from every item the metadata only a server sets (``uid``, ``resourceVersion``,
``creationTimestamp``, ``generation``, ``managedFields``) and ``ownerReferences`` (``plan``
cannot know the owners' uids, so it writes none for this file). Everything else - kinds,
names, namespaces, labels, annotations and the whole ``spec`` - must be identical. The owner
references ``sim`` read back are then checked on their own: each NodeFeature, ClusterQueue
and LocalQueue has one controller reference to its live owner.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
from typing import Any

import anyio
import pytest

from gpustack_operator.cli import main
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_sim.cluster.chain import differences, ownership_problems
from gpustack_sim.cluster.cluster import NotConverged, SimCluster
from tests.conftest import shared_crds_dir

from .support import EXAMPLE, example_nodes

SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")


def _normalised(item: dict[str, Any]) -> dict[str, Any]:
    """What plan decides: no server-set metadata, no owners, no status (Kueue's stand-in
    writes every queue's, as Kueue does; docs/simulator.md)."""
    meta = {
        k: v for k, v in item["metadata"].items() if k not in SERVER_SET and k != "ownerReferences"
    }
    return {**{k: v for k, v in item.items() if k != "status"}, "metadata": meta}


def _reconciles(controller: str) -> float:
    value = REGISTRY.get_sample_value(
        "controller_runtime_reconcile_total", {"controller": controller, "result": "success"}
    )
    return value or 0.0


@functools.cache
def _run_json(*argv: str) -> dict[str, Any]:
    """The command's stdout, parsed (each command runs once per test session)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--log-level", "warning", *argv])
    assert code == 0, out.getvalue()
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


def test_sim_prints_what_plan_prints_for_the_example_cluster() -> None:
    planned = _run_json("plan", "--nodes", str(EXAMPLE), "-o", "json")
    simulated = _run_json("sim", "--cluster", str(EXAMPLE), "-o", "json")

    assert simulated["kind"] == "List" and simulated["apiVersion"] == "v1"
    kinds = {item["kind"] for item in planned["items"]}
    assert kinds == {"NodeFeature", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue"}
    assert [_normalised(i) for i in simulated["items"]] == [
        _normalised(i) for i in planned["items"]
    ]
    assert simulated.get("explanations") == planned.get("explanations")
    # Read back from a server: every object has a uid, and no managedFields are printed.
    assert all(i["metadata"].get("uid") for i in simulated["items"])
    assert not any("managedFields" in i["metadata"] for i in simulated["items"])


def test_sim_owner_references_form_the_garbage_collection_chain() -> None:
    items = _run_json("sim", "--cluster", str(EXAMPLE), "-o", "json")["items"]
    uid = {(i["kind"], i["metadata"]["name"]): i["metadata"]["uid"] for i in items}
    checked = 0
    for item in items:
        refs = item["metadata"].get("ownerReferences") or []
        if item["kind"] == "NodeFeature":
            node = item["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"]
            assert [(r["kind"], r["name"], r["controller"]) for r in refs] == [("Node", node, True)]
        elif item["kind"] == "ClusterQueue":
            cohort = item["spec"]["cohortName"]
            assert [(r["kind"], r["name"], r["uid"]) for r in refs] == [
                ("Cohort", cohort, uid[("Cohort", cohort)])
            ]
        elif item["kind"] == "LocalQueue":
            queue = item["spec"]["clusterQueue"]
            assert [(r["kind"], r["name"], r["uid"]) for r in refs] == [
                ("ClusterQueue", queue, uid[("ClusterQueue", queue)])
            ]
        else:
            continue
        checked += 1
    assert checked == sum(i["kind"] != "ResourceFlavor" and i["kind"] != "Cohort" for i in items)


@pytest.mark.anyio
async def test_converged_cluster_makes_no_writes_after_a_resync() -> None:
    async with SimCluster(example_nodes(), ["default"], worker_resync_period=0.2) as cluster:
        await cluster.converge(45)
        assert ownership_problems(await cluster.read_back()) == []
        cluster.sim.counters.reset()
        before = _reconciles("capacity")
        # Several resync periods pass while the cluster settles again: every cached Node
        # is reconciled again, and nothing is written.
        await cluster.converge(45, settle=1.0)
        assert _reconciles("capacity") > before
        assert cluster.sim.counters.writes() == 0, cluster.sim.counters.snapshot()


@pytest.mark.anyio
async def test_a_cluster_without_the_worker_does_not_converge_and_says_why() -> None:
    async with SimCluster(example_nodes(), ["default"], run_worker=False) as cluster:
        with pytest.raises(NotConverged) as raised:
            await cluster.converge(1.0)
    reasons = raised.value.reasons
    assert "ClusterQueue gpustack--intel-xeon-platinum-8358-ln-x64-1c-2g: missing" in reasons
    assert "NodeFeature gpustack-system/cpu-epyc-1-gpustack-worker: missing" in reasons
    assert "did not converge within 1s" in str(raised.value)


@pytest.mark.anyio
async def test_a_cluster_that_keeps_changing_names_what_is_written_and_by_whom() -> None:
    """The chain matches but something writes on and on: the failure names the object, the
    field manager and the fields, not only "kept changing"."""
    async with SimCluster(example_nodes(), ["default"]) as cluster:
        await cluster.converge(60)
        store = cluster.sim.store
        store.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "restless", "namespace": "default"},
                "data": {"n": "0"},
            }
        )

        async def write_on() -> None:
            for n in range(1, 10_000):
                found = store.get("v1", "ConfigMap", "restless", "default")
                assert found is not None
                store.update({**found, "data": {"n": str(n)}}, field_manager="restless-writer")
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(write_on)
            with pytest.raises(NotConverged) as raised:
                await cluster.converge(2.0, settle=0.5)
            tasks.cancel_scope.cancel()
    message = str(raised.value)
    assert "the chain matched but the cluster kept changing" in message
    assert "ConfigMap default/restless:" in message, message
    assert "by restless-writer; changed data.n" in message, message


@pytest.mark.anyio
@pytest.mark.skipif(shared_crds_dir() is None, reason="needs ../shared/crds (real Kueue and NFD)")
async def test_the_chain_is_accepted_by_the_real_crd_schemas() -> None:
    from gpustack_sim.command import load_crd_documents

    crds_dir = shared_crds_dir()
    assert crds_dir is not None
    crds = load_crd_documents(sorted(p for p in crds_dir.iterdir() if p.is_dir()))
    async with SimCluster(example_nodes(), ["default"], crds=crds) as cluster:
        assert cluster.server_defaults
        await cluster.converge(45)
        back = await cluster.read_back()
    assert differences(back, cluster.expected(), server_defaults=True) == []
    # The schemas default fields the worker does not set; the worker leaves them alone.
    queue = back.cluster_queues[0]
    assert queue["spec"]["queueingStrategy"] == "BestEffortFIFO"


def test_sim_converges_on_a_dump_of_real_gpu_stacks() -> None:
    """docs/devices.md: GFD (plain, MIG, time-slicing, MPS), the AMD labeller and our agent
    beside GFD, read from a `kubectl get nodes` dump with NFD's feature-labels annotations.
    The live controllers converge to plan's chain; every device quota is positive and equals
    the allocatable of the resource the queue covers."""
    dump = str(EXAMPLE.parent / "mixed-stacks.yaml")
    planned = _run_json("plan", "--nodes", dump, "-o", "json")
    simulated = _run_json("sim", "--cluster", dump, "-o", "json")
    assert [_normalised(i) for i in simulated["items"]] == [
        _normalised(i) for i in planned["items"]
    ]
    queues = [i for i in simulated["items"] if i["kind"] == "ClusterQueue"]
    covered: dict[str, int] = {}
    for queue in queues:
        for group in queue["spec"]["resourceGroups"]:
            for flavor in group["flavors"]:
                for res in flavor["resources"]:
                    if res["name"] in ("cpu", "memory", "ephemeral-storage"):
                        continue
                    assert int(res["nominalQuota"]) > 0, queue["metadata"]["name"]
                    covered[res["name"]] = covered.get(res["name"], 0) + int(res["nominalQuota"])
    # Each card once: 8+8 A100 (one node also run by our agent), 56 MIG 1g.5gb (single),
    # 16 T4 and 8 L4 replicas; the mixed MIG profiles, AMD and the DRA-only node's H100s
    # (counted from its ResourceSlice) under their own resources.
    assert covered == {
        "nvidia.com/gpu": 96,
        "nvidia.com/gpu.shared": 16,
        "nvidia.com/mig-1g.10gb": 28,
        "nvidia.com/mig-3g.40gb": 8,
        "amd.com/gpu": 8,
        "gpu.nvidia.com/gpu": 4,
    }


@pytest.mark.parametrize(
    "dump",
    sorted(p.name for p in EXAMPLE.parent.glob("*.yaml") if p.name not in ("cluster.yaml",)),
)
def test_sim_converges_on_every_example_dump(dump: str) -> None:
    """Each vendor-stack and managed-cloud example (docs/devices.md): the live controllers
    converge to exactly plan's chain and explanations, and no ClusterQueue covers a device
    resource with a zero quota. (plan's quotas equal the allocatable of each pool's resource
    for every example: tests/unit/domain/test_devicesources.py.)"""
    path = str(EXAMPLE.parent / dump)
    planned = _run_json("plan", "--nodes", path, "-o", "json")
    simulated = _run_json("sim", "--cluster", path, "-o", "json")
    assert [_normalised(i) for i in simulated["items"]] == [
        _normalised(i) for i in planned["items"]
    ]
    # docs/plan.md: sim explains every node as plan does, device-source reasons included.
    assert simulated.get("explanations") == planned.get("explanations")
    device_quotas = [
        int(res["nominalQuota"])
        for queue in simulated["items"]
        if queue["kind"] == "ClusterQueue"
        for group in queue["spec"]["resourceGroups"]
        for flavor in group["flavors"]
        for res in flavor["resources"]
        if res["name"] not in ("cpu", "memory", "ephemeral-storage")
    ]
    assert device_quotas, f"{dump}: no device pool"
    assert all(q > 0 for q in device_quotas), f"{dump}: a device resource with zero quota"
