"""Bearer-token authentication for the simulated API server (docs/simulator.md,
"Authentication and authorization").

Tokens come from a CSV file in the format of kube-apiserver's ``--token-auth-file``
(``token,user,uid,"group1,group2"``) with one addition: an optional fifth column of
``key=value`` pairs that become the user's ``extra`` (for example
``authentication.kubernetes.io/node-name=gpu-1``, the claim a node-bound ServiceAccount token
carries). As on a real server, every authenticated user is in ``system:authenticated``, a
ServiceAccount user ``system:serviceaccount:<ns>:<name>`` is also in ``system:serviceaccounts``
and ``system:serviceaccounts:<ns>``, and a request without a token is ``system:anonymous`` in
``system:unauthenticated``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "ADMIN",
    "ANONYMOUS",
    "NODE_NAME_EXTRA",
    "TokenAuthenticator",
    "TokenFileError",
    "UserInfo",
    "service_account_user",
    "with_implied_groups",
]

AUTHENTICATED: Final = "system:authenticated"
UNAUTHENTICATED: Final = "system:unauthenticated"
SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"
NODE_NAME_EXTRA: Final = "authentication.kubernetes.io/node-name"
"""The ``extra`` key of a ServiceAccount token bound to a Pod on a node (Kubernetes 1.32+)."""


class TokenFileError(ValueError):
    """The token file cannot be read or has a malformed line (the message says which)."""


@dataclass(frozen=True)
class UserInfo:
    """Who sent a request, as the authorizer and admission see it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def service_account(self) -> tuple[str, str] | None:
        """``(namespace, name)`` for a ServiceAccount user, else ``None``."""
        if not self.name.startswith(SERVICE_ACCOUNT_PREFIX):
            return None
        namespace, _, name = self.name.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
        return (namespace, name) if namespace and name else None


ANONYMOUS: Final = UserInfo("system:anonymous", groups=(UNAUTHENTICATED,))
ADMIN: Final = UserInfo("system:admin", groups=("system:masters", AUTHENTICATED))
"""Who writes while authentication is off, and through ``sim.store`` in Python."""


def with_implied_groups(name: str, groups: Iterable[str]) -> tuple[str, ...]:
    """*groups* plus those every authenticated (ServiceAccount) user is in."""
    out = list(dict.fromkeys(g for g in groups if g))
    implied = [AUTHENTICATED]
    if name.startswith(SERVICE_ACCOUNT_PREFIX):
        namespace = name.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")[0]
        implied = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED]
    out += [g for g in implied if g not in out]
    return tuple(out)


def service_account_user(
    namespace: str, name: str, *, node: str | None = None, uid: str = ""
) -> UserInfo:
    """The user a ServiceAccount token authenticates as (bound to *node* if given)."""
    user = f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"
    extra = {NODE_NAME_EXTRA: (node,)} if node else {}
    return UserInfo(user, uid, with_implied_groups(user, ()), extra)


class TokenAuthenticator:
    """Maps bearer tokens to users; see the module docstring."""

    def __init__(self) -> None:
        self._users: dict[str, UserInfo] = {}

    def add(
        self,
        token: str,
        name: str,
        *,
        uid: str = "",
        groups: Iterable[str] = (),
        extra: Mapping[str, Iterable[str]] | None = None,
    ) -> UserInfo:
        """Accept *token* for user *name* (implied groups added); returns the user."""
        if not token or not name:
            raise TokenFileError("a token and a user name are required")
        user = UserInfo(
            name,
            uid,
            with_implied_groups(name, groups),
            {k: tuple(v) for k, v in (extra or {}).items()},
        )
        self._users[token] = user
        return user

    def authenticate(self, token: str) -> UserInfo | None:
        """The user of *token*; ``None`` for an unknown token (the server answers 401)."""
        return self._users.get(token)

    @classmethod
    def from_file(cls, path: Path) -> TokenAuthenticator:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TokenFileError(f"cannot read the token file {path}: {exc}") from exc
        return cls.from_text(text, str(path))

    @classmethod
    def from_text(cls, text: str, where: str = "token file") -> TokenAuthenticator:
        """Parse ``token,user,uid[,"groups"[,"key=value,..."]]`` lines (``#`` comments)."""
        auth = cls()
        for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
            if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
                continue
            if len(row) < 3 or len(row) > 5:
                raise TokenFileError(
                    f'{where}:{number}: expected token,user,uid[,"groups"[,"key=value,..."]]'
                    f", got {len(row)} columns"
                )
            token, name, uid = (c.strip() for c in row[:3])
            groups = [g.strip() for g in row[3].split(",")] if len(row) > 3 else []
            extra: dict[str, list[str]] = {}
            for pair in row[4].split(",") if len(row) > 4 else []:
                key, sep, value = pair.strip().partition("=")
                if not sep or not key:
                    raise TokenFileError(f"{where}:{number}: extra {pair!r} is not key=value")
                extra.setdefault(key, []).append(value)
            try:
                auth.add(token, name, uid=uid, groups=groups, extra=extra)
            except TokenFileError as exc:
                raise TokenFileError(f"{where}:{number}: {exc}") from None
        return auth
