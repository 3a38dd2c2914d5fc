"""The gateway's MultiKueue mode on simulated clusters (docs/multikueue.md): two members with
different pools (H100 in east, MI300X in west, CPU in both) and a manager serving Kueue
v0.19.2's real CRDs where ../shared/crds has them (schemas and CEL rules judge every write).

The passes are driven by the tests (``MultiKueueSync.sync_once``), so "within one pass after
the gateway saw the change" is what they check, and the unreachable timer runs on a clock the
tests advance: nothing waits on real time but the gateway's own informers.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.domain.chain.multikueue import MULTIKUEUE_MANAGED_BY, MultiKueuePolicy
from gpustack_operator.domain.labels import MANAGED_BY_LABEL
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.gateway.cluster import ClusterSpec
from gpustack_operator.gateway.gateway import Gateway
from gpustack_operator.gateway.multikueue import ManagerSettings, MultiKueueSync
from gpustack_operator.runtime.client import Client
from gpustack_sim.apiserver.server import SimServer
from tests.conftest import shared_crds_dir
from tests.integration.gateway.support import FAST, eventually, kueue_crds, start_sim
from tests.unit.domain.test_multikueue import (
    CPU_POOL,
    H100,
    H100_POOL,
    MI300X,
    MI300X_POOL,
    cpu_node,
    gpu_node,
)

pytestmark = pytest.mark.anyio

JSON = dict[str, Any]
KUEUE = "kueue.x-k8s.io/v1beta2"
XEON_CPU_POOL = "gpustack--intel-xeon-platinum-8358-ln-x64-1c-2g"
UNREACHABLE_AFTER = 300.0
_MANAGER_KINDS = (
    "resourceflavors",
    "clusterqueues",
    "localqueues",
    "cohorts",
    "admissionchecks",
    "multikueueclusters",
    "multikueueconfigs",
)


class FakeClock:
    """The clock the mode measures unreachable members with; the tests move it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def manager_crds() -> list[JSON]:
    """Kueue v0.19.2's real CRDs of the kinds the manager holds; schema-less stand-ins
    without ../shared/crds."""
    crds = shared_crds_dir()
    if crds is not None:
        folder = crds / "kueue-v0.19.2"
        return [
            yaml.safe_load((folder / f"kueue.x-k8s.io_{plural}.yaml").read_text())
            for plural in _MANAGER_KINDS
        ]
    stand_ins = kueue_crds(("v1beta1", "v1beta2"))
    for kind, plural, scope in (
        ("AdmissionCheck", "admissionchecks", "Cluster"),
        ("MultiKueueCluster", "multikueueclusters", "Cluster"),
        ("MultiKueueConfig", "multikueueconfigs", "Cluster"),
    ):
        crd = yaml.safe_load(yaml.safe_dump(stand_ins[0]))
        crd["metadata"]["name"] = f"{plural}.kueue.x-k8s.io"
        crd["spec"]["names"] = {"kind": kind, "plural": plural, "listKind": f"{kind}List"}
        crd["spec"]["scope"] = scope
        stand_ins.append(crd)
    return stand_ins


@dataclass
class Member:
    name: str
    sim: SimServer
    kubeconfig: Path
    nodes: list[JSON] = field(default_factory=list)

    def seed(self, nodes: Sequence[JSON]) -> None:
        """Make the member's chain the one the worker builds for *nodes* (create, update and
        delete its flavors, cohorts, queues), as the worker would after the nodes changed."""
        self.nodes = list(nodes)
        state = plan_state(
            self.nodes, ["default", "team-a"], ChainPolicy(manufacturers=default_manufacturers())
        )
        store = self.sim.store
        wanted = [*state.resource_flavors, *state.cohorts, *state.cluster_queues]
        wanted += state.local_queues
        keys = set()
        for obj in wanted:
            meta = obj["metadata"]
            keys.add((obj["kind"], meta.get("namespace"), meta["name"]))
            current = store.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
            if current is None:
                store.create(obj)
            else:
                store.update({**obj, "metadata": {**current["metadata"], **meta}})
        for kind in ("LocalQueue", "ClusterQueue", "Cohort", "ResourceFlavor"):
            for obj in store.list(KUEUE, kind):
                meta = obj["metadata"]
                if (kind, meta.get("namespace"), meta["name"]) not in keys:
                    store.delete(KUEUE, kind, meta["name"], meta.get("namespace"))


