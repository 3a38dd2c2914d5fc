"""deploy/components/kueue-config holds what recommended_configuration("credits") says."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpustack_operator.domain.chain.kueueconfig import (
    missing_pieces,
    parse_configuration,
    recommended_configuration,
)
from gpustack_operator.domain.manufacturers import default_manufacturers

COMPONENT = Path(__file__).parents[3] / "deploy" / "components" / "kueue-config"


def test_component_matches_the_recommended_configuration() -> None:
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    (patch,) = kustomization["patches"]
    configmap = yaml.safe_load((COMPONENT / patch["path"]).read_text())
    assert configmap["metadata"] == {"name": "kueue-manager-config", "namespace": "kueue-system"}
    config = parse_configuration(configmap)
    mfrs = default_manufacturers()
    want = recommended_configuration("credits", mfrs)
    assert config.data["resources"] == want["resources"]
    assert config.data["integrations"] == want["integrations"]
    covered = [m.credits_resource for m in mfrs.values()]
    assert missing_pieces(config, covered, mfrs) == []
