"""gpustack-operator: node hardware -> Node Feature Discovery labels -> a Kueue scheduling chain."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpustack-operator")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
