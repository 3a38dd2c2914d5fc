"""``gpustack-operator worker`` as a process: flags from the environment, convergence, a clean
exit on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    NFD,
    NS,
    converged,
    eventually,
    fast_config,
    nfd_master,
    node,
    put_node,
)

pytestmark = [
    pytest.mark.anyio,
]

STARTUP_DEADLINE = 300
"""Seconds the process may take to write its first object: a deadline, not a wait (it ends
at once when the process exits). On two busy cores a Python command took 45 s to print its
``--help``, and this one wrote nothing within 30 s."""


@pytest.mark.timeout(STARTUP_DEADLINE + 90)
async def test_the_worker_command_converges_and_stops_cleanly(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    put_node(sim, node("one", cards=("Tesla T4", 2)))
    env = {
        **os.environ,
        "GPUSTACK_WORKER_NO_LEADER_ELECT": "true",
        "GPUSTACK_WORKER_METRICS_BIND_ADDRESS": "0",
        "GPUSTACK_WORKER_EXCLUDED_NAMESPACES": "kube-system,kube-public,kube-node-lease",
    }
    argv = [
        sys.executable,
        "-m",
        "gpustack_operator",
        "--log-format=json",
        "worker",
        f"--kubeconfig={sim_kubeconfig}",
        "--health-probe-bind-address=127.0.0.1:0",
        "--disable-applications=*",
    ]
    async with nfd_master(sim):
        process = await anyio.open_process(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            await eventually(
                lambda: (
                    process.returncode is not None
                    or sim.store.get(NFD, "NodeFeature", "one-gpustack-worker", NS) is not None
                ),
                "the worker process to start and publish the node's capacity",
                STARTUP_DEADLINE,
            )
            assert process.returncode is None, "the worker process exited"
            await converged(sim, fast_config(), timeout=30)
            # No leader election: the flag from the environment was honoured.
            assert sim.store.list("coordination.k8s.io/v1", "Lease", "gpustack-system") == []
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(20):
                code = await process.wait()
            assert code == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
