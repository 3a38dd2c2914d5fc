"""``gpustack-operator worker`` as a process installs Stage 1 from its flags and environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.resources import DAEMONSETS, DEPLOYMENTS
from tests.integration.bootstrap.support import (
    NS,
    WORKER_TOKEN,
    eventually,
    get_or_none,
    started_sim,
)

pytestmark = pytest.mark.anyio

IMAGE = "registry.example.com/op:2.0"


async def test_worker_command_installs_nfd_and_device_managers(tmp_path: Path) -> None:
    async with started_sim() as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_")},
            "GPUSTACK_WORKER_NO_LEADER_ELECT": "true",
            "GPUSTACK_WORKER_METRICS_BIND_ADDRESS": "0",
            "GPUSTACK_WORKER_DEVICE_MANAGER_IMAGE": IMAGE,
            "GPUSTACK_PCI_CLASS_PREFIXES": "03",
        }
        argv = [
            sys.executable,
            "-m",
            "gpustack_operator",
            "--log-format=json",
            "worker",
            f"--kubeconfig={kubeconfig}",
            "--health-probe-bind-address=127.0.0.1:0",
            "--manufacturer=nvidia",
            "--nfd-image=mirror.example.com/nfd:v0.18.3",
        ]
        process = await anyio.open_process(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            async with await Client.connect(kubeconfig) as client:
                name = "gpustack-operator-device-manager-nvidia"
                await eventually(
                    lambda: get_or_none(client, DAEMONSETS, name, NS), name, timeout=40
                )
                ds = await client.get(DAEMONSETS, name, NS)
                container = ds["spec"]["template"]["spec"]["containers"][0]
                assert container["image"] == IMAGE
                env_out = {e["name"]: e.get("value") for e in container["env"]}
                assert env_out["GPUSTACK_PCI_CLASS_PREFIXES"] == "03"
                assert env_out["GPUSTACK_WORKER_DEVICE_MANAGER_IMAGE"] == IMAGE
                master = await client.get(DEPLOYMENTS, "node-feature-discovery-master", NS)
                nfd = master["spec"]["template"]["spec"]["containers"][0]
                assert nfd["image"] == "mirror.example.com/nfd:v0.18.3"
                listed = await client.list(DAEMONSETS, NS)
                names = sorted(d["metadata"]["name"] for d in listed.items)
                assert names == [name, "node-feature-discovery-worker"]
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                code = await process.wait()
            assert code == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
