"""Fixtures of the simulator's unit tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import shared_crds_dir


@pytest.fixture(scope="session")
def shared_crds() -> Path:
    """The real Kueue and NFD CRDs (../shared/crds), or skip when they are not there."""
    path = shared_crds_dir()
    if path is None:
        pytest.skip(
            "real CRDs not found at ../shared/crds (set GPUSTACK_SHARED_CRDS to the folder)"
        )
    return path


@pytest.fixture(scope="session")
def crd_docs(shared_crds: Path) -> dict[str, list[dict[str, Any]]]:
    """Every CRD document under the shared CRDs by file name, parsed once per session."""
    return {
        path.name: [d for d in yaml.safe_load_all(path.read_text()) if d]
        for path in sorted(shared_crds.rglob("*.yaml"))
    }
