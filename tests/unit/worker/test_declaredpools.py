"""The declared pools in force (gpustack_operator/worker/declaredpools.py; docs/autoscaling.md,
"In the worker"): the registry answers the flavor, Cohort and ClusterQueue reconcilers with
what ``plan`` computes for the same pool, and says when it changed."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpustack_operator.commands.policy_flags import read_declared_pools
from gpustack_operator.domain.chain.declaredpools import POOL_LABEL, DeclaredPool
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.poolchain import ProvisioningSettings, declared_pool_chain
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.worker.declaredpools import BY_DECLARED_POOL, PoolRegistry, PoolsChanged

REPO = Path(__file__).resolve().parents[3]
VERSION = KueueVersion.V1BETA2
POOL = "pool-declared-l4-flex"


class FakeIndexer:
    def __init__(self, objects: Iterable[dict[str, Any]], registry: PoolRegistry) -> None:
        self.objects = list(objects)
        self.registry = registry

    def list(self) -> list[dict[str, Any]]:
        return list(self.objects)

    def by_index(self, name: str, value: str) -> list[dict[str, Any]]:
        assert name == BY_DECLARED_POOL
        return [o for o in self.objects if self.registry.claim(o) == value]


class FakeInformer:
    def __init__(self, indexer: FakeIndexer) -> None:
        self.indexer = indexer


def _pools() -> tuple[DeclaredPool, ...]:
    by_resource = ChainPolicy(load_manufacturers({})).manufacturers_by_resource
    results = read_declared_pools(REPO / "examples/autoscaling/declared-pools.yaml", by_resource)
    return tuple(r for r in results if isinstance(r, DeclaredPool))


def _node(name: str, pool: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"cloud.google.com/gke-nodepool": pool}},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def test_the_registry_gives_each_reconciler_what_plan_computes() -> None:
    pools = _pools()
    registry = PoolRegistry()
    registry.provisioning = ProvisioningSettings(served=True)
    registry.update(pools)
    nodes = [_node(f"n{i}", "l4-flex", 4) for i in range(3)] + [_node("x", "other", 8)]
    informer: Any = FakeInformer(FakeIndexer(nodes, registry))
    chain = declared_pool_chain(pools, nodes, VERSION, registry.provisioning)
    objects = registry.objects(POOL, informer, VERSION)
    assert objects is not None
    assert objects.flavor == chain.resource_flavors[POOL]
    assert objects.cohort == chain.cohorts[POOL]
    assert objects.cluster_queue == chain.cluster_queues[POOL]
    quotas = objects.cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert {"name": "nvidia.com/gpu", "nominalQuota": "12"} in quotas, "3 live nodes of 4"
    assert objects.admission_check == chain.admission_checks[POOL]
    assert objects.provisioning_config == chain.provisioning_configs[POOL]
    assert registry.objects("pool-declared-gone", informer, VERSION) is None
    # A check left out (docs/autoscaling.md, "A check that never becomes Active").
    registry.update(pools, unchecked={POOL})
    left_out = registry.objects(POOL, informer, VERSION)
    assert left_out is not None
    assert "admissionChecksStrategy" in chain.cluster_queues[POOL]["spec"]
    assert "admissionChecksStrategy" not in left_out.cluster_queue["spec"]


def test_the_registry_says_when_it_changed() -> None:
    pools = _pools()
    registry = PoolRegistry()
    assert not registry.known
    assert registry.update(()) == (), "the first reading is a change, even with no pool"
    assert registry.known and registry.version == 0
    assert registry.update(()) is None
    assert registry.update(pools) == ()
    assert registry.version == 1
    assert registry.wants(POOL) == pools[0]
    assert registry.concerns(POOL, None)
    assert registry.concerns("anything", {"metadata": {"labels": {POOL_LABEL: "x"}}})
    assert not registry.concerns("anything", {"metadata": {"labels": {}}})
    assert registry.update(pools, unchecked={POOL}) == pools, "a check left out is a change"
    assert registry.version == 1, "but no new claim of nodes"
    assert registry.update(pools, unchecked={POOL}) is None
    assert registry.update(()) == pools
    assert registry.wants(POOL) is None and registry.version == 2


def test_a_change_names_the_pools_objects_and_on_the_first_the_cached_ones() -> None:
    pools = _pools()
    registry = PoolRegistry()
    cached = [
        {"metadata": {"name": "pool-karpenter-old", "labels": {POOL_LABEL: "karpenter.old"}}},
        {"metadata": {"name": "a-node-flavor", "labels": {}}},
    ]
    cache: Any = FakeInformer(FakeIndexer(cached, registry))
    change = PoolsChanged((), pools, {"flavor": frozenset({"n-flavor"})})
    assert change.keys("flavor", cache) == ["n-flavor", POOL]
    assert change.keys("queue", cache) == [POOL]
    first = PoolsChanged((), (), first=True)
    assert first.keys("flavor", cache) == ["pool-karpenter-old"]
    gone = PoolsChanged(pools, ())
    assert gone.keys("cohort", cache) == [POOL]