@dataclass
class Setup:
    manager: SimServer
    members: dict[str, Member]
    gateway: Gateway
    sync: MultiKueueSync
    client: Client
    clock: FakeClock

    def objects(self, kind: str, namespace: str | None = None) -> dict[str, JSON]:
        api = "v1" if kind == "Secret" else KUEUE
        return {o["metadata"]["name"]: o for o in self.manager.store.list(api, kind, namespace)}

    def quota(self, pool: str) -> dict[str, str]:
        queue = self.objects("ClusterQueue")[pool]
        (group,) = queue["spec"]["resourceGroups"]
        (flavor,) = group["flavors"]
        return {r["name"]: r["nominalQuota"] for r in flavor["resources"]}

    def check_members(self, pool: str) -> list[str]:
        queue = self.objects("ClusterQueue")[pool]
        (check,) = queue["spec"]["admissionChecksStrategy"]["admissionChecks"]
        config = self.objects("AdmissionCheck")[check["name"]]["spec"]["parameters"]["name"]
        clusters: list[str] = self.objects("MultiKueueConfig")[config]["spec"]["clusters"]
        return clusters

    def gateway_sees(self, member: str, pool: str, resource: str, amount: str | None) -> bool:
        """Whether the gateway's cache holds *member*'s *pool* with *amount* of *resource*
        summed (None: the pool is gone)."""
        runner = self.gateway.clusters[member]
        entries = {p["name"]: p for p in runner.pools()}
        if amount is None:
            return pool not in entries
        return entries.get(pool, {}).get("nominalQuota", {}).get(resource) == amount


EAST_NODES = [gpu_node("h1", "nvidia", H100), gpu_node("h2", "nvidia", H100), cpu_node("c1")]
WEST_NODES = [gpu_node("m1", "amd", MI300X), cpu_node("c2"), cpu_node("c3")]


async def start_member(name: str, nodes: Iterable[JSON], tmp_path: Path) -> Member:
    sim = await start_sim()
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    member = Member(name, sim, sim.write_kubeconfig(tmp_path / f"{name}.kubeconfig"))
    member.seed(list(nodes))
    return member


@pytest.fixture
async def setup(anyio_backend: str, tmp_path: Path) -> AsyncIterator[Setup]:
    import anyio

    manager = SimServer(bookmark_interval=0.2)
    manager.load_crds(manager_crds())
    await manager.start()
    manager.store.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}
    )
    members: dict[str, Member] = {}
    try:
        members["east"] = await start_member("east", EAST_NODES, tmp_path)
        members["west"] = await start_member("west", WEST_NODES, tmp_path)
        gateway = Gateway(FAST)
        for member in members.values():
            gateway.add(ClusterSpec(member.name, member.kubeconfig, "sim"))
        clock = FakeClock()
        manager_kubeconfig = manager.write_kubeconfig(tmp_path / "manager.kubeconfig")
        settings = ManagerSettings(
            manager=ClusterSpec("manager", manager_kubeconfig),
            policy=MultiKueuePolicy(unreachable_after=UNREACHABLE_AFTER),
            clock=clock,
        )
        sync = MultiKueueSync(gateway, settings)
        async with (
            anyio.create_task_group() as tg,
            await Client.connect(manager_kubeconfig, timeout=5.0) as client,
        ):
            tg.start_soon(gateway.run)
            await eventually(
                lambda: all(r.synced() for r in gateway.clusters.values()), "both members synced"
            )
            yield Setup(manager, members, gateway, sync, client, clock)
            tg.cancel_scope.cancel()
    finally:
        for member in members.values():
            await member.sim.stop()
        await manager.stop()


