"""Which Node updates reach the unpooled report (controllers/unpooled.py)."""

from __future__ import annotations

import copy
from typing import Any

from gpustack_operator.controllers.unpooled import ReportChanged
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.worker.nodemodels import NodeModels

MFRS = load_manufacturers({})


def _node(version: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "gpu-1",
            "uid": "uid-gpu-1",
            "resourceVersion": version,
            "labels": {
                "kubernetes.io/hostname": "gpu-1",
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
                "nvidia.com/gpu.product": "Tesla-T4",
                "nvidia.com/gpu.count": "4",
                "nvidia.com/gpu.memory": "15360",
                **labels,
            },
            "annotations": {"feature.gpustack.ai/cpu-name": "Intel Xeon Gold 6338"},
        },
        "status": {
            "capacity": {"cpu": "64", "memory": "256Gi", "ephemeral-storage": "500Gi"},
            "allocatable": {"cpu": "63", "nvidia.com/gpu": "4"},
        },
    }


def test_the_merged_capacity_labels_alone_do_not_reach_the_report() -> None:
    models = NodeModels(MFRS)
    passes = ReportChanged(models)
    first = _node("1")
    merged = _node("2", **models.capacity_labels(first))
    assert models.view(first) != models.view(merged)  # the other Node controllers see it
    assert not passes.update(first, merged)


def test_what_the_report_reads_reaches_it() -> None:
    models = NodeModels(MFRS)
    passes = ReportChanged(models)
    first = _node("1")
    unmanaged = _node("2", **{"gpustack.ai/managed": "false"})
    assert passes.update(first, unmanaged)
    fewer = copy.deepcopy(first)
    fewer["metadata"]["resourceVersion"] = "3"
    fewer["status"]["allocatable"]["example.com/fpga"] = "2"  # a device no pool counts
    assert passes.update(first, fewer)
    agent = _node("4", **{"acceleratable.feature.gpustack.ai/nvidia": "true"})
    assert passes.update(first, agent)
    assert passes.create(first) and passes.delete(first)
