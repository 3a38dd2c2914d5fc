"""Which clusters to serve: ``--cluster`` flags, a config file, or every context of a kubeconfig.

All parsing errors raise :class:`ConfigError` with a message that names the input and says
what is expected, so the command can print it and exit 2.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from gpustack_operator.gateway.cluster import ClusterSpec
from gpustack_operator.gateway.kubeconfig import ConfigError, context_names, read_kubeconfig

__all__ = [
    "ConfigError",
    "check_name",
    "collect_clusters",
    "kubeconfig_contexts",
    "load_config_file",
    "parse_cluster_flag",
]

# Cluster names appear in URL paths: letters, digits and "-_.@", like kubeconfig context names.
_NAME: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.@-]{0,251}[A-Za-z0-9])?")


def check_name(name: str) -> str:
    """*name* if it can name a cluster in URLs, else :class:`ConfigError`."""
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"invalid cluster name {name!r}: use 1-253 letters, digits, '-', '_', '.', '@', "
            "starting and ending with a letter or digit"
        )
    return name


def parse_cluster_flag(value: str) -> ClusterSpec:
    """``NAME=KUBECONFIG[:CONTEXT]``; the context follows the last ``:``."""
    name, sep, rest = value.partition("=")
    if not sep or not rest:
        raise ConfigError(f"--cluster {value!r}: expected NAME=KUBECONFIG[:CONTEXT]")
    path, colon, context = rest.rpartition(":")
    if not colon:
        path, context = rest, ""
    if not path:
        raise ConfigError(f"--cluster {value!r}: the kubeconfig path is empty")
    return ClusterSpec(check_name(name.strip()), Path(path).expanduser(), context or None)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def load_config_file(path: Path) -> list[ClusterSpec]:
    """A YAML file ``clusters: [{name, kubeconfig, context?}]``; relative paths are relative to
    the file."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read the gateway config {path}: {exc}") from exc
    clusters = _mapping(document, str(path)).get("clusters")
    if not isinstance(clusters, list):
        raise ConfigError(f"{path}: expected a list under 'clusters'")
    specs: list[ClusterSpec] = []
    for index, item in enumerate(clusters):
        where = f"{path}: clusters[{index}]"
        entry = _mapping(item, where)
        name, kubeconfig, context = entry.get("name"), entry.get("kubeconfig"), entry.get("context")
        if not isinstance(name, str):
            raise ConfigError(f"{where}: 'name' is required")
        if not isinstance(kubeconfig, str) or not kubeconfig:
            raise ConfigError(f"{where}: 'kubeconfig' (a path) is required")
        if context is not None and not isinstance(context, str):
            raise ConfigError(f"{where}: 'context' must be a string")
        file = Path(kubeconfig).expanduser()
        if not file.is_absolute():
            file = path.parent / file
        specs.append(ClusterSpec(check_name(name), file, context or None))
    return specs


def kubeconfig_contexts(path: Path) -> list[ClusterSpec]:
    """One cluster per context of the kubeconfig *path*, named after the context."""
    names = context_names(read_kubeconfig(path))
    if not names:
        raise ConfigError(f"{path}: the kubeconfig has no named contexts")
    return [ClusterSpec(check_name(name), path, name) for name in names]


def collect_clusters(
    flags: Iterable[str] = (),
    config_file: Path | None = None,
    kubeconfig: Path | None = None,
) -> list[ClusterSpec]:
    """Every cluster from the three sources; a name given twice is an error."""
    specs = [parse_cluster_flag(value) for value in flags]
    if config_file is not None:
        specs += load_config_file(config_file)
    if kubeconfig is not None:
        specs += kubeconfig_contexts(kubeconfig)
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise ConfigError(f"cluster {spec.name!r} is listed twice: names must be unique")
        seen.add(spec.name)
    return specs
