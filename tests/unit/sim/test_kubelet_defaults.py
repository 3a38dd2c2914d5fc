"""The kubelet stand-in reports a Node as a kubelet registers it, filling only what is absent
(docs/simulator.md, the ``sim --cluster`` run)."""

from __future__ import annotations

from gpustack_sim.standins.kubelet import kubelet_defaults

NOW = "2026-01-02T03:04:05Z"


def test_a_node_without_conditions_is_ready_with_its_capacity_allocatable() -> None:
    status = {"capacity": {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "100Gi"}}
    assert kubelet_defaults(status, NOW)
    ready = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": NOW,
            "lastTransitionTime": NOW,
        }
    ]
    pressures = {c["type"]: c["status"] for c in status["conditions"] if c["type"] != "Ready"}
    assert pressures == {"MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False"}
    assert status["allocatable"] == {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "100Gi"}
    assert not kubelet_defaults(status, "later")  # nothing left to fill: no write


def test_what_a_manifest_or_a_test_set_is_kept() -> None:
    not_ready = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
    status = {
        "capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
        "allocatable": {"cpu": "7500m"},
        "conditions": list(not_ready),
    }
    assert kubelet_defaults(status, NOW)  # memory was missing
    assert status["conditions"] == not_ready
    # Host resources only: the device plugin, not the kubelet, advertises devices.
    assert status["allocatable"] == {"cpu": "7500m", "memory": "32Gi"}
