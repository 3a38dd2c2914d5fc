"""The worker builds the chain of pools with no node yet (docs/autoscaling.md).

A Karpenter NodePool and a Cluster API node group at zero nodes and a pool a person declared
get their flavor, queue and LocalQueues at the declared maximum; nodes that arrive fall in
the same flavor, and scaling 0 -> 2 -> 0 writes no flavor, queue or LocalQueue (the quota
is the maximum throughout). With ProvisioningRequests served the autoscaled pools get an
AdmissionCheck scoped to their flavor; without, one log line and no check. Authorization is
on with deploy/base/rbac.yaml only (the read-only grants on the pool objects included).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import structlog

from gpustack_operator.commands.plan import read_cluster_input
from gpustack_operator.commands.policy_flags import read_declared_pools
from gpustack_operator.controllers.declaredpool import INACTIVE_CHECK, PROVISIONING_NOT_SERVED
from gpustack_operator.domain.chain.declaredpools import (
    DECLARED_POOLS_CONFIGMAP,
    DECLARED_POOLS_KEY,
)
from gpustack_operator.domain.declarationstatus import STATUS_CONFIGMAP
from gpustack_operator.runtime.resources import NODES
from gpustack_operator.worker.common import Writer
from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.crds import autoscaling_stand_in_crds, stand_in_crds
from gpustack_sim.standins.provisioningcheck import ProvisioningCheckStandIn
from tests.conftest import shared_crds_dir
from tests.integration.bootstrap.support import NS, WORKER_TOKEN, worker_rbac
from tests.integration.worker.support import (
    KUEUE,
    MANUFACTURERS,
    eventually,
    fast_config,
    idle,
    kueue_objects,
    nfd_master,
    node,
    put_node,
    started_and_idle,
    worker_running,
)

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "autoscaling"
POOL_KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort")


def _crds(provisioning: bool) -> list[dict[str, Any]]:
    """The real CRDs where present (Karpenter, Kueue; the autoscaler's ProvisioningRequest
    only with *provisioning*), stand-ins for the rest."""
    real: list[dict[str, Any]] = []
    shared = shared_crds_dir()
    if shared is not None:
        import yaml

        for path in sorted(shared.rglob("*.yaml")):
            if "provisioningrequests" in path.name and not provisioning:
                continue
            if "provisioningrequestconfigs" in path.name and not provisioning:
                continue
            if "admissionchecks" in path.name and not provisioning:
                continue
            real.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    names = {c["metadata"]["name"] for c in real}
    stand_ins = [*stand_in_crds(), *autoscaling_stand_in_crds(provisioning)]
    return [*real, *(c for c in stand_ins if c["metadata"]["name"] not in names)]


async def _sim(provisioning: bool) -> SimServer:
    auth = TokenAuthenticator()
    auth.add(WORKER_TOKEN, f"system:serviceaccount:{NS}:gpustack-operator-worker")
    server = SimServer(authenticator=auth, tls=True)
    server.load_crds(_crds(provisioning))
    for obj in worker_rbac():
        server.store.create(obj)
    await server.start()
    return server


@pytest.fixture
async def sim_pr(anyio_backend: str) -> AsyncIterator[SimServer]:
    server = await _sim(provisioning=True)
    try:
        yield server
        assert not list(server.authorizer.denials), list(server.authorizer.denials)
    finally:
        await server.stop()


@pytest.fixture
async def sim_no_pr(anyio_backend: str) -> AsyncIterator[SimServer]:
    server = await _sim(provisioning=False)
    try:
        yield server
        assert not list(server.authorizer.denials), list(server.authorizer.denials)
    finally:
        await server.stop()


def _load_pools(sim: SimServer) -> None:
    dump = read_cluster_input(EXAMPLES / "pools-at-zero.yaml")
    for obj in [*dump.namespaces, *dump.pools]:
        if obj["kind"] == "Namespace" and sim.store.get("v1", "Namespace", obj["metadata"]["name"]):
            continue
        sim.store.create(copy.deepcopy(dict(obj)))


def _config() -> Any:
    config = fast_config()
    declared = read_declared_pools(
        EXAMPLES / "declared-pools.yaml", config.policy.manufacturers_by_resource
    )
    return replace(config, policy=replace(config.policy, declared_pools=declared))


def _quota(sim: SimServer, queue: str) -> str | None:
    found = sim.store.get(KUEUE, "ClusterQueue", queue)
    if found is None:
        return None
    flavor = found["spec"]["resourceGroups"][0]["flavors"][0]
    return next(r["nominalQuota"] for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")


def _h100_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
                "feature.node.kubernetes.io/cpu-model.family": "25",
                "feature.node.kubernetes.io/cpu-model.id": "1",
                "karpenter.k8s.aws/instance-gpu-count": "8",
                "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
                "karpenter.k8s.aws/instance-gpu-name": "h100",
                "karpenter.sh/nodepool": "h100",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
            },
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "192", "memory": "2048Gi", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "192", "memory": "2048Gi", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _has_capacity_labels(sim_or_node: Any, name: str = "") -> bool:
    """The node carries the worker's profile labels (its .z-flavor labels, merged by NFD):
    without a declared pool it would have flavors of its own."""
    node = sim_or_node.store.get("v1", "Node", name) if name else sim_or_node
    labels = (node or {}).get("metadata", {}).get("labels", {})
    return any(k.endswith(".z-flavor") for k in labels)


SOUND = {
    "pool-karpenter-h100": "16",
    "pool-karpenter-l40s": "12",
    "pool-capi-md-a100": "10",
    "pool-declared-l4-flex": "8",
}


async def test_pools_at_zero_get_queues_and_scaling_writes_nothing(
    sim_pr: SimServer, tmp_path: Path
) -> None:
    sim = sim_pr
    _load_pools(sim)
    config = _config()
    async with (
        nfd_master(sim),
        ProvisioningCheckStandIn(sim),  # Kueue's controller: the checks become Active
        worker_running(
            sim.write_kubeconfig(tmp_path / "kc", token=WORKER_TOKEN), config
        ) as running,
    ):
        await eventually(
            lambda: all(_quota(sim, q) == n for q, n in SOUND.items()), "the pools' queues"
        )
        queues = {q["metadata"]["name"] for q in kueue_objects(sim, "ClusterQueue")}
        assert queues == set(SOUND), "the NodePool allowing two models gets no queue"
        await eventually(  # default and team-a
            lambda: len(kueue_objects(sim, "LocalQueue")) == 2 * len(SOUND), "LocalQueues"
        )
        await eventually(lambda: idle(running.manager), "the worker to settle")
        # ProvisioningRequests served: the autoscaled pools with a class get a check, scoped.
        checks = {c["metadata"]["name"] for c in sim.store.list(KUEUE, "AdmissionCheck")}
        assert checks == {"pool-capi-md-a100", "pool-declared-l4-flex"}
        for name in checks:
            queue = sim.store.get(KUEUE, "ClusterQueue", name)
            assert queue is not None
            assert queue["spec"]["admissionChecksStrategy"]["admissionChecks"] == [
                {"name": name, "onFlavors": [name]}
            ]
            config_ = sim.store.get(KUEUE, "ProvisioningRequestConfig", name)
            assert config_ is not None
            assert config_["spec"]["managedResources"] == ["nvidia.com/gpu"]
        before = {
            kind: {o["metadata"]["uid"] for o in kueue_objects(sim, kind)} for kind in POOL_KINDS
        }
        sim.counters.reset()
        # 0 -> 2 nodes: they fall in the pool's flavor, nothing new is made.
        for name in ("ip-10-0-1-1", "ip-10-0-1-2"):
            put_node(sim, _h100_node(name))
        nodes = running.manager.informer(NODES).indexer
        await eventually(
            lambda: all(_has_capacity_labels(sim, n) for n in ("ip-10-0-1-1", "ip-10-0-1-2")),
            "the new nodes' capacity labels (NFD merged the worker's NodeFeatures)",
        )
        await eventually(
            lambda: all(_has_capacity_labels(n) for n in nodes.list()) and idle(running.manager),
            "the worker to see them and settle",
        )
        # 2 -> 0 nodes.
        for name in ("ip-10-0-1-1", "ip-10-0-1-2"):
            sim.store.delete("v1", "Node", name)
        await eventually(lambda: len(nodes) == 0 and idle(running.manager), "the worker to settle")
        for kind in POOL_KINDS:
            assert sim.counters.writes(kind) == 0, (kind, sim.counters.snapshot())
        after = {
            kind: {o["metadata"]["uid"] for o in kueue_objects(sim, kind)} for kind in POOL_KINDS
        }
        assert after == before
        assert _quota(sim, "pool-karpenter-h100") == "16"


WRITERS = {
    "ResourceFlavor": {"resourceflavor"},
    "Cohort": {"cohort"},
    "ClusterQueue": {"clusterqueue"},
    "LocalQueue": {"localqueue"},
    "AdmissionCheck": {"declaredpool"},
    "ProvisioningRequestConfig": {"declaredpool"},
}
"""docs/architecture.md, "Who writes what": the one reconciler that writes each Kueue kind."""


async def test_each_kueue_kind_has_one_writer(
    sim_pr: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every apply, patch and delete of a Kueue kind, recorded with the controller whose
    reconcile made it: a node's own chain and the declared pools' chains (checks included)
    are created (a resync then writes nothing), then two pools go (one with a check), so
    creations, updates and deletions of every kind are seen; each kind has exactly one
    writer."""
    sim = sim_pr
    _load_pools(sim)
    put_node(sim, node("gpu-t4", cards=("Tesla T4", 2)))
    writes: dict[str, set[str]] = {}
    deleted: set[str] = set()

    def record(kind: str) -> None:
        controller = structlog.contextvars.get_contextvars().get("controller", "")
        writes.setdefault(kind, set()).add(str(controller or "(outside a reconcile)"))

    apply, remove, delete = Writer.apply, Writer.remove, Writer.delete

    async def recorded_apply(self: Writer, resource: Any, want: Any, **kw: Any) -> Any:
        record(resource.kind)
        return await apply(self, resource, want, **kw)

    async def recorded_remove(self: Writer, resource: Any, want: Any, *a: Any, **kw: Any) -> Any:
        record(resource.kind)
        return await remove(self, resource, want, *a, **kw)

    async def recorded_delete(self: Writer, resource: Any, obj: Any, reason: str) -> bool:
        record(resource.kind)
        deleted.add(resource.kind)
        return await delete(self, resource, obj, reason)

    monkeypatch.setattr(Writer, "apply", recorded_apply)
    monkeypatch.setattr(Writer, "remove", recorded_remove)
    monkeypatch.setattr(Writer, "delete", recorded_delete)
    async with (
        nfd_master(sim),
        ProvisioningCheckStandIn(sim),
        worker_running(
            sim.write_kubeconfig(tmp_path / "kc", token=WORKER_TOKEN), _config()
        ) as running,
    ):
        await eventually(
            lambda: all(_quota(sim, q) == n for q, n in SOUND.items()), "the pools' queues"
        )
        await eventually(
            lambda: any(
                not q["metadata"]["name"].startswith("pool-")
                for q in kueue_objects(sim, "ClusterQueue")
            ),
            "the T4 node's own queue",
        )
        await eventually(lambda: sim.store.list(KUEUE, "AdmissionCheck"), "the checks")
        await eventually(lambda: idle(running.manager), "the worker to settle")
        # A resync reaches every cached key again and writes nothing.
        sim.counters.reset()
        for informer in running.manager.informers.informers:
            informer.resync()
        await eventually(lambda: idle(running.manager), "the resync to be worked off")
        assert not any(sim.counters.writes(kind) for kind in WRITERS), sim.counters.snapshot()
        sim.store.delete("karpenter.sh/v1", "NodePool", "h100")
        sim.store.delete("cluster.x-k8s.io/v1beta1", "MachineDeployment", "md-a100", "default")
        gone = ("pool-karpenter-h100", "pool-capi-md-a100")
        await eventually(
            lambda: (
                not any(
                    sim.store.get(KUEUE, kind, name)
                    for kind in ("ResourceFlavor", "Cohort", "ClusterQueue", "AdmissionCheck")
                    for name in gone
                )
            ),
            "the two pools' objects gone",
        )
        await eventually(lambda: idle(running.manager), "the worker to settle")
    kueue_writes = {kind: who for kind, who in writes.items() if kind in WRITERS}
    assert kueue_writes == WRITERS, kueue_writes
    assert {"ResourceFlavor", "Cohort", "ClusterQueue", "AdmissionCheck"} <= deleted, deleted


