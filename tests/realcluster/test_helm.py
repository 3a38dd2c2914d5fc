"""The Helm chart on the real control plane (docs/deploy.md, "How it is tested"): install,
upgrade, rollback and uninstall with the pinned Helm against a real kube-apiserver, beside an
NFD that another install created (the tier's own NFD CRDs), which stays exactly as it was and
is never part of the release (docs/realcluster.md)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.e2e.helm import PREVIOUS_CHART_REF, Helm, chart_at, chart_lifecycle, require_helm
from tests.e2e.test_deploy_nfd import snapshot
from tests.realcluster.controlplane import ControlPlane

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(600)]


def test_the_chart_installs_upgrades_rolls_back_and_uninstalls_beside_another_nfd(
    plane: ControlPlane, tmp_path: Path
) -> None:
    helm = Helm(require_helm(), tmp_path / "helm")

    async def cycle() -> None:
        result = await chart_lifecycle(
            plane.admin_kubeconfig,
            helm,
            from_chart=chart_at(PREVIOUS_CHART_REF, tmp_path / "previous"),
            foreign=snapshot,
        )
        kinds = {o["kind"] for o in result.installed}
        assert {"Namespace", "Deployment", "ClusterRole", "ValidatingAdmissionPolicy"} <= kinds
        # The cluster's NFD CRDs are another install's: never rendered, never the release's.
        assert "CustomResourceDefinition" not in kinds
        assert result.upgraded_args == ["--log-level=debug", "worker", "--quota-resources=credits"]
        assert result.rolled_back_args == ["worker"]
        assert result.left_after_uninstall == []

    anyio.run(cycle)
