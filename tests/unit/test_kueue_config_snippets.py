"""Every Kueue Configuration snippet in docs/ and deploy/ decodes strictly as Kueue v0.19.2's
v1beta2 Configuration (docs/workloads.md, "Kueue's configuration"): Kueue refuses to start
on an unknown field."""

from __future__ import annotations

import pytest
import yaml

from tests.kueueconfig.snippets import (
    Snippet,
    kueue_configuration_snippets,
    strict_decode_errors,
)

SNIPPETS = kueue_configuration_snippets()


def test_the_shipped_snippets_are_found() -> None:
    places = {s.where.split(":")[0].split(" ")[0] for s in SNIPPETS}
    assert "deploy/components/kueue-config/kueue-manager-config.yaml" in places
    assert "docs/workloads.md" in places


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.where for s in SNIPPETS])
def test_snippet_decodes_strictly(snippet: Snippet) -> None:
    assert strict_decode_errors(snippet.config, whole=snippet.whole) == [], snippet.where


def test_an_unknown_field_is_named() -> None:
    fragment = yaml.safe_load("waitForPodsReady:\n  enable: true\n  timeout: 20m\n")
    assert strict_decode_errors(fragment, whole=False) == [
        "waitForPodsReady.enable: unknown field (Kueue's WaitForPodsReady has no 'enable')"
    ]


def test_types_and_the_api_version_are_checked() -> None:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "waitForPodsReady": {"timeout": "soon", "blockAdmission": "no"},
        "fairSharing": {"enable": True, "preemptionStrategies": ["LessThanInitialShare"]},
    }
    errors = strict_decode_errors(config, whole=True)
    assert errors == [
        "waitForPodsReady.timeout: expected duration, found 'soon'",
        "waitForPodsReady.blockAdmission: expected bool, found 'no'",
        "fairSharing.enable: unknown field (Kueue's FairSharing has no 'enable')",
        "apiVersion: 'config.kueue.x-k8s.io/v1beta1', not config.kueue.x-k8s.io/v1beta2",
    ]