async def test_a_live_count_above_the_maximum_counts(sim_pr: SimServer, tmp_path: Path) -> None:
    sim = sim_pr
    _load_pools(sim)
    async with (
        nfd_master(sim),
        ProvisioningCheckStandIn(sim),
        worker_running(
            sim.write_kubeconfig(tmp_path / "kc", token=WORKER_TOKEN), _config()
        ) as running,
    ):
        await eventually(lambda: _quota(sim, "pool-karpenter-h100") == "16", "the H100 queue")
        for i in range(3):
            put_node(sim, _h100_node(f"ip-10-0-2-{i}"))
        await eventually(lambda: _quota(sim, "pool-karpenter-h100") == "24", "24 live GPUs")
        await eventually(
            lambda: (
                all(_has_capacity_labels(sim, f"ip-10-0-2-{i}") for i in range(3))
                and idle(running.manager)
            ),
            "the nodes' capacity labels, and the worker to settle",
        )
        node_flavors = [
            f
            for f in kueue_objects(sim, "ResourceFlavor")
            if not f["metadata"]["name"].startswith("pool-")
        ]
        assert node_flavors == [], "a pool's nodes get no flavor of their own"


async def test_without_provisioning_requests_one_message_and_no_check(
    sim_no_pr: SimServer, tmp_path: Path
) -> None:
    sim = sim_no_pr
    _load_pools(sim)
    with structlog.testing.capture_logs() as logs:
        async with worker_running(
            sim.write_kubeconfig(tmp_path / "kc", token=WORKER_TOKEN), _config()
        ):
            await eventually(
                lambda: all(_quota(sim, q) == n for q, n in SOUND.items()), "the pools' queues"
            )
    said = [e for e in logs if e.get("event") == PROVISIONING_NOT_SERVED]
    assert len(said) == 1
    assert not [e for e in logs if e.get("event") == "reconcile failed; retrying with backoff"]
    assert all(
        "admissionChecksStrategy" not in q["spec"] for q in kueue_objects(sim, "ClusterQueue")
    )
    assert MANUFACTURERS


