"""Checks on kubeconfig documents, before kr8s reads them (its errors are bare KeyErrors).

Used for files named on the command line (read at each connection attempt, so a fixed file
is picked up) and for kubeconfigs posted to the registration endpoint, which must also carry
their credentials inline.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from gpustack_operator.kubeconfig import KubeconfigError, read_kubeconfig_file

__all__ = [
    "ConfigError",
    "check_context",
    "check_inline_credentials",
    "context_names",
    "parse_kubeconfig",
    "read_kubeconfig",
]

# Fields that would make the gateway read local files or run programs.
_FORBIDDEN_USER_FIELDS: Final = (
    "exec",
    "auth-provider",
    "tokenFile",
    "client-certificate",
    "client-key",
)
_FORBIDDEN_CLUSTER_FIELDS: Final = ("certificate-authority",)


class ConfigError(ValueError):
    """A cluster list or kubeconfig is invalid (the message says where and how to fix it)."""


def parse_kubeconfig(text: str, where: str = "kubeconfig") -> Mapping[str, Any]:
    """Parse a kubeconfig document (YAML or JSON) and check it lists clusters and contexts."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{where}: not YAML or JSON ({first}); fix the document") from None
    if not isinstance(document, Mapping):
        raise ConfigError(f"{where}: expected a kubeconfig mapping, got {type(document).__name__}")
    for key in ("clusters", "contexts"):
        if not isinstance(document.get(key), list) or not document[key]:
            raise ConfigError(f"{where}: a kubeconfig needs a non-empty '{key}' list")
    return document


def read_kubeconfig(path: Path) -> Mapping[str, Any]:
    """The kubeconfig file *path*, checked as every command checks one (one-line errors)."""
    try:
        return read_kubeconfig_file(path)
    except KubeconfigError as exc:
        raise ConfigError(str(exc)) from None


def context_names(config: Mapping[str, Any]) -> list[str]:
    return [
        str(item["name"])
        for item in config.get("contexts") or []
        if isinstance(item, Mapping) and isinstance(item.get("name"), str)
    ]


def check_context(config: Mapping[str, Any], context: str | None, where: str) -> str | None:
    """The context to use: *context* if the file has it; else the current context; else the
    only one. Raises :class:`ConfigError` when none can be chosen."""
    names = context_names(config)
    if context is not None:
        if context not in names:
            raise ConfigError(
                f"{where}: no context {context!r} (it has: {', '.join(names) or 'none'})"
            )
        return context
    if config.get("current-context"):
        return None
    if len(names) == 1:
        return names[0]
    raise ConfigError(
        f"{where}: several contexts and no current-context: name one "
        "(NAME=KUBECONFIG:CONTEXT, or ?context= when registering)"
    )


def check_inline_credentials(config: Mapping[str, Any]) -> None:
    """Refuse a kubeconfig that points at local files or runs a credential plugin."""
    for section, field_name, forbidden in (
        ("users", "user", _FORBIDDEN_USER_FIELDS),
        ("clusters", "cluster", _FORBIDDEN_CLUSTER_FIELDS),
    ):
        for item in config.get(section) or []:
            body = item.get(field_name) if isinstance(item, Mapping) else None
            if not isinstance(body, Mapping):
                continue
            for key in forbidden:
                if body.get(key):
                    raise ConfigError(
                        f"{section[:-1]} {item.get('name')!r} uses {key!r}: a registered "
                        "kubeconfig must carry its credentials inline (token, "
                        "client-certificate-data, certificate-authority-data); file paths and "
                        "credential plugins are refused"
                    )
