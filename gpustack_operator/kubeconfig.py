"""Find, check and connect with a kubeconfig; every failure is one line naming the file and the fix.

kr8s reads kubeconfigs without checking them: a garbage file surfaces as a yaml ``ParserError``
repr, an empty one as a ``TypeError``, a file without ``current-context`` as a bare
``KeyError``. Every command that talks to a cluster (``worker``, ``device-manager serve``,
``worker-gateway``, ``plan --kubeconfig``) goes through :func:`connect` instead, which checks
the file first and turns connection failures into the same one-line form
(docs/configuration.md, "Kubeconfig errors").
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import yaml

if TYPE_CHECKING:
    from gpustack_operator.runtime.client import Client

__all__ = [
    "IN_CLUSTER_TOKEN",
    "KubeconfigError",
    "Located",
    "choose_context",
    "connect",
    "describe_connect_error",
    "locate",
    "parse_kubeconfig_text",
    "read_kubeconfig_file",
]

IN_CLUSTER_TOKEN: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")

_PASS_ANOTHER: Final = "or pass another file with --kubeconfig"

_E = TypeVar("_E", bound=BaseException)


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
        """The value kr8s takes (``a:b`` for several files)."""
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
    """The context to pass to kr8s: *context* if the files have it, None when a file sets
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
    in_cluster_token: Path = IN_CLUSTER_TOKEN,
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
        if in_cluster_token.exists():
            return Located((), context)
        raise KubeconfigError(
            "no kubeconfig: --kubeconfig not given, KUBECONFIG unset, ~/.kube/config missing, "
            "and no in-cluster service account; pass --kubeconfig FILE or set KUBECONFIG"
        )
    configs = [read_kubeconfig_file(f) for f in files]
    located = Located(tuple(files), None)
    return Located(located.files, choose_context(configs, context, located.where))


def describe_connect_error(exc: BaseException, located: Located, server: str) -> str:
    """One line for a failed first request to *server* with the credentials of *located*."""
    where = located.where + (f" (context {located.context})" if located.context else "")
    fix_server = (
        "check the cluster's server address in the file and that the API server is up"
        if located.files
        else "check the Pod's network and the API server"
    )
    cert = _find_in_chain(exc, ssl.SSLCertVerificationError)
    if cert is not None:
        reason = getattr(cert, "verify_message", None) or "verification failed"
        return (
            f"{where}: the API server {server} presented a certificate that does not verify "
            f"({reason}); put the cluster's CA in certificate-authority-data (or "
            "certificate-authority) of the file, or fix the server address"
        )
    tls = _find_in_chain(exc, ssl.SSLError)
    if tls is not None:
        return (
            f"{where}: TLS with the API server {server} failed ({tls.reason or tls}); check the "
            "certificate-authority and client certificate data in the file"
        )
    from gpustack_operator.runtime.client import ApiError, ApiUnavailable

    if isinstance(exc, ApiUnavailable):
        cause = exc.__cause__ or exc.__context__
        detail = _first_line(cause) if cause is not None else _first_line(exc)
        return f"{where}: cannot reach the API server {server} ({detail}); {fix_server}"
    if isinstance(exc, ApiError) and exc.status in (401, 403):
        return (
            f"{where}: the API server {server} refused the credentials ({exc.status} "
            f"{exc.reason}); renew the token or client certificate in the file"
        )
    return (
        f"{where}: cannot use these credentials ({type(exc).__name__}: {_first_line(exc)}); "
        "check the cluster, user and context entries in the file"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _find_in_chain(exc: BaseException, kind: type[_E]) -> _E | None:
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kind):
            return current
        stack += [e for e in (current.__cause__, current.__context__) if e is not None]
        stack += list(getattr(current, "exceptions", ()))
    return None


def _server_of(configs_where: Located) -> str:
    """The server URL the chosen context points at ("" when it cannot be told)."""
    for file in configs_where.files:
        try:
            config = read_kubeconfig_file(file)
        except KubeconfigError:
            continue
        context_name = configs_where.context or config.get("current-context")
        contexts = {
            c.get("name"): c.get("context") or {}
            for c in config.get("contexts") or []
            if isinstance(c, Mapping)
        }
        cluster_name = (contexts.get(context_name) or {}).get("cluster")
        for cluster in config.get("clusters") or []:
            if isinstance(cluster, Mapping) and cluster.get("name") == cluster_name:
                return str((cluster.get("cluster") or {}).get("server") or "")
    return ""


async def connect(
    kubeconfig: str | Path | None,
    context: str | None,
    **options: Any,
) -> Client:
    """A connected :class:`~gpustack_operator.runtime.client.Client`; raises
    :class:`KubeconfigError` with one line for every way the credentials can fail.

    *options* go to ``Client.connect`` (qps, burst, timeout).
    """
    from gpustack_operator.runtime import client as runtime_client

    located = locate(kubeconfig, context)
    try:
        return await runtime_client.Client.connect(located.kubeconfig, located.context, **options)
    except Exception as exc:
        server = _server_of(located) or "(in-cluster)"
        raise KubeconfigError(describe_connect_error(exc, located, server)) from exc