async def test_a_nodepool_that_comes_and_goes_takes_its_nodes_and_gives_them_back(
    sim_no_pr: SimServer, tmp_path: Path
) -> None:
    """Nodes first, with flavors of their own; the NodePool declared later claims them (their
    flavors go, the pool's comes); the NodePool deleted gives them back."""
    sim = sim_no_pr
    for name in ("ip-10-0-3-1", "ip-10-0-3-2"):
        put_node(sim, _h100_node(name))
    nodepool = next(
        p
        for p in read_cluster_input(EXAMPLES / "pools-at-zero.yaml").pools
        if p["metadata"]["name"] == "h100"
    )

    def flavors() -> set[str]:
        return {f["metadata"]["name"] for f in kueue_objects(sim, "ResourceFlavor")}

    config = fast_config()
    kubeconfig = sim.write_kubeconfig(tmp_path / "kc", token=WORKER_TOKEN)
    async with nfd_master(sim), worker_running(kubeconfig, config):
        await eventually(lambda: len(flavors()) >= 2, "the nodes' own flavors")
        own = flavors()
        assert not any(f.startswith("pool-") for f in own)
        sim.store.create(copy.deepcopy(dict(nodepool)))
        await eventually(lambda: flavors() == {"pool-karpenter-h100"}, "the pool's flavor alone")
        await eventually(lambda: _quota(sim, "pool-karpenter-h100") == "16", "the pool's queue")
        sim.store.delete("karpenter.sh/v1", "NodePool", "h100")
        await eventually(lambda: flavors() == own, "the nodes' own flavors again")
        await eventually(
            lambda: (
                not any(
                    q["metadata"]["name"].startswith("pool-")
                    for q in kueue_objects(sim, "ClusterQueue")
                )
            ),
            "the pool's queue gone",
        )


