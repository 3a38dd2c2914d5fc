"""Scenario g: every Kueue configuration the project documents or ships is loaded by the real
Kueue manager, which decodes its configuration strictly and exits on a field it does not know
(docs/realcluster.md; Kueue v0.19.2 ``pkg/config/config.go``)."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gpustack_operator.domain.chain.kueueconfig import recommended_configuration
from gpustack_operator.environment import load_manufacturers
from tests.kueueconfig.snippets import kueue_configuration_snippets
from tests.realcluster.controlplane import (
    DEFAULT_KUEUE_CONFIGURATION,
    ControlPlane,
    RealClusterError,
)

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]


def _deep_merge(base: dict[str, Any], piece: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in piece.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def documented_configurations() -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, Configuration) for each Kueue configuration the docs, the README and deploy/
    hold (the snippets the strict-decode test reads, tests/kueueconfig/snippets.py): whole ones
    as written, fragments merged into the tier's default; and what
    ``recommended_configuration`` writes."""
    for snippet in kueue_configuration_snippets():
        config = dict(snippet.config)
        yield (
            snippet.where,
            config if snippet.whole else _deep_merge(DEFAULT_KUEUE_CONFIGURATION, config),
        )
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
    assert any(w.startswith("recommended_configuration") for w in where), where


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
