"""TAS is on where Kueue serves ``topologies`` in v1beta2 or v1beta1, and off, said once,
where it does not (a Kueue before 0.14) or where a person turned it off (docs/topology.md,
"The switch")."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gpustack_operator.domain.node.nodetopology import TopologyPolicy
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.runtime.client import Client
from gpustack_operator.wiring import TAS_UNSERVED, detect_topology_at_start
from gpustack_sim.apiserver.server import SimServer
from tests.conftest import stand_in_crds_of
from tests.integration.worker.support import MANUFACTURERS

pytestmark = pytest.mark.anyio
QUEUE_KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")


async def _decide(
    tmp_path: Path, kinds: tuple[str, ...], policy: ChainPolicy
) -> tuple[ChainPolicy, list[str]]:
    server = SimServer()
    if kinds:
        server.load_crds(stand_in_crds_of(*kinds))
    await server.start()
    try:
        kubeconfig = server.write_kubeconfig(tmp_path / f"kubeconfig-{len(kinds)}")
        async with await Client.connect(kubeconfig) as client:
            with capture_logs() as logs:
                decided = await detect_topology_at_start(client, policy)
    finally:
        await server.stop()
    return decided, [str(e.get("event")) for e in logs if e.get("log_level") != "debug"]


async def test_a_kueue_without_topologies_turns_tas_off_and_says_why_once(tmp_path: Path) -> None:
    policy = ChainPolicy(manufacturers=MANUFACTURERS)
    decided, said = await _decide(tmp_path, QUEUE_KINDS, policy)
    assert not decided.topology.enabled and decided.topology.reason == TAS_UNSERVED
    assert said == [TAS_UNSERVED]


async def test_a_kueue_with_topologies_and_no_kueue_yet_keep_tas_on(tmp_path: Path) -> None:
    policy = ChainPolicy(manufacturers=MANUFACTURERS)
    with_topologies, said = await _decide(tmp_path, (*QUEUE_KINDS, "Topology"), policy)
    assert with_topologies == policy and said == []
    no_kueue, said = await _decide(tmp_path, (), policy)
    assert no_kueue == policy and said == []


async def test_tas_turned_off_by_a_person_is_said_once(tmp_path: Path) -> None:
    off = ChainPolicy(
        manufacturers=MANUFACTURERS,
        topology=TopologyPolicy(enabled=False, reason="turned off by --topology=off"),
    )
    decided, said = await _decide(tmp_path, (*QUEUE_KINDS, "Topology"), off)
    assert decided == off and said == ["topology-aware scheduling off"]