async def test_pools_declared_in_the_configmap_are_watched(
    sim_no_pr: SimServer, tmp_path: Path
) -> None:
    """docs/autoscaling.md, "Pools declared by a person": the worker watches the ConfigMap
    gpustack-declared-pools; a change reaches the queue. A bad edit (a broken document, a
    text only under binaryData, the key missing) is refused with a Warning Event and the
    last good pools stay in force, published in gpustack-declarations, also for a worker
    started again while the ConfigMap is still bad."""
    sim = sim_no_pr
    if sim.store.get("v1", "Namespace", NS) is None:
        sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    text = (EXAMPLES / "declared-pools.yaml").read_text()
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DECLARED_POOLS_CONFIGMAP, "namespace": NS},
        "data": {DECLARED_POOLS_KEY: text},
    }
    queue = "pool-declared-l4-flex"
    kubeconfig = sim.write_kubeconfig(tmp_path / "kc", token=WORKER_TOKEN)

    def edit(**fields: Any) -> None:
        stored = sim.store.get("v1", "ConfigMap", DECLARED_POOLS_CONFIGMAP, NS)
        assert stored is not None
        stored.pop("data", None)
        stored.pop("binaryData", None)
        stored.update(fields)
        sim.store.update(stored)

    def status() -> dict[str, str]:
        found = sim.store.get("v1", "ConfigMap", STATUS_CONFIGMAP, NS)
        return dict((found or {}).get("data") or {})

    def refusals() -> list[str]:
        return [
            str(e.get("message") or e.get("note") or "")
            for e in sim.store.list("v1", "Event", NS)
            if e.get("reason") == "DeclaredPoolsRefused"
        ]

    async with worker_running(kubeconfig, fast_config()):
        sim.store.create(configmap)
        await eventually(lambda: _quota(sim, queue) == "8", "the declared pool's queue")
        edit(data={DECLARED_POOLS_KEY: text.replace("maxNodes: 4", "maxNodes: 2")})
        await eventually(lambda: _quota(sim, queue) == "4", "the new maximum")
        await eventually(lambda: "l4-flex" in status().get("pools.inForce", ""), "the status")
        bad_edits = [
            {"data": {DECLARED_POOLS_KEY: "pools: {not: a list}"}},
            {"binaryData": {DECLARED_POOLS_KEY: "//79"}},
            {"data": {"pool.yaml": text}},
        ]
        for number, bad in enumerate(bad_edits, start=1):
            edit(**bad)
            await eventually(lambda n=number: len(refusals()) >= n, "a Warning Event")  # type: ignore[misc]
            assert _quota(sim, queue) == "4"  # the last good pools stay in force
        messages = refusals()
        assert "a mapping with a list 'pools'" in messages[0], messages
        assert "under binaryData" in messages[1] and "UTF-8" in messages[1], messages
        assert "has no key pools.yaml (it has pool.yaml)" in messages[2], messages
        assert all("the last good declaration stays in force" in m for m in messages)
        await eventually(lambda: "no key" in status().get("pools.refused", ""), "the refusal")
        assert "l4-flex" in status()["pools.inForce"]

    # A worker started again while the ConfigMap is bad keeps the pool in force.
    async with worker_running(kubeconfig, fast_config()) as running:
        await eventually(
            lambda: started_and_idle(running.manager, "declaredpool", "clusterqueue"),
            "the restarted worker idle",
        )
        assert _quota(sim, queue) == "4"
        edit(data={DECLARED_POOLS_KEY: text.replace("maxNodes: 4", "maxNodes: 3")})
        await eventually(lambda: _quota(sim, queue) == "6", "a good edit taken")
        await eventually(lambda: status().get("pools.refused") == "", "the refusal cleared")


