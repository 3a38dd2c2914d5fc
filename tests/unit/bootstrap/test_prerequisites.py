"""The CRDs and RBAC shipped in deploy/ are exactly what the renderers produce
(docs/security.md, "No escalation path"); regenerate with hack/render_prerequisites.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "render_prerequisites", REPO / "hack" / "render_prerequisites.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


@pytest.mark.parametrize("path", sorted(GENERATOR.FILES))
def test_shipped_prerequisites_match_the_renderers(path: str) -> None:
    shipped = (REPO / path).read_text(encoding="utf-8")
    assert shipped == GENERATOR.render(path), (
        f"{path} differs from the renderers: run .venv/bin/python hack/render_prerequisites.py"
    )
    kinds = {d["kind"] for d in yaml.safe_load_all(shipped) if d}
    if "/nfd-crds/" in path:
        # One CRD per file, named after it: hack/nfd-crds.sh creates each only where absent.
        (crd,) = [d for d in yaml.safe_load_all(shipped) if d]
        assert crd["kind"] == "CustomResourceDefinition"
        assert path.endswith(f"/{crd['metadata']['name']}.yaml")
    else:
        assert "ServiceAccount" in kinds and "ClusterRole" in kinds
        # No overlay carries a CRD: kubectl apply would relabel another NFD's as ours.
        assert "CustomResourceDefinition" not in kinds
