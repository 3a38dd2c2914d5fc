"""RBAC authorization for the simulated API server, with the real authorizer's semantics
(docs/simulator.md, "Authentication and authorization"; docs/security.md cites the sources).

- :func:`request_attributes` turns a request into what RBAC sees: a verb (``get``/``list``/
  ``watch``/``create``/``update``/``patch``/``delete``/``deletecollection``, or the lower-case
  method for non-resource paths), API group, resource, subresource, namespace and name; a
  list or watch with ``fieldSelector=metadata.name=X`` is authorized for the name ``X``.
- :func:`rule_allows`: verbs and apiGroups match exactly or by ``*``; resources match
  ``*``, ``resource``, ``resource/subresource`` or ``*/subresource``; a rule with
  ``resourceNames`` matches only requests that name one of them (never create, list or
  watch without a name); ``nonResourceURLs`` match exactly, by ``*``, or by a prefix ending
  in ``*``.
- :class:`RbacAuthorizer` collects the rules of every ClusterRoleBinding (cluster-wide) and
  every RoleBinding of the request's namespace whose subjects name the user, one of its
  groups or its ServiceAccount. ClusterRoles with an ``aggregationRule`` hold the rules of
  the ClusterRoles its selectors match. ``system:masters`` is allowed everything; every user
  may read the health and version paths, authenticated users the discovery paths and may
  create the self reviews (the defaults a real cluster binds: system:public-info-viewer,
  system:discovery, system:basic-user).
- :meth:`RbacAuthorizer.admit` prevents escalation through RBAC objects: a Role or
  ClusterRole may be created or updated only by a user who holds every permission in it (at
  the object's scope) or may ``escalate`` it; a binding only by a user who holds every
  permission of the referenced role (at the binding's scope) or may ``bind`` it; the
  ``roleRef`` of a binding never changes; an ``aggregationRule`` needs ``escalate``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Final

from gpustack_operator.domain.selectors import selector_matches as label_selector_matches
from gpustack_sim.apiserver.authn import AUTHENTICATED, UserInfo
from gpustack_sim.apiserver.errors import ApiError, invalid
from gpustack_sim.apiserver.kinds import KindInfo
from gpustack_sim.apiserver.store import Store

__all__ = [
    "CURRENT_REQUEST",
    "Attributes",
    "RbacAuthorizer",
    "covers",
    "label_selector_matches",
    "request_attributes",
    "rule_allows",
]

JSON = dict[str, Any]
RBAC_GROUP: Final = "rbac.authorization.k8s.io"
SUPERUSER_GROUP: Final = "system:masters"
_NAMESPACE_SUBRESOURCES: Final = frozenset({"status", "finalize"})
_GC_ONLY_FIELDS: Final = ("ownerReferences", "finalizers")
_VOLATILE_META: Final = (
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
)

# What a real cluster binds by default: system:public-info-viewer to every user,
# system:discovery to system:authenticated.
_PUBLIC_INFO: Final[JSON] = {
    "verbs": ["get"],
    "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
}
_DISCOVERY: Final[JSON] = {
    "verbs": ["get"],
    "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*"],
}

# system:basic-user, bound to system:authenticated: a user may ask what it is and may do.
_BASIC_USER: Final[tuple[JSON, ...]] = (
    {
        "verbs": ["create"],
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
    },
    {
        "verbs": ["create"],
        "apiGroups": ["authentication.k8s.io"],
        "resources": ["selfsubjectreviews"],
    },
)


@dataclass(frozen=True)
class Attributes:
    """What the authorizer decides on (kube's ``authorizer.Attributes``)."""

    user: UserInfo
    verb: str
    path: str
    resource_request: bool
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def describe(self) -> str:
        """The message kube-apiserver answers a denial with."""
        who = f'User "{self.user.name}"'
        if not self.resource_request:
            return f'forbidden: {who} cannot {self.verb} path "{self.path}"'
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        subject = f"{self.resource}.{self.api_group}" if self.api_group else self.resource
        named = f' "{self.name}"' if self.name else ""
        scope = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return (
            f'{subject}{named} is forbidden: {who} cannot {self.verb} resource "{resource}" '
            f'in API group "{self.api_group}" {scope}'
        )


CURRENT_REQUEST: ContextVar[Attributes | None] = ContextVar("sim_current_request", default=None)
"""The authorized request being handled; ``None`` for the simulator's own writes."""


def request_attributes(
    method: str, path: str, query: Mapping[str, str], user: UserInfo
) -> Attributes:
    """Parse a request as kube-apiserver's RequestInfoFactory does (module docstring)."""
    parts = [p for p in path.split("/") if p]
    rest: list[str] = []
    group = ""
    if len(parts) >= 3 and parts[0] == "api":
        rest = parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    if not rest:
        verb = method.lower()
        return Attributes(user, verb, path, resource_request=False)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    verb = {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }.get(method, "get")
    if verb == "get" and not name:
        verb = "list"
    if verb == "list" and query.get("watch", "").lower() in ("true", "1"):
        verb = "watch"
    if verb in ("list", "watch") and not name:
        name = _name_from_field_selector(query.get("fieldSelector", ""))
    return Attributes(user, verb, path, True, group, resource, subresource, namespace, name)


def _name_from_field_selector(selector: str) -> str:
    for term in selector.split(","):
        key, sep, value = term.partition("=")
        if sep and key.strip() == "metadata.name":
            return value.lstrip("=").strip()
    return ""


# --- rule matching (rbac/v1 evaluation helpers) ---------------------------------------------


def _has(values: Sequence[str] | None, wanted: str, *, star: str = "*") -> bool:
    return bool(values) and (star in values or wanted in values)  # type: ignore[operator]


def _resource_matches(resources: Sequence[str], combined: str, subresource: str) -> bool:
    for rule_resource in resources:
        if rule_resource in ("*", combined):
            return True
        if subresource and rule_resource == f"*/{subresource}":
            return True
    return False


def _url_matches(urls: Sequence[str], path: str) -> bool:
    for url in urls:
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    """Does one PolicyRule allow the request (module docstring)?"""
    if not _has(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.resource_request:
        return _url_matches(rule.get("nonResourceURLs") or [], attrs.path)
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    names = rule.get("resourceNames") or []
    return (
        _has(rule.get("apiGroups"), attrs.api_group)
        and _resource_matches(rule.get("resources") or [], combined, attrs.subresource)
        and (not names or attrs.name in names)
    )


# --- coverage (escalation checks) -----------------------------------------------------------


def _breakdown(rule: Mapping[str, Any]) -> Iterator[JSON]:
    """One sub-rule per (group, resource, verb[, resourceName]) or (url, verb)."""
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in rule.get("verbs") or []:
                names = rule.get("resourceNames") or []
                for name in names or [None]:
                    sub: JSON = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                    if name is not None:
                        sub["resourceNames"] = [name]
                    yield sub
    for url in rule.get("nonResourceURLs") or []:
        for verb in rule.get("verbs") or []:
            yield {"nonResourceURLs": [url], "verbs": [verb]}


def _has_all(values: Sequence[str], wanted: Sequence[str]) -> bool:
    return set(wanted) <= set(values)


def _resources_cover(owned: Sequence[str], wanted: Sequence[str]) -> bool:
    if "*" in owned or _has_all(owned, wanted):
        return True
    for path in wanted:
        if path in owned:
            continue
        if "/" not in path or f"*/{path.split('/', 1)[1]}" not in owned:
            return False
    return True


def _urls_cover(owned: Sequence[str], wanted: Sequence[str]) -> bool:
    return all(
        any(o == w or (o.endswith("*") and w.startswith(o.rstrip("*"))) for o in owned)
        for w in wanted
    )


def _rule_covers(owner: Mapping[str, Any], sub: Mapping[str, Any]) -> bool:
    owner_verbs = owner.get("verbs") or []
    owner_groups = owner.get("apiGroups") or []
    owner_names = owner.get("resourceNames") or []
    sub_names = sub.get("resourceNames") or []
    names_ok = (
        not owner_names if not sub_names else not owner_names or _has_all(owner_names, sub_names)
    )
    return (
        ("*" in owner_verbs or _has_all(owner_verbs, sub.get("verbs") or []))
        and ("*" in owner_groups or _has_all(owner_groups, sub.get("apiGroups") or []))
        and _resources_cover(owner.get("resources") or [], sub.get("resources") or [])
        and _urls_cover(owner.get("nonResourceURLs") or [], sub.get("nonResourceURLs") or [])
        and names_ok
    )


def covers(
    owner_rules: Iterable[Mapping[str, Any]], rules: Iterable[Mapping[str, Any]]
) -> list[JSON]:
    """The sub-rules of *rules* no owner rule covers (empty: the owner holds them all)."""
    owned = list(owner_rules)
    return [
        sub
        for rule in rules
        for sub in _breakdown(rule)
        if not any(_rule_covers(owner, sub) for owner in owned)
    ]


# --- the authorizer --------------------------------------------------------------------------


def _applies_to(subject: Mapping[str, Any], user: UserInfo, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.service_account == (namespace, name)
    return False


class RbacAuthorizer:
    """Authorizes requests from the Roles, ClusterRoles and bindings in *store*."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.denials: deque[str] = deque(maxlen=1000)
        """The messages of the latest refusals (403s), for tests and troubleshooting."""

    def _objects(self, plural: str, namespace: str | None = None) -> list[JSON]:
        info = self.store.registry.lookup(RBAC_GROUP, "v1", plural)
        if info is None:
            return []
        objects = self.store.resource(info).objects
        return [o for (ns, _), o in objects.items() if namespace is None or ns == namespace]

    def _cluster_role(self, name: str) -> JSON | None:
        info = self.store.registry.lookup(RBAC_GROUP, "v1", "clusterroles")
        return None if info is None else self.store.resource(info).objects.get(("", name))

    def _cluster_role_rules(self, role: Mapping[str, Any]) -> list[JSON]:
        aggregation = role.get("aggregationRule")
        if not aggregation:
            return list(role.get("rules") or [])
        rules: list[JSON] = []
        selectors = aggregation.get("clusterRoleSelectors") or []
        for other in self._objects("clusterroles"):
            if other.get("aggregationRule"):
                continue
            labels = (other.get("metadata") or {}).get("labels") or {}
            if any(label_selector_matches(s, labels) for s in selectors):
                rules += other.get("rules") or []
        return rules

    def role_ref_rules(self, ref: Mapping[str, Any], namespace: str) -> list[JSON] | None:
        """The rules a roleRef names (``None``: no such role)."""
        if ref.get("kind") == "ClusterRole":
            role = self._cluster_role(str(ref.get("name")))
            return None if role is None else self._cluster_role_rules(role)
        info = self.store.registry.lookup(RBAC_GROUP, "v1", "roles")
        key = (namespace, str(ref.get("name") or ""))
        stored = None if info is None else self.store.resource(info).objects.get(key)
        return None if stored is None else list(stored.get("rules") or [])

    def rules_for(self, user: UserInfo, namespace: str) -> list[JSON]:
        """Every rule that applies to *user* in *namespace* ("": cluster-wide only)."""
        rules: list[JSON] = [_PUBLIC_INFO]
        if AUTHENTICATED in user.groups:
            rules += [_DISCOVERY, *_BASIC_USER]
        for binding in self._objects("clusterrolebindings"):
            if any(_applies_to(s, user, "") for s in binding.get("subjects") or []):
                rules += self.role_ref_rules(binding.get("roleRef") or {}, "") or []
        if namespace:
            for binding in self._objects("rolebindings", namespace):
                if any(_applies_to(s, user, namespace) for s in binding.get("subjects") or []):
                    rules += self.role_ref_rules(binding.get("roleRef") or {}, namespace) or []
        return rules

    def allowed(self, attrs: Attributes) -> bool:
        if SUPERUSER_GROUP in attrs.user.groups:
            return True
        return any(rule_allows(r, attrs) for r in self.rules_for(attrs.user, attrs.namespace))

    def authorize(self, attrs: Attributes) -> None:
        """Raise the 403 kube-apiserver answers when *attrs* is not allowed."""
        if not self.allowed(attrs):
            self.denials.append(attrs.describe())
            details = {"name": attrs.name, "group": attrs.api_group, "kind": attrs.resource}
            raise ApiError(403, attrs.describe(), "Forbidden", details)

    # --- escalation prevention ----------------------------------------------------------------

    def admit(self, info: KindInfo, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> None:
        """Store admission hook: the escalation checks of the module docstring."""
        request = CURRENT_REQUEST.get()
        if request is None:
            return
        user = request.user
        if old is None and request.verb == "patch":
            # A server-side apply that creates the object needs the create right as well.
            self.authorize(replace(request, verb="create"))
        if info.group != RBAC_GROUP or SUPERUSER_GROUP in user.groups:
            return
        meta = new.get("metadata") or {}
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        binding = info.kind in ("RoleBinding", "ClusterRoleBinding")
        if binding and old is not None and old.get("roleRef") != new.get("roleRef"):
            raise invalid(info, name, [("roleRef", "cannot change roleRef")])
        if old is not None and _only_gc_fields_changed(new, old):
            return
        if info.kind in ("Role", "ClusterRole"):
            self._admit_role(info, user, name, namespace, new)
        elif info.kind in ("RoleBinding", "ClusterRoleBinding"):
            self._admit_binding(info, user, name, namespace, new)

    def _forbidden(self, info: KindInfo, name: str, user: UserInfo, why: str) -> ApiError:
        message = (
            f'{info.plural}.{info.group} "{name}" is forbidden: user "{user.name}" (groups='
            f"{list(user.groups)}) is attempting to grant RBAC permissions not currently held:"
            f"\n{why}"
        )
        return ApiError(
            403, message, "Forbidden", {"name": name, "group": info.group, "kind": info.plural}
        )

    def _admit_role(
        self, info: KindInfo, user: UserInfo, name: str, namespace: str, new: Mapping[str, Any]
    ) -> None:
        escalate = Attributes(
            user, "escalate", "", True, RBAC_GROUP, info.plural, "", namespace, name
        )
        if self.allowed(escalate):
            return
        if new.get("aggregationRule"):
            self.denials.append(f"{user.name}: aggregationRule on {name}")
            raise ApiError(
                403,
                f'{info.plural}.{info.group} "{name}" is forbidden: must have cluster-admin '
                "privileges to use the aggregationRule",
                "Forbidden",
            )
        missing = covers(self.rules_for(user, namespace), new.get("rules") or [])
        if missing:
            raise self._forbidden(info, name, user, _describe(missing))

    def _admit_binding(
        self, info: KindInfo, user: UserInfo, name: str, namespace: str, new: Mapping[str, Any]
    ) -> None:
        ref = new.get("roleRef") or {}
        ref_plural = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
        bind = Attributes(
            user,
            "bind",
            "",
            True,
            RBAC_GROUP,
            ref_plural,
            "",
            namespace,
            str(ref.get("name") or ""),
        )
        if self.allowed(bind):
            return
        rules = self.role_ref_rules(ref, namespace)
        if rules is None:
            self.denials.append(f"{user.name}: binding {name} to a missing {ref}")
            raise ApiError(
                403,
                f'{info.plural}.{info.group} "{name}" is forbidden: the '
                f"{ref.get('kind')} {ref.get('name')!r} it binds does not exist",
                "Forbidden",
            )
        missing = covers(self.rules_for(user, namespace), rules)
        if missing:
            raise self._forbidden(info, name, user, _describe(missing))


def _describe(missing: list[JSON]) -> str:
    return "\n".join("{" + ", ".join(f"{k}:{v}" for k, v in sub.items()) + "}" for sub in missing)


def _only_gc_fields_changed(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    def strip(obj: Mapping[str, Any]) -> JSON:
        meta = {
            k: v
            for k, v in (obj.get("metadata") or {}).items()
            if k not in _GC_ONLY_FIELDS and k not in _VOLATILE_META
        }
        return {**obj, "metadata": meta}

    return strip(new) == strip(old)
