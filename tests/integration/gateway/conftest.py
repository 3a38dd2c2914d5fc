"""Three simulated clusters with different chains (one serving only Kueue v1beta1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.plan.desired import DesiredState
from gpustack_operator.gateway.cluster import ClusterSpec
from gpustack_sim.apiserver.server import SimServer

from .support import seed_chain, start_sim


@dataclass
class SimCluster:
    name: str
    sim: SimServer
    state: DesiredState
    kubeconfig: Path
    version: KueueVersion

    @property
    def spec(self) -> ClusterSpec:
        return ClusterSpec(self.name, self.kubeconfig, "sim")


_LAYOUT = (
    ("east", ("cpu-epyc-1", "gpu-t4-1", "gpu-t4-2"), ("v1beta1", "v1beta2")),
    ("west", ("gpu-a10g-sliced", "gpu-hybrid"), ("v1beta2",)),
    ("legacy", ("npu-kunpeng", "cpu-epyc-2"), ("v1beta1",)),
)


@pytest.fixture
async def clusters(anyio_backend: str, tmp_path: Path) -> AsyncIterator[list[SimCluster]]:
    """east (v1beta2 + v1beta1 served), west (v1beta2 only), legacy (v1beta1 only)."""
    started: list[SimCluster] = []
    try:
        for name, nodes, versions in _LAYOUT:
            sim = await start_sim(versions)
            version = KueueVersion.V1BETA2 if "v1beta2" in versions else KueueVersion.V1BETA1
            state = seed_chain(sim, nodes, version)
            kubeconfig = sim.write_kubeconfig(tmp_path / f"{name}.kubeconfig")
            started.append(SimCluster(name, sim, state, kubeconfig, version))
        yield started
    finally:
        for cluster in started:
            await cluster.sim.stop()
