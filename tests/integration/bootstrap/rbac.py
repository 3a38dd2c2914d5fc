"""RBAC arithmetic for the proof test: rules expanded to grants, requests checked against them."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.integration.bootstrap.support import Request

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Grant:
    """One (verb, group, resource) a subject holds, cluster-wide or in one namespace."""

    verb: str
    group: str
    resource: str
    namespace: str | None  # None: granted by a ClusterRole through a ClusterRoleBinding

    def allows(self, request: Request) -> bool:
        if (request.verb, request.group) != (self.verb, self.group):
            return False
        if self.resource not in ("*", request.resource):  # "*": every resource of the group
            return False
        return self.namespace is None or request.namespace == self.namespace


def render_kustomization(kubectl: Path, directory: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize DIR`` as a list of objects."""
    out = subprocess.run(
        [str(kubectl), "kustomize", str(directory)], check=True, capture_output=True, text=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _expand(rules: Iterable[Mapping[str, Any]], namespace: str | None) -> set[Grant]:
    grants: set[Grant] = set()
    for rule in rules:
        for verb in rule.get("verbs") or []:
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    grants.add(Grant(verb, group, resource, namespace))
    return grants


def grants_of(objects: list[dict[str, Any]], account: str, account_ns: str) -> set[Grant]:
    """What the ServiceAccount *account* holds through the bindings among *objects*."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    grants: set[Grant] = set()
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = binding.get("subjects") or []
        if not any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == account
            and s.get("namespace") == account_ns
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        ns = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role_ns = ns if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        assert role is not None, f"{binding['kind']} {binding['metadata']['name']}: no {ref}"
        grants |= _expand(role.get("rules") or [], ns)
    return grants


def ungranted(requests: Iterable[Request], grants: set[Grant]) -> list[Request]:
    return sorted(
        (r for r in requests if not any(g.allows(r) for g in grants)),
        key=lambda r: (r.group, r.resource, r.verb, r.namespace or ""),
    )


def unused(
    grants: set[Grant],
    requests: set[Request],
    namespaced: Callable[[str, str], bool],
    system_namespace: str,
) -> list[Grant]:
    """Grants no request needed. A cluster-wide grant of a namespaced resource counts as
    used only by a request outside the system namespace (else a Role would do)."""
    out = []
    for grant in grants:
        used = [r for r in requests if grant.allows(r)]
        if grant.namespace is None:
            used = [
                r
                for r in used
                if r.namespace != system_namespace
                or not namespaced(r.group, r.resource.split("/")[0])
            ]
        if not used:
            out.append(grant)
    return sorted(out, key=lambda g: (g.group, g.resource, g.verb, g.namespace or ""))