async def test_the_manager_holds_one_queue_per_pool_with_the_summed_quota(setup: Setup) -> None:
    await setup.sync.sync_once(setup.client)
    queues = setup.objects("ClusterQueue")
    assert set(queues) == {H100_POOL, MI300X_POOL, CPU_POOL, XEON_CPU_POOL}
    assert setup.quota(H100_POOL)["nvidia.com/gpu"] == "16"
    assert setup.quota(MI300X_POOL)["amd.com/gpu"] == "8"
    assert setup.quota(CPU_POOL) == {"cpu": "96", "ephemeral-storage": "576Gi", "memory": "192Gi"}
    assert setup.check_members(H100_POOL) == ["east"]
    assert setup.check_members(MI300X_POOL) == ["west"]
    assert setup.check_members(CPU_POOL) == ["east", "west"]
    assert setup.check_members(XEON_CPU_POOL) == ["east", "west"]
    # Per member a MultiKueueCluster and its kubeconfig Secret in Kueue's namespace.
    clusters = setup.objects("MultiKueueCluster")
    assert set(clusters) == {"east", "west"}
    secrets = setup.objects("Secret", "kueue-system")
    for name, member in setup.members.items():
        location = clusters[name]["spec"]["clusterSource"]["kubeConfig"]["location"]
        stored = yaml.safe_load(base64.b64decode(secrets[location]["data"]["kubeconfig"]))
        assert stored["clusters"][0]["cluster"]["server"] == member.sim.url
    # LocalQueues named as the members name the pool, only where the manager has the namespace.
    member_queues = {
        (q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"]
        for m in setup.members.values()
        for q in m.sim.store.list(KUEUE, "LocalQueue")
    }
    manager_queues = {
        (q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"]
        for q in setup.manager.store.list(KUEUE, "LocalQueue")
    }
    assert manager_queues == {k: v for k, v in member_queues.items() if k[0] == "default"}
    for kind in ("ClusterQueue", "LocalQueue", "MultiKueueCluster", "AdmissionCheck"):
        for obj in setup.manager.store.list(KUEUE, kind):
            assert obj["metadata"]["labels"][MANAGED_BY_LABEL] == MULTIKUEUE_MANAGED_BY


async def test_a_steady_state_writes_nothing(setup: Setup) -> None:
    await setup.sync.sync_once(setup.client)
    writes = setup.manager.counters.writes()
    assert writes > 0  # the first pass wrote the objects, and the counter sees writes
    before = setup.manager.store.resource_version
    await setup.sync.sync_once(setup.client)
    assert setup.manager.counters.writes() == writes  # not even a no-op apply
    assert setup.manager.store.resource_version == before


async def test_a_pool_growing_shrinking_and_vanishing_reaches_the_manager_in_one_pass(
    setup: Setup,
) -> None:
    await setup.sync.sync_once(setup.client)
    east = setup.members["east"]
    steps: list[tuple[list[JSON], str | None]] = [
        ([*EAST_NODES, gpu_node("h3", "nvidia", H100)], "24"),  # grows
        ([gpu_node("h1", "nvidia", H100), cpu_node("c1")], "8"),  # shrinks
        ([cpu_node("c1")], None),  # vanishes
        (EAST_NODES, "16"),  # comes back
    ]
    for nodes, amount in steps:
        east.seed(nodes)
        await eventually(
            lambda a=amount: setup.gateway_sees("east", H100_POOL, "nvidia.com/gpu", a),
            f"the gateway to see east's H100 pool at {amount}",
        )
        await setup.sync.sync_once(setup.client)
        if amount is None:
            assert H100_POOL not in setup.objects("ClusterQueue")
            assert not any(
                q["spec"]["clusterQueue"] == H100_POOL
                for q in setup.manager.store.list(KUEUE, "LocalQueue")
            )
        else:
            assert setup.quota(H100_POOL)["nvidia.com/gpu"] == amount
    # The checks no set of members uses any more are gone too.
    used = {
        q["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["name"]
        for q in setup.objects("ClusterQueue").values()
    }
    assert set(setup.objects("AdmissionCheck")) == used
    assert set(setup.objects("MultiKueueConfig")) == used


async def test_an_unreachable_member_leaves_the_sums_after_the_stated_time(setup: Setup) -> None:
    await setup.sync.sync_once(setup.client)
    east = setup.members["east"]
    await east.sim.stop()  # its port now refuses connections
    await eventually(
        lambda: setup.gateway.clusters["east"].status.value == "Unreachable", "east unreachable"
    )
    await setup.sync.sync_once(setup.client)  # the timer starts
    assert setup.sync.unreachable_since["east"] == setup.clock.now
    setup.clock.now += UNREACHABLE_AFTER - 1
    await setup.sync.sync_once(setup.client)
    assert setup.quota(H100_POOL)["nvidia.com/gpu"] == "16"  # last known pools still count
    assert setup.check_members(CPU_POOL) == ["east", "west"]

    setup.clock.now += 1
    await setup.sync.sync_once(setup.client)
    assert setup.sync.excluded == {"east"}
    assert H100_POOL not in setup.objects("ClusterQueue")
    assert setup.quota(CPU_POOL)["cpu"] == "64"  # west's two nodes
    assert setup.check_members(CPU_POOL) == ["west"]
    assert "east" in setup.objects("MultiKueueCluster")  # Kueue keeps watching it

    await east.sim.start()  # the same port, the same objects
    await eventually(lambda: setup.gateway.clusters["east"].status.value == "Ready", "east back")
    await setup.sync.sync_once(setup.client)
    assert setup.sync.excluded == set()
    assert setup.quota(H100_POOL)["nvidia.com/gpu"] == "16"
    assert setup.check_members(CPU_POOL) == ["east", "west"]


async def test_objects_without_the_label_are_never_changed_or_deleted(setup: Setup) -> None:
    mine = {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": H100_POOL},
        "spec": {"namespaceSelector": {}, "resourceGroups": []},
    }
    other = {**mine, "metadata": {"name": "someone-elses"}}
    setup.manager.store.create(mine)
    setup.manager.store.create(other)
    await setup.sync.sync_once(setup.client)
    queues = setup.objects("ClusterQueue")
    assert queues[H100_POOL]["spec"]["resourceGroups"] == []  # left as it was, and reported
    assert MANAGED_BY_LABEL not in (queues[H100_POOL]["metadata"].get("labels") or {})
    assert ("ClusterQueue", "", H100_POOL) in setup.sync.foreign
    assert "someone-elses" in queues
    assert MI300X_POOL in queues  # the others are written as usual


async def test_a_member_kubeconfig_kueue_would_refuse_gets_no_cluster(setup: Setup) -> None:
    west = setup.members["west"]
    document = yaml.safe_load(west.kubeconfig.read_text())
    document["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    west.kubeconfig.write_text(yaml.safe_dump(document))
    await setup.sync.sync_once(setup.client)
    assert "insecure-skip-tls-verify" in setup.sync.refused["west"]
    assert "certificate-authority-data" in setup.sync.refused["west"]
    assert set(setup.objects("MultiKueueCluster")) == {"east"}
    assert MI300X_POOL not in setup.objects("ClusterQueue")
    assert setup.check_members(CPU_POOL) == ["east"]


async def test_the_mode_runs_on_its_own(setup: Setup) -> None:
    """``run()``: connects, discovers the manager's Kueue version, and passes on its own."""
    import anyio

    sync = MultiKueueSync(
        setup.gateway,
        ManagerSettings(
            manager=setup.sync.settings.manager,
            policy=setup.sync.settings.policy,
            sync_interval=0.05,
            clock=setup.clock,
        ),
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(sync.run)
        await eventually(lambda: sync.passes >= 2, "two passes")
        assert H100_POOL in setup.objects("ClusterQueue")
        setup.members["east"].seed([cpu_node("c1")])
        await eventually(
            lambda: H100_POOL not in setup.objects("ClusterQueue"), "the H100 queue to go"
        )
        tg.cancel_scope.cancel()
    assert sync.last_error == ""
