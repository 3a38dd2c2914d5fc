"""Find and check kubeconfig files as kubectl does before kr8s reads them; every failure is
one line naming the file and the fix (docs/configuration.md, "Kubeconfig errors").

What kr8s 0.20 lacks and this covers: its ``KubeConfigSet`` silently drops a file it cannot
parse (a garbage, empty or unreadable file is skipped, and with none left the message is "No
valid kubeconfig provided"), and an unknown context is "No such context X", naming neither the
files nor the contexts they have. :func:`locate` checks the files first, so every such failure
names the file and the fix; :mod:`.credentials` then hands the chosen files and context to kr8s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "KubeconfigError",
    "Located",
    "choose_context",
    "locate",
    "parse_kubeconfig_text",
    "read_kubeconfig_file",
]

SERVICE_ACCOUNT_DIR: Path = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""The in-cluster service account's files (``token``, ``ca.crt``); read at each call, so a
test can point it elsewhere."""

_PASS_ANOTHER: Final = "or pass another file with --kubeconfig"


class KubeconfigError(ValueError):
    """A kubeconfig cannot be used; ``str()`` is one line naming the file and the fix."""


@dataclass(frozen=True)
class Located:
    """Where credentials come from: kubeconfig files (None: the in-cluster service account)."""

    files: tuple[Path, ...]
    context: str | None
    """The context to select, or None for the file's current-context."""

    @property
    def where(self) -> str:
        if not self.files:
            return "in-cluster service account"
        return "kubeconfig " + ":".join(str(f) for f in self.files)

    @property
    def kubeconfig(self) -> str | None:
        """The value ``Client.connect`` takes (``a:b`` for several files)."""
        return ":".join(str(f) for f in self.files) if self.files else None


def parse_kubeconfig_text(text: str, where: str) -> Mapping[str, Any]:
    """Parse one kubeconfig document; *where* names it in the error ("kubeconfig /path")."""
    if not text.strip():
        raise KubeconfigError(
            f"{where}: the file is empty; write a kubeconfig into it (for example "
            f"`kubectl config view --raw > FILE`) {_PASS_ANOTHER}"
        )
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeconfigError(
            f"{where}: not YAML ({_yaml_problem(exc)}); fix the file {_PASS_ANOTHER}"
        ) from None
    if document is None:
        raise KubeconfigError(
            f"{where}: the file holds no document; write a kubeconfig into it {_PASS_ANOTHER}"
        )
    if not isinstance(document, Mapping):
        raise KubeconfigError(
            f"{where}: expected a kubeconfig (a mapping with clusters, users and contexts), "
            f"got a YAML {type(document).__name__}; fix the file {_PASS_ANOTHER}"
        )
    for key in ("clusters", "contexts"):
        if not isinstance(document.get(key), list) or not document[key]:
            raise KubeconfigError(
                f"{where}: it has no '{key}' list; a kubeconfig needs clusters and contexts "
                f"(see `kubectl config view`), fix the file {_PASS_ANOTHER}"
            )
    return document


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def read_kubeconfig_file(path: Path) -> Mapping[str, Any]:
    """Read and parse the kubeconfig at *path*."""
    where = f"kubeconfig {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KubeconfigError(
            f"{where}: no such file; pass an existing kubeconfig with --kubeconfig or "
            "KUBECONFIG (`gpustack-operator sim --serve` writes one for the simulated cluster)"
        ) from None
    except IsADirectoryError:
        raise KubeconfigError(
            f"{where}: is a directory, not a file; pass the kubeconfig file inside it with "
            "--kubeconfig"
        ) from None
    except PermissionError:
        raise KubeconfigError(
            f"{where}: cannot read it (permission denied); let this user read it "
            f"(chmod/chown, or mount it readable in the Pod) {_PASS_ANOTHER}"
        ) from None
    except UnicodeDecodeError:
        raise KubeconfigError(
            f"{where}: not text (not UTF-8); point --kubeconfig at the kubeconfig, not a "
            "binary file"
        ) from None
    except OSError as exc:
        raise KubeconfigError(
            f"{where}: cannot read it ({exc.strerror or exc}); fix the path {_PASS_ANOTHER}"
        ) from None
    return parse_kubeconfig_text(text, where)


def _context_names(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    for config in configs:
        for item in config.get("contexts") or []:
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                names.append(item["name"])
    return names


def choose_context(
    configs: Sequence[Mapping[str, Any]], context: str | None, where: str
) -> str | None:
    """The context to select: *context* if the files have it, None when a file sets
    ``current-context`` (kubectl's rule: the first file that sets it wins), the only context
    when there is just one. Anything else is an error that lists the choices."""
    names = _context_names(configs)
    listed = ", ".join(names) or "none"
    if context is not None:
        if context not in names:
            raise KubeconfigError(
                f"{where}: no context {context!r} (it has: {listed}); pass one of those with "
                "--context"
            )
        return context
    current = next((c.get("current-context") for c in configs if c.get("current-context")), None)
    if current:
        if current not in names:
            raise KubeconfigError(
                f"{where}: current-context {current!r} names no context (it has: {listed}); "
                f"pass --context NAME or run `kubectl config use-context NAME --kubeconfig FILE`"
            )
        return None
    if len(names) == 1:
        return names[0]
    raise KubeconfigError(
        f"{where}: no current-context and several contexts ({listed}); pass --context NAME "
        "or run `kubectl config use-context NAME --kubeconfig FILE`"
    )


def locate(
    kubeconfig: str | Path | None,
    context: str | None,
    *,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
    in_cluster_token: Path | None = None,
) -> Located:
    """Pick and check the kubeconfig as kubectl does: ``--kubeconfig``, else ``KUBECONFIG``
    (files that do not exist are skipped, as kubectl does), else ``~/.kube/config``, else the
    in-cluster service account. Raises :class:`KubeconfigError`."""
    env = os.environ if env is None else env
    if kubeconfig is not None:
        files = [Path(p).expanduser() for p in str(kubeconfig).split(os.pathsep) if p]
    elif env.get("KUBECONFIG"):
        listed = [Path(p).expanduser() for p in env["KUBECONFIG"].split(os.pathsep) if p]
        files = [p for p in listed if p.exists()]
        if not files:
            raise KubeconfigError(
                f"kubeconfig {env['KUBECONFIG']} (from KUBECONFIG): no such file; fix "
                "KUBECONFIG or pass an existing kubeconfig with --kubeconfig"
            )
    else:
        default = (home if home is not None else Path.home()) / ".kube" / "config"
        files = [default] if default.exists() else []
    if not files:
        if (in_cluster_token or SERVICE_ACCOUNT_DIR / "token").exists():
            return Located((), context)
        raise KubeconfigError(
            "no kubeconfig: --kubeconfig not given, KUBECONFIG unset, ~/.kube/config missing, "
            "and no in-cluster service account; pass --kubeconfig FILE or set KUBECONFIG"
        )
    configs = [read_kubeconfig_file(f) for f in files]
    located = Located(tuple(files), None)
    return Located(located.files, choose_context(configs, context, located.where))
