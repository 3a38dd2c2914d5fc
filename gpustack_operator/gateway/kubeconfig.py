"""Checks on kubeconfig documents, before the client reads credentials from them.

Used for files named on the command line (read at each connection attempt, so a fixed file
is picked up) and for kubeconfigs posted to the registration endpoint, which must also carry
their credentials inline.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import yaml

from gpustack_operator.kubeconfig import KubeconfigError, read_kubeconfig_file

__all__ = [
    "ConfigError",
    "check_allowed_server",
    "check_context",
    "check_inline_credentials",
    "context_names",
    "context_server",
    "normalize_server",
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
    for item in config.get("clusters") or []:
        body = item.get("cluster") if isinstance(item, Mapping) else None
        if isinstance(body, Mapping) and body.get("proxy-url"):
            raise ConfigError(
                f"cluster {item.get('name')!r} uses 'proxy-url': a registered kubeconfig must "
                "reach its API server directly; remove 'proxy-url' (the gateway would send its "
                "credentials through a proxy the client chose)"
            )


def normalize_server(url: str) -> str:
    """``scheme://host:port[/path]`` in lower case with the default port made explicit, so
    equal servers compare equal; :class:`ConfigError` for a URL without scheme or host."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"server {url!r} is not an http(s)://HOST[:PORT] URL")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise ConfigError(f"server {url!r} has an invalid port") from exc
    host = parts.hostname.lower()
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}"


def context_server(config: Mapping[str, Any], context: str | None) -> str | None:
    """The ``server`` of the cluster that *context* (or the current context) selects."""
    name = context or config.get("current-context")
    contexts = {
        item.get("name"): item.get("context") or {}
        for item in config.get("contexts") or []
        if isinstance(item, Mapping)
    }
    selected = contexts.get(name)
    if not isinstance(selected, Mapping):
        return None
    for item in config.get("clusters") or []:
        if isinstance(item, Mapping) and item.get("name") == selected.get("cluster"):
            body = item.get("cluster")
            server = body.get("server") if isinstance(body, Mapping) else None
            return server if isinstance(server, str) else None
    return None


def check_allowed_server(
    config: Mapping[str, Any], context: str | None, allowed: Collection[str]
) -> None:
    """Refuse a kubeconfig whose selected server is not in *allowed* (normalized URLs)."""
    server = context_server(config, context)
    if server is None:
        raise ConfigError("the selected context names no cluster with a 'server'")
    if normalize_server(server) not in allowed:
        raise ConfigError(
            f"server {server!r} is not allowed for registration: the gateway accepts the "
            "servers of its static clusters and those given with "
            "--allowed-registration-server (allowed now: "
            f"{', '.join(sorted(allowed)) or 'none'})"
        )
