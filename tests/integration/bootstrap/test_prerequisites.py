"""The worker's start-up check of the cluster's prerequisites (docs/deploy.md,
"Prerequisites"), against the simulator reporting an older Kubernetes: what to change is said
in one log line, a Warning Event on the worker's Pod and ``/readyz?verbose``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml
from structlog.testing import capture_logs

from gpustack_operator.commands.bootstrap_flags import start_bootstrap
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.manager import Manager, ManagerOptions
from gpustack_operator.worker.prerequisites import EVENT_REASON, check_cluster_prerequisites
from tests.integration.bootstrap.support import (
    NS,
    REPO,
    WORKER_TOKEN,
    config,
    eventually,
    started_sim,
)

pytestmark = pytest.mark.anyio
POD = "gpustack-operator-worker-0"
NODE_BOUND = REPO / "deploy" / "components" / "node-bound-agents" / "device-manager-own-node.yaml"


def node_bound_policy() -> list[dict[str, Any]]:
    """The shipped node-bound policy and its binding, as the release overlay installs them."""
    return [d for d in yaml.safe_load_all(NODE_BOUND.read_text()) if d]


def probing_options() -> ManagerOptions:
    return ManagerOptions(
        component="gpustack-operator",
        health_probe_bind_address="127.0.0.1:0",
        metrics_bind_address="0",
        cache_sync_timeout=30.0,
        graceful_shutdown_timeout=5.0,
    )


def prerequisite_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if str(e["event"]).startswith("cluster prerequisites not met")]


async def test_a_1_31_server_with_the_node_bound_policy_gets_one_line_saying_what_to_do(
    tmp_path: Path,
) -> None:
    async with started_sim() as sim:
        sim.kubernetes_version = (1, 31, 4)
        for obj in node_bound_policy():
            sim.store.create(obj)
        sim.store.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": POD, "namespace": NS},
                "spec": {"containers": [{"name": "worker", "image": "example.com/op:1"}]},
            }
        )
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
        client = await Client.connect(kubeconfig)
        try:
            manager = Manager(client, probing_options())
            cfg = config(env={"KUBERNETES_POD_NAME": POD, "KUBERNETES_POD_NAMESPACE": NS})
            with capture_logs() as logs:
                await start_bootstrap(client, manager, cfg)
            (line,) = prerequisite_lines(logs)
            said = str(line["event"])
            assert "\n" not in said
            assert "Kubernetes 1.31 gives Pod tokens no node-name claim (from 1.32)" in said
            assert "deploy/overlays/release-k8s-1.30" in said
            assert (
                "kubectl delete validatingadmissionpolicy,validatingadmissionpolicybinding "
                "gpustack-operator-device-manager-own-node" in said
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(manager.run)
                await manager.serving.wait()
                assert manager.health_server is not None
                async with httpx.AsyncClient() as http:
                    ready = await http.get(f"{manager.health_server.url}/readyz?verbose")
                assert ready.status_code == 500
                assert "[-]prerequisites failed" in ready.text
                assert "Kubernetes 1.31 gives Pod tokens no node-name claim" in ready.text

                def events() -> list[dict[str, Any]]:
                    return [
                        e
                        for e in sim.store.list("v1", "Event", NS)
                        if e.get("reason") == EVENT_REASON
                    ]

                await eventually(events, "a PrerequisiteNotMet Event on the worker's Pod")
                (event,) = events()
                assert event["type"] == "Warning"
                assert event["involvedObject"]["kind"] == "Pod"
                assert event["involvedObject"]["name"] == POD
                assert event["message"].startswith("Kubernetes 1.31 gives Pod tokens")
                tg.cancel_scope.cancel()
        finally:
            await client.close()


@pytest.mark.parametrize(
    ("version", "policy", "expected"),
    [
        ((1, 34, 0), True, []),  # new enough for everything
        ((1, 31, 0), False, []),  # the 1.30 overlay: no node-bound policy, nothing to say
        ((1, 29, 9), False, ["Kubernetes 1.29 is older than 1.30"]),
    ],
)
async def test_what_each_server_version_gets(
    tmp_path: Path, version: tuple[int, int, int], policy: bool, expected: list[str]
) -> None:
    async with started_sim() as sim:
        sim.kubernetes_version = version
        if policy:
            for obj in node_bound_policy():
                sim.store.create(obj)
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
        client = await Client.connect(kubeconfig)
        try:
            manager = Manager(client, probing_options())
            problems = await check_cluster_prerequisites(
                client, manager, pod_name=None, namespace=NS
            )
        finally:
            await client.close()
        assert [p.split(",")[0] for p in problems] == expected
