"""Who the client is and how it reaches the API server, as kr8s reads it.

kr8s's ``KubeAuth`` reads the kubeconfig (the files, the context, the cluster's server and CA,
client certificates, a static token, an exec credential plugin) or the in-cluster service
account; :class:`Credentials` is that object, so the runtime's aiohttp transport and kr8s's
own objects (``queues``) share one set of credentials. It adds only what kr8s 0.20 lacks
(docs/runtime.md, "Credentials"), each beside the limit it covers:

- ``user.tokenFile``: kr8s ignores the field; it is read here, and again once a minute;
- the service-account token: kr8s reads it only when it authenticates again (after a 401);
  here it is read again once a minute too, as client-go does;
- a client certificate without a CA: kr8s's TLS context then trusts no CA at all; here the
  system's CAs, as client-go does;
- errors: kr8s raises bare ``ValueError``/``KeyError``/``RuntimeError``; here one line that
  names the kubeconfig and the fix (:class:`CredentialError`).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import anyio
from kr8s._auth import KubeAuth

from . import kubeconfigfiles
from .kubeconfigfiles import KubeconfigError, locate

__all__ = ["TOKEN_REREAD_SECONDS", "CredentialError", "Credentials", "load_credentials"]

TOKEN_REREAD_SECONDS: Final = 60.0
"""How often a token file is read again (client-go's cached file token source: one minute)."""


class CredentialError(KubeconfigError):
    """Credentials cannot be loaded or refreshed; ``str()`` names what and the fix."""


class Credentials(KubeAuth):
    """kr8s's credentials plus a token file re-read once a minute.

    :meth:`authorization` is called before every request and costs one comparison unless a
    token file is due for a re-read; :attr:`tls_generation` changes whenever the credentials
    are read again (a rotated client certificate), so the client builds a new transport.
    """

    def __init__(
        self,
        kubeconfig: str | None,
        context: str | None,
        *,
        where: str,
        service_account: Path,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            kubeconfig=kubeconfig, context=context, serviceaccount=str(service_account)
        )
        if kubeconfig is None:
            # The in-cluster service account only (kr8s would try KUBECONFIG and
            # ~/.kube/config first; kubeconfigfiles.locate already found neither).
            self._kubeconfig_path_or_dict = False  # type: ignore[assignment]  # kr8s's "none"
        self.where = where
        self.tls_generation = 0
        self._service_account_token = service_account / "token" if kubeconfig is None else None
        self._token_file: Path | None = None
        self._clock = clock
        self._due: float | None = None
        """When (``clock()``) the token file must be read again; None: only after a 401."""
        self._reread_lock = anyio.Lock()

    # --- what the runtime asks --------------------------------------------------------------

    async def authorization(self) -> str | None:
        """The ``Authorization`` header value for the next request (None: send none)."""
        if self._due is not None and self._clock() >= self._due:
            async with self._reread_lock:
                if self._due is not None and self._clock() >= self._due:
                    self._read_token_file()
        return f"Bearer {self.token}" if self.token else None

    async def ssl_context(self) -> ssl.SSLContext | bool:
        """kr8s's TLS context (True: the system's CAs), with the system's CAs added where a
        client certificate comes without a CA (kr8s then trusts none)."""
        try:
            context: ssl.SSLContext | bool = await super().ssl_context()  # type: ignore[no-untyped-call]
        except (OSError, ssl.SSLError) as exc:
            raise CredentialError(
                f"{self.where}: cannot load the CA or the client certificate and key ({exc}); "
                "check certificate-authority(-data) and client-certificate(-data)/"
                "client-key(-data)"
            ) from None
        if (
            isinstance(context, ssl.SSLContext)
            and not self.server_ca_file
            and not self._insecure_skip_tls_verify
        ):
            context.load_default_certs()
        return context

    async def reauthenticate(self) -> None:
        """Read everything again through kr8s (the kubeconfig, an exec plugin's credential,
        the service-account token), then the token file; kr8s calls it after a 401 too."""
        try:
            await super().reauthenticate()
        except CredentialError:
            raise
        except Exception as exc:
            raise CredentialError(self._explain(exc)) from None
        self._token_file = self._token_file_of_user()
        if self._token_file is not None:
            self._read_token_file()
        self.tls_generation += 1

    async def load(self) -> None:
        """Read the credentials for the first time."""
        await self.reauthenticate()

    # --- what kr8s lacks --------------------------------------------------------------------

    def _token_file_of_user(self) -> Path | None:
        """``user.tokenFile`` (relative to the kubeconfig with the context, the file kr8s
        resolves other relative paths against), else the service-account token."""
        if self._service_account_token is not None:
            return self._service_account_token
        user: dict[str, Any] = self._user or {}
        value = user.get("tokenFile")
        if not value:
            return None
        path = Path(str(value)).expanduser()
        if path.is_absolute():
            return path
        return Path(str(self.kubeconfig.get_path(self.active_context))).parent / path

    def _read_token_file(self) -> None:
        assert self._token_file is not None
        try:
            self.token = self._token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialError(
                f"{self.where}: cannot read the token file {self._token_file} ({exc}); make it "
                "readable or fix tokenFile"
            ) from None
        self._due = self._clock() + TOKEN_REREAD_SECONDS

    def _explain(self, exc: Exception) -> str:
        """One line for what kr8s raised, naming the kubeconfig and the fix."""
        said = str(exc).strip().splitlines()
        detail = f"{type(exc).__name__}: {said[-1] if said else ''}".rstrip(": ")
        user: dict[str, Any] = self._user or {}
        if isinstance(user.get("auth-provider"), dict):
            provider = user["auth-provider"].get("name", "?")
            return (
                f"{self.where}: the user uses auth-provider {provider!r}, which is not "
                f"supported ({detail}); switch it to an exec credential plugin (user.exec), as "
                "kubectl itself requires since Kubernetes 1.26"
            )
        if isinstance(user.get("exec"), dict):
            command = user["exec"].get("command")
            hint = str(user["exec"].get("installHint") or "").strip()
            return f"{self.where}: the exec credential plugin {command!r} failed ({detail}); " + (
                hint or "run it by hand to see why (for example an expired login)"
            )
        if self._service_account_token is not None:
            return (
                f"{self.where}: cannot read it ({detail}); run in a Pod with its service "
                "account token mounted, or pass --kubeconfig FILE or set KUBECONFIG"
            )
        return (
            f"{self.where}: cannot read the credentials ({detail}); check the cluster, user "
            "and context entries in the file"
        )


async def load_credentials(
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    *,
    service_account: Path | None = None,
) -> Credentials:
    """Credentials from *kubeconfig* (``a:b`` for several files), else ``KUBECONFIG``, else
    ``~/.kube/config``, else the in-cluster service account; *context* picks a kubeconfig
    context. The files are checked first (one-line errors, ``kubeconfigfiles``), then kr8s
    reads them. Raises :class:`KubeconfigError` (and its :class:`CredentialError`)."""
    account = service_account or kubeconfigfiles.SERVICE_ACCOUNT_DIR
    located = locate(kubeconfig, context, in_cluster_token=account / "token")
    credentials = Credentials(
        located.kubeconfig,
        located.context,
        where=located.where + (f" (context {located.context})" if located.context else ""),
        service_account=account,
    )
    await credentials.load()
    return credentials
