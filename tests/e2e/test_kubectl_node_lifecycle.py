"""The simulator ages nodes (docs/node-lifecycle.md): ``sim --serve --cluster`` with short
timers, and kubectl doing what people and node agents do (cordon, NotReady, the GPU
Operator's and mig-manager's labels, a card's allocatable dropping); the device pool's
quota follows, and comes back."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from gpustack_operator.domain.node.availability import format_time
from tests.e2e.conftest import Kubectl
from tests.e2e.test_sim_command import _read_until
from tests.integration.worker.support import node

pytestmark = pytest.mark.anyio

GPU = "nvidia.com/gpu"
TIMERS = ("--soft-grace", "1", "--maintenance-grace", "2", "--join-window", "1")
TIMERS += ("--device-grace", "1")


def gpu_node(name: str) -> dict[str, Any]:
    obj = node(name, cards=("Tesla T4", 2))
    obj["status"]["capacity"][GPU] = "2"
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": format_time(time.time() - 60)}
    ]
    return obj


async def gpu_quota(kubectl: Kubectl) -> int:
    queues = json.loads(await kubectl.out("get", "clusterqueues", "-o", "json"))["items"]
    return sum(
        int(r["nominalQuota"])
        for q in queues
        for g in q["spec"].get("resourceGroups") or []
        for f in g["flavors"]
        for r in f["resources"]
        if r["name"] == GPU
    )


async def quota_becomes(kubectl: Kubectl, gpus: int, what: str) -> None:
    deadline = time.monotonic() + 30
    while (found := await gpu_quota(kubectl)) != gpus:
        assert time.monotonic() < deadline, f"{what}: quota {found}, not {gpus}"
        await anyio.sleep(0.2)


def status_patch(**status: Any) -> list[str]:
    return ["--subresource=status", "--type=merge", "-p", json.dumps({"status": status})]


def ready(value: str) -> list[dict[str, str]]:
    return [{"type": "Ready", "status": value, "lastTransitionTime": format_time(time.time())}]


async def test_kubectl_ages_nodes_and_the_quota_follows(kubectl_bin: Path, tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    items = [gpu_node("gpu-a"), gpu_node("gpu-b")]
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    kubeconfig = tmp_path / "sim-kubeconfig.yaml"
    argv = [sys.executable, "-m", "gpustack_operator", "--log-level", "warning", "sim"]
    argv += ["--serve", "--plain-http", "--cluster", str(nodes), "--kubeconfig-out"]
    argv += [str(kubeconfig), *TIMERS]
    process = await anyio.open_process(argv)
    try:
        await _read_until(process.stderr, "Stop with Ctrl-C", 90)
        kubectl = Kubectl(kubectl_bin, kubeconfig, tmp_path / "kube-cache")
        await quota_becomes(kubectl, 4, "converged")
        steps: list[tuple[str, list[str], list[str], int]] = [
            ("cordon", ["cordon", "gpu-a"], ["uncordon", "gpu-a"], 2),
            (
                "NotReady",
                ["patch", "node", "gpu-a", *status_patch(conditions=ready("False"))],
                ["patch", "node", "gpu-a", *status_patch(conditions=ready("True"))],
                2,
            ),
            (
                "MIG change",
                ["label", "node", "gpu-a", "nvidia.com/mig.config.state=pending"],
                ["label", "--overwrite", "node", "gpu-a", "nvidia.com/mig.config.state=success"],
                2,
            ),
            (
                "driver upgrade failed",
                ["label", "node", "gpu-a", "nvidia.com/gpu-driver-upgrade-state=upgrade-failed"],
                ["label", "node", "gpu-a", "nvidia.com/gpu-driver-upgrade-state-"],
                2,
            ),
            (
                "failing card",
                ["patch", "node", "gpu-a", *status_patch(allocatable={GPU: "1"})],
                ["patch", "node", "gpu-a", *status_patch(allocatable={GPU: "2"})],
                3,
            ),
        ]
        for what, signal_, recovery, gpus in steps:
            await kubectl(*signal_)
            await quota_becomes(kubectl, gpus, what)
            await kubectl(*recovery)
            await quota_becomes(kubectl, 4, f"after {what}")
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
