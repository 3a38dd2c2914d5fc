"""``gpustack-operator queues`` when something is wrong, and the flags it takes: every error is
one line on stderr and exit 1 (a namespace that does not exist included); ``--manufacturer``
narrows the device pools listed (docs/workloads.md, "Finding a pool")."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gpustack_operator.cli import main
from gpustack_operator.domain.plan.desired import desired_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import MANUFACTURERS, NS, node

pytestmark = pytest.mark.anyio


def seed(sim: SimServer) -> None:
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    nodes = [node("cpu-a"), node("gpu-a", cards=("Tesla T4", 2))]
    state = desired_state(
        nodes, ["team-a"], ChainPolicy(manufacturers=MANUFACTURERS, system_namespace=NS)
    )
    for obj in [*state.cohorts, *state.resource_flavors, *state.cluster_queues]:
        sim.store.create(obj)
    for obj in state.local_queues:
        sim.store.create(obj)


async def queues(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The command as a person runs it (its own event loop, so in a thread)."""
    code = await anyio.to_thread.run_sync(main, ["queues", *argv])
    out, err = capsys.readouterr()
    return code, out, err


async def test_a_namespace_that_does_not_exist_is_one_line_and_exit_1(
    sim: SimServer, sim_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(sim)
    code, out, err = await queues(capsys, "--kubeconfig", str(sim_kubeconfig), "-n", "nope")
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1, err
    assert "namespace nope does not exist" in err
    # An existing namespace without LocalQueues is an answer, not an error.
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "empty"}})
    code, out, err = await queues(capsys, "--kubeconfig", str(sim_kubeconfig), "-n", "empty")
    assert code == 0 and out == ""
    assert "no pools in namespace empty" in err
    assert "is it running?" in err
    # The policy's namespaces say why one gets no pools.
    code, _, err = await queues(
        capsys, "--kubeconfig", str(sim_kubeconfig), "-n", "empty", "--excluded-namespaces", "empty"
    )
    assert code == 0
    assert "it is the system namespace or an excluded one" in err


async def test_an_unreachable_cluster_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    code, out, err = await queues(capsys, "--kubeconfig", str(missing))
    assert code == 1
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("gpustack-operator queues: error: cannot connect to the cluster: ")
    assert str(missing) in err


async def test_manufacturer_narrows_the_device_pools(
    sim: SimServer, sim_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed(sim)
    base = ("--kubeconfig", str(sim_kubeconfig), "-n", "team-a")
    code, every, _ = await queues(capsys, *base)
    assert code == 0
    assert "Tesla-T4" in every and "nvidia.com/gpu" in every
    code, nvidia, _ = await queues(capsys, *base, "--manufacturer", "nvidia")
    assert code == 0 and nvidia == every
    code, amd, _ = await queues(capsys, *base, "--manufacturer", "amd")
    assert code == 0
    assert "Tesla-T4" not in amd
    cpu_rows = [line.split() for line in every.splitlines()[1:] if " cpu " in line]
    assert cpu_rows and [line.split() for line in amd.splitlines()[1:]] == cpu_rows
