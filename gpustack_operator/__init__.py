"""gpustack-operator: node hardware -> Node Feature Discovery labels -> a Kueue scheduling chain."""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType

try:
    __version__ = version("gpustack-operator")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]

_CONTROLLERS = __name__ + ".controllers"
_SOURCE_CONTROLLERS = Path(__file__).resolve().parent.parent / "controllers"


class _SourceControllers(importlib.abc.MetaPathFinder):
    """``gpustack_operator.controllers`` in a source checkout: the reconcilers stay in the
    repository's top-level ``controllers/`` (docs/architecture.md, "The house"); the wheel
    ships that directory as ``gpustack_operator/controllers`` (pyproject.toml's
    force-include), where the ordinary import finds it first."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _CONTROLLERS or not (_SOURCE_CONTROLLERS / "__init__.py").is_file():
            return None
        return importlib.util.spec_from_file_location(
            fullname,
            _SOURCE_CONTROLLERS / "__init__.py",
            submodule_search_locations=[str(_SOURCE_CONTROLLERS)],
        )


sys.meta_path.append(_SourceControllers())
