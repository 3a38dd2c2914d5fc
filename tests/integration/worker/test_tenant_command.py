"""``gpustack-operator worker`` inside a vCluster tenant on shared host nodes, as a process
with the worker's RBAC (docs/tenants.md): it says what it found, installs nothing, writes no
NodeFeature and bounds device quota by the cap given in the environment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from gpustack_operator.domain.chain.tenancy import host_owned_keys
from gpustack_operator.wiring import TENANT_NO_NODE_FEATURES
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import put_node

pytestmark = [pytest.mark.anyio]

REPO = Path(__file__).resolve().parents[3]
KUEUE = "kueue.x-k8s.io/v1beta2"


def device_quota(queue: dict[str, Any]) -> int:
    return sum(
        int(r["nominalQuota"])
        for g in queue["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
        if r["name"] == "nvidia.com/gpu"
    )


async def test_the_worker_in_a_shared_node_tenant(sim: SimServer, sim_kubeconfig: Path) -> None:
    nodes = yaml.safe_load((REPO / "examples" / "vcluster-tenant.yaml").read_text())["items"]
    for node in nodes:
        put_node(sim, node)
    env = {
        **os.environ,
        "GPUSTACK_WORKER_NO_LEADER_ELECT": "true",
        "GPUSTACK_WORKER_METRICS_BIND_ADDRESS": "0",
        "GPUSTACK_WORKER_TENANT_QUOTA_CAP": "nvidia.com/gpu=1",
    }
    argv = [
        sys.executable,
        "-m",
        "gpustack_operator",
        "--log-format=json",
        "worker",
        f"--kubeconfig={sim_kubeconfig}",
        "--health-probe-bind-address=127.0.0.1:0",
        "--device-manager-image=registry.example.com/gpustack-operator:test",
    ]
    process = await anyio.open_process(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while len(sim.store.list(KUEUE, "ClusterQueue")) < 3:
            assert time.monotonic() < deadline, "the worker built no chain"
            await anyio.sleep(0.05)
        queues = sim.store.list(KUEUE, "ClusterQueue")
        assert sorted(device_quota(q) for q in queues) == [0, 1, 1]
        for flavor in sim.store.list(KUEUE, "ResourceFlavor"):
            selector = flavor["spec"]["nodeLabels"]
            for node in nodes:
                labels = node["metadata"]["labels"]
                if all(labels.get(k) == v for k, v in selector.items()):
                    assert set(selector) <= host_owned_keys(node)
        assert sim.store.list("nfd.k8s-sigs.io/v1alpha1", "NodeFeature") == []
        assert sim.store.list("apps/v1", "DaemonSet") == []
        assert sim.store.list("apps/v1", "Deployment") == []
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            assert await process.wait() == 0
        assert process.stderr is not None
        chunks = []
        try:
            while True:
                chunks.append(await process.stderr.receive())
        except anyio.EndOfStream:
            pass
        lines = b"".join(chunks).decode().splitlines()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    found = next(e for e in events if e.get("event") == "tenancy")
    assert found["tenancy"] == "shared-nodes" and found["detected"] is True
    assert any(e.get("event") == TENANT_NO_NODE_FEATURES for e in events)