async def test_a_check_that_never_becomes_active_is_left_out_until_it_does(
    sim_pr: SimServer, tmp_path: Path
) -> None:
    """docs/autoscaling.md, "A check that never becomes Active": the ProvisioningRequest
    kinds are served but no Kueue controller marks the check Active (the CRD came after
    Kueue's start): after the grace the queue drops the check, with one warning; once the
    check is Active it is back in the queue."""
    sim = sim_pr
    _load_pools(sim)
    config = _config()
    provisioning = replace(config.policy.provisioning, inactive_grace_seconds=0.3)
    config = replace(config, policy=replace(config.policy, provisioning=provisioning))
    name = "pool-capi-md-a100"

    def strategy() -> Any:
        queue = sim.store.get(KUEUE, "ClusterQueue", name)
        if queue is None:
            return None
        return (queue["spec"].get("admissionChecksStrategy") or {}).get("admissionChecks") or None

    kubeconfig = sim.write_kubeconfig(tmp_path / "kc", token=WORKER_TOKEN)
    with structlog.testing.capture_logs() as logs:
        async with worker_running(kubeconfig, config):
            await eventually(lambda: sim.store.get(KUEUE, "AdmissionCheck", name), "the check")
            await eventually(
                lambda: (
                    sim.store.get(KUEUE, "ClusterQueue", name) is not None and strategy() is None
                ),
                "the inactive check left out of the queue",
            )
            check = sim.store.get(KUEUE, "AdmissionCheck", name)
            assert check is not None
            check["status"] = {
                "conditions": [
                    {
                        "type": "Active",
                        "status": "True",
                        "reason": "Active",
                        "message": "The admission check is active",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ]
            }
            sim.store.update_status(check)
            await eventually(
                lambda: strategy() == [{"name": name, "onFlavors": [name]}],
                "the check back in the queue once Active",
            )
    said = [e for e in logs if e.get("event") == INACTIVE_CHECK and e.get("check") == name]
    assert len(said) == 1
    assert not [e for e in logs if e.get("event") == "reconcile failed; retrying with backoff"]


async def test_a_nodepool_crd_installed_later_is_watched_without_a_restart(
    tmp_path: Path,
) -> None:
    """docs/autoscaling.md, "In the worker": the worker starts on a cluster that serves no
    NodePool; once the CRD is installed and a NodePool created, the pool gets its queue."""
    auth = TokenAuthenticator()
    auth.add(WORKER_TOKEN, f"system:serviceaccount:{NS}:gpustack-operator-worker")
    sim = SimServer(authenticator=auth, tls=True)
    later = [c for c in _crds(False) if c["metadata"]["name"] == "nodepools.karpenter.sh"]
    sim.load_crds(c for c in _crds(False) if c["metadata"]["name"] != "nodepools.karpenter.sh")
    for obj in worker_rbac():
        sim.store.create(obj)
    await sim.start()
    try:
        config = fast_config(pool_discovery_interval=0.1)
        async with (
            nfd_master(sim),
            worker_running(
                sim.write_kubeconfig(tmp_path / "kc", token=WORKER_TOKEN), config
            ) as running,
        ):
            await eventually(
                lambda: running.worker.pool_controller is not None and idle(running.manager),
                "the worker to find its pool kinds (none) and settle",
            )
            dump = read_cluster_input(EXAMPLES / "pools-at-zero.yaml")
            h100 = next(p for p in dump.pools if p["metadata"]["name"] == "h100")
            sim.load_crds(later)
            sim.store.create(copy.deepcopy(dict(h100)))
            await eventually(
                lambda: _quota(sim, "pool-karpenter-h100") == "16",
                "the queue of a NodePool whose CRD came after the worker",
            )
        assert not list(sim.authorizer.denials), list(sim.authorizer.denials)
    finally:
        await sim.stop()
