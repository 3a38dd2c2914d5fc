"""Scenario g: every Kueue configuration the project documents or ships is loaded by the real
Kueue manager, which decodes its configuration strictly and exits on a field it does not know
(docs/realcluster.md; Kueue v0.19.2 ``pkg/config/config.go``)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.domain.kueueconfig import recommended_configuration
from gpustack_operator.environment import load_manufacturers
from tests.realcluster.controlplane import (
    DEFAULT_KUEUE_CONFIGURATION,
    REPO,
    ControlPlane,
    RealClusterError,
)

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]

CONFIGURATION_FIELDS = frozenset(
    {
        "namespace",
        "manageJobsWithoutQueueName",
        "managedJobsNamespaceSelector",
        "internalCertManagement",
        "waitForPodsReady",
        "clientConnection",
        "integrations",
        "multiKueue",
        "fairSharing",
        "admissionFairSharing",
        "resources",
        "featureGates",
        "objectRetentionPolicies",
        "health",
        "metrics",
        "webhook",
        "leaderElection",
        "controller",
        "webhookServer",
        "visibilityServer",
        "tls",
        "kind",
        "apiVersion",
    }
)
"""Top-level fields of Kueue v0.19.2's v1beta2 ``Configuration`` (apis/config/v1beta2/
configuration_types.go, with the embedded ControllerManager's): a YAML block of the docs whose
keys are all among them is a piece of Kueue's configuration."""

_YAML_BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _deep_merge(base: dict[str, Any], piece: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in piece.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def documented_configurations() -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, Configuration) for each Kueue configuration in docs/, the README and deploy/:
    whole ones as written, pieces merged into the tier's default."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for page in pages:
        for number, block in enumerate(_YAML_BLOCK.findall(page.read_text()), 1):
            for document in yaml.safe_load_all(block):
                if not isinstance(document, dict) or not document:
                    continue
                where = f"{page.relative_to(REPO)} yaml block {number}"
                if document.get("kind") == "Configuration":
                    yield where, document
                elif document.get("kind") == "ConfigMap":
                    for key, text in (document.get("data") or {}).items():
                        loaded = yaml.safe_load(text)
                        if isinstance(loaded, dict) and loaded.get("kind") == "Configuration":
                            yield f"{where} data {key}", loaded
                elif "kind" not in document and set(document) <= CONFIGURATION_FIELDS:
                    yield where, _deep_merge(DEFAULT_KUEUE_CONFIGURATION, document)
    for path in sorted((REPO / "deploy").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "ConfigMap":
                for key, text in (document.get("data") or {}).items():
                    loaded = yaml.safe_load(text) if isinstance(text, str) else None
                    if isinstance(loaded, dict) and loaded.get("kind") == "Configuration":
                        yield f"{path.relative_to(REPO)} data {key}", loaded
    for mode in ("device", "credits"):
        fragment = recommended_configuration(mode, load_manufacturers())
        yield (
            f"recommended_configuration({mode!r})",
            _deep_merge(DEFAULT_KUEUE_CONFIGURATION, fragment),
        )


CASES = list(documented_configurations())


def test_the_docs_and_deploy_hold_kueue_configurations() -> None:
    where = [w for w, _ in CASES]
    assert any(w.startswith("deploy/components/kueue-config") for w in where), where
    assert any(w.startswith("docs/workloads.md") for w in where), where


@pytest.mark.parametrize(("where", "configuration"), CASES, ids=[w for w, _ in CASES])
def test_real_kueue_starts_with_each_documented_configuration(
    plane: ControlPlane, where: str, configuration: dict[str, Any]
) -> None:
    try:
        plane.start_kueue(configuration)
    except RealClusterError as exc:
        pytest.fail(f"Kueue refused the configuration of {where}: {exc}")
    finally:
        # Later tests of the module get Kueue with the tier's default again.
        plane.kueue_configuration = dict(DEFAULT_KUEUE_CONFIGURATION)


def test_real_kueue_refuses_a_field_it_does_not_know(plane: ControlPlane, tmp_path: Path) -> None:
    """The check above can fail: v1beta1's ``waitForPodsReady.enable`` stops the manager."""
    wrong = _deep_merge(DEFAULT_KUEUE_CONFIGURATION, {"waitForPodsReady": {"enable": True}})
    try:
        with pytest.raises(RealClusterError, match="enable"):
            plane.start_kueue(wrong)
    finally:
        plane.start_kueue(DEFAULT_KUEUE_CONFIGURATION)
