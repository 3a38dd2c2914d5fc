"""The worker reads Kueue's configuration and says what the queues lack from it
(docs/workloads.md, "Kueue's configuration"): a Warning Event on Kueue's ConfigMap, one log
line per missing piece and a gauge, never a write to Kueue's configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from gpustack_operator.domain.chain.queues import QuotaResources
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_sim.apiserver.server import SimServer
from tests.integration.worker.support import (
    converged,
    eventually,
    fast_config,
    idle,
    nfd_master,
    node,
    put_node,
    worker_running,
)

pytestmark = pytest.mark.anyio

KUEUE_NS = "kueue-system"
PIECE = "transformation/nvidia.com/gpu"


def kueue_configmap(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-manager-config", "namespace": KUEUE_NS},
        "data": {"controller_manager_config.yaml": yaml.safe_dump(config)},
    }


def warnings_on_configmap(sim: SimServer) -> list[dict[str, Any]]:
    return [
        e
        for e in sim.store.list("v1", "Event", KUEUE_NS)
        if e.get("type") == "Warning"
        and e["involvedObject"].get("name") == "kueue-manager-config"
        and e.get("reason") == "KueueConfigurationIncomplete"
    ]


def missing_gauge(piece: str) -> float | None:
    return REGISTRY.get_sample_value("gpustack_kueue_configuration_missing", {"piece": piece})


async def test_missing_transformation_is_reported_and_cleared(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    # Credits queues need Kueue to turn nvidia.com/gpu into credits; device ones would not.
    config = fast_config(quota_resources=QuotaResources.CREDITS)
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NS}})
    # Kueue's own default: frameworks listed, no resources section.
    sim.store.create(kueue_configmap({"integrations": {"frameworks": ["batch/job", "pod"]}}))
    put_node(sim, node("gpu-a", cards=("Tesla T4", 2)))
    with capture_logs() as logs:
        async with nfd_master(sim), worker_running(sim_kubeconfig, config):
            await eventually(lambda: warnings_on_configmap(sim), "a Warning Event on the ConfigMap")
            (event,) = warnings_on_configmap(sim)
            assert "nvidia.com/gpu -> credits.gpustack.ai/nvidia" in event["message"]
            assert "deploy/components/kueue-config" in event["message"]
            assert missing_gauge(PIECE) == 1
            # The recommended fragment fixes it; the gauge goes back to 0.
            fixed = sim.store.get("v1", "ConfigMap", "kueue-manager-config", KUEUE_NS)
            assert fixed is not None
            fixed["data"] = kueue_configmap(
                {
                    "integrations": {"frameworks": ["batch/job"]},
                    "resources": {
                        "transformations": [
                            {
                                "input": "nvidia.com/gpu",
                                "strategy": "Replace",
                                "outputs": {"credits.gpustack.ai/nvidia": "1"},
                            }
                        ]
                    },
                }
            )["data"]
            sim.store.update(fixed)
            await eventually(lambda: missing_gauge(PIECE) == 0, "the gauge to clear")
    lines = [e for e in logs if e.get("piece") == PIECE and e["log_level"] == "warning"]
    assert len(lines) == 1, lines
    assert "Kueue's configuration has no resources section" in lines[0]["event"]
    # Read-only: the worker never wrote Kueue's configuration.
    after = sim.store.get("v1", "ConfigMap", "kueue-manager-config", KUEUE_NS)
    assert (
        after is not None and "transformations" in after["data"]["controller_manager_config.yaml"]
    )


async def test_default_configuration_is_reported_as_such(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    """No ConfigMap at all: Kueue's defaults, named as such in the Warning Event."""
    config = fast_config(quota_resources=QuotaResources.CREDITS)
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NS}})
    put_node(sim, node("gpu-a", cards=("Tesla T4", 1)))
    async with nfd_master(sim), worker_running(sim_kubeconfig, config):
        await eventually(lambda: warnings_on_configmap(sim), "a Warning Event about the defaults")
    (event,) = warnings_on_configmap(sim)
    assert "Kueue runs with its default configuration" in event["message"]
    assert sim.store.get("v1", "ConfigMap", "kueue-manager-config", KUEUE_NS) is None


async def test_device_queues_need_nothing_from_kueues_defaults(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    """The default --quota-resources=device: the queues cover nvidia.com/gpu itself, which
    Kueue's default configuration counts as is; the check reports nothing."""
    config = fast_config()
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NS}})
    put_node(sim, node("gpu-a", cards=("Tesla T4", 1)))
    with capture_logs() as logs:
        async with nfd_master(sim), worker_running(sim_kubeconfig, config) as running:
            await converged(sim, config)
            await eventually(lambda: idle(running.manager), "the controllers to go idle")
    assert warnings_on_configmap(sim) == []
    assert any(e["event"] == "Kueue's configuration has what the queues need" for e in logs)


def fair_sharing_gauge() -> float | None:
    return REGISTRY.get_sample_value("gpustack_kueue_fair_sharing")


async def test_fair_sharing_is_reported_either_way(sim: SimServer, sim_kubeconfig: Path) -> None:
    """docs/teams.md, "Fair sharing": the check says whether Kueue's fair sharing is on (v1beta2:
    the section is there) and follows a change of the ConfigMap."""
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NS}})
    sim.store.create(
        kueue_configmap({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"})
    )
    put_node(sim, node("gpu-a", cards=("Tesla T4", 1)))
    with capture_logs() as logs:
        async with nfd_master(sim), worker_running(sim_kubeconfig, fast_config()):
            await eventually(
                lambda: any(e.get("fair_sharing") is False for e in logs), "reported off"
            )
            assert fair_sharing_gauge() == 0
            configmap = sim.store.get("v1", "ConfigMap", "kueue-manager-config", KUEUE_NS)
            assert configmap is not None
            configmap["data"] = kueue_configmap(
                {
                    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                    "kind": "Configuration",
                    "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]},
                }
            )["data"]
            sim.store.update(configmap)
            await eventually(lambda: fair_sharing_gauge() == 1, "fair sharing reported on")
    said = [e["event"] for e in logs if "fair_sharing" in e]
    assert said[0].startswith("Kueue's fair sharing is off"), said
    assert said[-1].startswith("Kueue's fair sharing is on (LessThanOrEqualToFinalShare)"), said
