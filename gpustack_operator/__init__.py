"""gpustack-operator: node hardware -> Node Feature Discovery labels -> a Kueue scheduling chain."""

__version__ = "0.1.0"
"""The one place the version is written: the build reads it from here (pyproject.toml)."""

__all__ = ["__version__"]
