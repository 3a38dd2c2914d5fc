"""Judging Kueue's configuration (docs/workloads.md, "Kueue's configuration")."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpustack_operator.domain.chain.kueueconfig import (
    KueueConfiguration,
    fair_sharing,
    missing_pieces,
    parse_configuration,
    recommended_configuration,
)
from gpustack_operator.domain.manufacturers import default_manufacturers

MFRS = default_manufacturers()
HOST = ("cpu", "memory", "ephemeral-storage")


def configmap(config: Any) -> dict[str, Any]:
    return {"data": {"controller_manager_config.yaml": yaml.safe_dump(config)}}


def test_default_configuration_is_detected() -> None:
    assert parse_configuration(None).is_default
    assert not parse_configuration(None).found
    assert parse_configuration({"data": {}}).is_default
    kueue_default = parse_configuration(configmap({"integrations": {"frameworks": ["pod"]}}))
    assert kueue_default.found and kueue_default.is_default
    tuned = parse_configuration(configmap(recommended_configuration("credits", MFRS)))
    assert not tuned.is_default


def test_credits_queues_need_the_transformations() -> None:
    covered = (*HOST, "credits.gpustack.ai/nvidia", "credits.gpustack.ai/amd")
    (gpu, nvidia) = missing_pieces(parse_configuration(None), covered, MFRS)
    assert gpu.piece == "transformation/amd.com/gpu"
    assert nvidia.piece == "transformation/nvidia.com/gpu"
    assert "default configuration" in nvidia.message
    assert "deploy/components/kueue-config" in nvidia.message
    fixed = parse_configuration(configmap(recommended_configuration("credits", MFRS)))
    assert missing_pieces(fixed, covered, MFRS) == []


def test_recommended_credits_fragment_covers_shared_and_mig_names() -> None:
    fragment = recommended_configuration("credits", MFRS)
    inputs = {t["input"]: t for t in fragment["resources"]["transformations"]}
    for name in ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb"):
        assert inputs[name]["strategy"] == "Replace"
        assert inputs[name]["outputs"] == {"credits.gpustack.ai/nvidia": "1"}
    assert inputs["huawei.com/npu"]["outputs"] == {"credits.gpustack.ai/ascend": "1"}
    assert recommended_configuration("device", MFRS) == {
        "integrations": {"frameworks": ["batch/job"]}
    }


def test_device_queues_work_with_the_default_configuration() -> None:
    covered = (*HOST, "nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
    assert missing_pieces(parse_configuration(None), covered, MFRS) == []


def test_device_queues_break_on_replace_exclusion_and_frameworks() -> None:
    covered = (*HOST, "nvidia.com/gpu")
    config = parse_configuration(
        configmap(
            {
                "integrations": {"frameworks": ["pod"]},
                "resources": {
                    "excludeResourcePrefixes": ["nvidia.com/"],
                    "transformations": [
                        {"input": "nvidia.com/gpu", "strategy": "Replace", "outputs": {}}
                    ],
                },
            }
        )
    )
    pieces = [f.piece for f in missing_pieces(config, covered, MFRS)]
    assert pieces == [
        "excluded/nvidia.com/gpu",
        "framework/batch-job",
        "transformation/nvidia.com/gpu",
    ]


def test_unreadable_configuration_is_one_finding() -> None:
    config = parse_configuration({"data": {"controller_manager_config.yaml": "a: [b"}})
    (finding,) = missing_pieces(config, ("nvidia.com/gpu",), MFRS)
    assert finding.piece == "configuration"


@pytest.mark.parametrize(
    ("data", "enabled"),
    [
        ({}, False),
        ({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "fairSharing": {}}, True),
        (
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "fairSharing": {"preemptionStrategies": ["LessThanInitialShare"]},
            },
            True,
        ),
        ({"apiVersion": "config.kueue.x-k8s.io/v1beta1", "fairSharing": {"enable": False}}, False),
        ({"apiVersion": "config.kueue.x-k8s.io/v1beta1", "fairSharing": {"enable": True}}, True),
    ],
)
def test_fair_sharing_is_read_as_kueue_reads_it(data: dict[str, Any], enabled: bool) -> None:
    sharing = fair_sharing(KueueConfiguration(found=bool(data), data=data))
    assert sharing.enabled is enabled
    assert sharing.describe().startswith(f"Kueue's fair sharing is {'on' if enabled else 'off'}")
