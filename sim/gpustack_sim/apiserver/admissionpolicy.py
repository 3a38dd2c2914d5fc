"""ValidatingAdmissionPolicies, evaluated on writes as kube-apiserver does (docs/simulator.md,
"Admission policies").

A ``admissionregistration.k8s.io/v1`` ValidatingAdmissionPolicy judges a create or update
only through a ValidatingAdmissionPolicyBinding that names it (``spec.policyName``). For each
policy and each of its bindings, in name order:

1. the request must match the policy's ``matchConstraints`` and the binding's
   ``matchResources`` (``resourceRules`` less ``excludeResourceRules``: operations,
   apiGroups, apiVersions, resources with ``*``, ``*/*``, ``res/*``, ``*/sub``,
   ``resourceNames``, ``scope``; ``namespaceSelector`` against the Namespace's labels, always
   matched by cluster-scoped objects other than Namespaces; ``objectSelector`` against the new
   or the old object's labels; ``matchPolicy: Equivalent`` lets a rule for one version match
   the others of the same resource);
2. every ``matchConditions`` expression must be true (an error applies ``failurePolicy``);
3. ``variables`` are evaluated in order, each seeing the earlier ones;
4. the first ``validations`` expression that is not true is the denial: its message is
   ``messageExpression``'s result when that is a non-empty string without line breaks, else
   ``message``, else ``failed expression: <expression>``; its ``reason`` (default
   ``Invalid``) gives the HTTP code (Forbidden 403, Unauthorized 401,
   RequestEntityTooLarge 413, else 422). An expression that fails to run denies (422
   Invalid) with ``expression '<expression>' resulted in error: <error>`` under
   ``failurePolicy: Fail`` (the default) and is skipped under ``Ignore``.

The binding's ``validationActions`` decide what a denial does: ``Deny`` refuses the write
with ``<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>' with binding
'<binding>' denied request: <message>``; ``Warn`` and ``Audit`` are not modelled (no warning
header, no audit log). CEL sees ``object``, ``oldObject`` (null on create), ``request``
(``operation``, ``name``, ``namespace``, ``kind``, ``resource``, ``subResource``,
``userInfo`` with ``username``, ``uid``, ``groups``, ``extra``; ``dryRun`` always false),
``namespaceObject``, ``params`` (always null: ``paramKind``/``paramRef`` are not modelled)
and ``variables``; ``authorizer`` is not provided. Expressions are compiled once per process
(``gpustack_sim/apiserver/cel.py``); a policy whose expressions do not compile is refused on write
(422), as
kube-apiserver does. Policies and bindings themselves (the ``admissionregistration.k8s.io``
group) are never judged by policies. Sources are listed in docs/simulator.md.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from gpustack_sim.apiserver.authn import ADMIN
from gpustack_sim.apiserver.cel import CelError, compile_expression, evaluate
from gpustack_sim.apiserver.errors import ApiError, invalid
from gpustack_sim.apiserver.kinds import KindInfo
from gpustack_sim.apiserver.rbac import CURRENT_REQUEST, label_selector_matches
from gpustack_sim.apiserver.store import Store

__all__ = ["POLICY_GROUP", "PolicyAdmission"]

JSON = dict[str, Any]
POLICY_GROUP: Final = "admissionregistration.k8s.io"
_POLICIES: Final = "validatingadmissionpolicies"
_BINDINGS: Final = "validatingadmissionpolicybindings"
_REASON_CODES: Final = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}


class _Denied(Exception):
    """One validation's denial: its message and reason."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message, self.reason = message, reason


class PolicyAdmission:
    """Store admission hook that evaluates the stored policies; see the module docstring."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.denials: deque[str] = deque(maxlen=1000)
        """The messages of the latest denials, for tests and troubleshooting."""

    def _objects(self, plural: str) -> list[JSON]:
        info = self.store.registry.lookup(POLICY_GROUP, "v1", plural)
        if info is None:
            return []
        objects = self.store.resource(info).objects
        return [objects[key] for key in sorted(objects)]

    def admit(self, info: KindInfo, new: Mapping[str, Any], old: Mapping[str, Any] | None) -> None:
        """Refuse *new* when a bound policy denies it (and check a policy's expressions)."""
        if info.group == POLICY_GROUP:
            if info.plural == _POLICIES:
                _check_compiles(info, new)
            return
        bindings = self._objects(_BINDINGS)
        if not bindings:
            return
        request = _Request(self.store, info, new, old)
        for policy in self._objects(_POLICIES):
            name = policy["metadata"]["name"]
            spec = policy.get("spec") or {}
            if not request.matches(spec.get("matchConstraints") or {}, policy_level=True):
                continue
            for binding in bindings:
                bspec = binding.get("spec") or {}
                if bspec.get("policyName") != name:
                    continue
                if bspec.get("matchResources") and not request.matches(bspec["matchResources"]):
                    continue
                try:
                    _validate(spec, request)
                except _Denied as denied:
                    if "Deny" in (bspec.get("validationActions") or []):
                        raise self._refusal(info, request, name, binding, denied) from None

    def _refusal(
        self, info: KindInfo, request: _Request, policy: str, binding: JSON, denied: _Denied
    ) -> ApiError:
        cause = (
            f"ValidatingAdmissionPolicy '{policy}' with binding "
            f"'{binding['metadata']['name']}' denied request: {denied.message}"
        )
        self.denials.append(cause)
        details: JSON = {"kind": info.plural, "causes": [{"message": cause}]}
        if request.name:
            details["name"] = request.name
        if info.group:
            details["group"] = info.group
        return ApiError(
            _REASON_CODES.get(denied.reason, 422),
            f'{info.group_resource} "{request.name}" is forbidden: {cause}',
            denied.reason,
            details,
        )


class _Request:
    """One write as policies see it: its attributes and the CEL ``request`` variable."""

    def __init__(
        self,
        store: Store,
        info: KindInfo,
        new: Mapping[str, Any],
        old: Mapping[str, Any] | None,
    ) -> None:
        attrs = CURRENT_REQUEST.get()
        user = attrs.user if attrs is not None else ADMIN  # sim.store in Python
        meta = new.get("metadata") or {}
        self.store, self.info, self.object, self.old = store, info, new, old
        self.operation = "CREATE" if old is None else "UPDATE"
        self.subresource = attrs.subresource if attrs is not None else ""
        self.name = str(meta.get("name") or "")
        self.namespace = str(meta.get("namespace") or "") if info.namespaced else ""
        self.namespace_object = self._namespace_object()
        user_info: JSON = {"username": user.name, "groups": list(user.groups)}
        if user.uid:
            user_info["uid"] = user.uid
        if user.extra:
            user_info["extra"] = {k: list(v) for k, v in user.extra.items()}
        kind = {"group": info.group, "version": info.version, "kind": info.kind}
        resource = {"group": info.group, "version": info.version, "resource": info.plural}
        self.cel_request: JSON = {
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "operation": self.operation,
            "userInfo": user_info,
            "dryRun": False,
        }
        for key, value in (
            ("name", self.name),
            ("namespace", self.namespace),
            ("subResource", self.subresource),
            ("requestSubResource", self.subresource),
        ):
            if value:
                self.cel_request[key] = value

    def _namespace_object(self) -> JSON | None:
        if not self.namespace:
            return None
        info = self.store.registry.lookup("", "v1", "namespaces")
        return None if info is None else self.store.resource(info).objects.get(("", self.namespace))

    def cel_variables(self) -> JSON:
        return {
            "object": dict(self.object),
            "oldObject": dict(self.old) if self.old is not None else None,
            "request": self.cel_request,
            "namespaceObject": self.namespace_object,
            "params": None,
        }

    # --- matching ------------------------------------------------------------------------

    def matches(self, match: Mapping[str, Any], *, policy_level: bool = False) -> bool:
        """The request matches a policy's ``matchConstraints`` or a binding's
        ``matchResources`` (a binding without ``resourceRules`` takes the policy's)."""
        rules = match.get("resourceRules")
        exact = match.get("matchPolicy") == "Exact"
        if (rules is not None or policy_level) and not any(
            self._rule_matches(r, exact) for r in rules or []
        ):
            return False
        if any(self._rule_matches(r, exact) for r in match.get("excludeResourceRules") or []):
            return False
        return self._namespace_matches(match.get("namespaceSelector")) and self._object_matches(
            match.get("objectSelector")
        )

    def _versions(self, exact: bool) -> set[str]:
        if exact:
            return {self.info.version}
        return {
            i.version for i in self.store.registry.versions_of(self.info.group, self.info.plural)
        }

    def _rule_matches(self, rule: Mapping[str, Any], exact: bool) -> bool:
        if not _listed(rule.get("operations"), self.operation):
            return False
        if not _listed(rule.get("apiGroups"), self.info.group):
            return False
        versions = rule.get("apiVersions") or []
        if "*" not in versions and not self._versions(exact) & set(versions):
            return False
        scope = rule.get("scope") or "*"
        if scope != "*" and scope != ("Namespaced" if self.info.namespaced else "Cluster"):
            return False
        names = rule.get("resourceNames") or []
        if names and self.name not in names:
            return False
        return any(self._resource_matches(str(r)) for r in rule.get("resources") or [])

    def _resource_matches(self, pattern: str) -> bool:
        plural, sub = self.info.plural, self.subresource
        if pattern == "*/*":
            return True
        if pattern == "*":
            return not sub
        res, _, want_sub = pattern.partition("/")
        if not want_sub:
            return res == plural and not sub
        return res in ("*", plural) and bool(sub) and want_sub in ("*", sub)

    def _namespace_matches(self, selector: Mapping[str, Any] | None) -> bool:
        if not selector:
            return True
        if self.info.kind == "Namespace" and not self.info.group:
            labels = (self.object.get("metadata") or {}).get("labels") or {}
            return label_selector_matches(selector, labels)
        if not self.info.namespaced:
            return True  # other cluster-scoped objects are never skipped by namespace
        meta = (self.namespace_object or {}).get("metadata") or {}
        return label_selector_matches(selector, meta.get("labels") or {})

    def _object_matches(self, selector: Mapping[str, Any] | None) -> bool:
        if not selector:
            return True
        return any(
            label_selector_matches(selector, (obj.get("metadata") or {}).get("labels") or {})
            for obj in (self.object, self.old)
            if obj is not None
        )


def _listed(values: Sequence[str] | None, wanted: str) -> bool:
    if not values:
        return False
    return "*" in values or wanted in values


# --- evaluation ---------------------------------------------------------------------------


def _validate(spec: Mapping[str, Any], request: _Request) -> None:
    """Raise :class:`_Denied` for the first validation *request* fails; see the docstring."""
    fail = spec.get("failurePolicy", "Fail") != "Ignore"
    context = request.cel_variables()
    for condition in spec.get("matchConditions") or []:
        expression = str(condition.get("expression") or "")
        try:
            if evaluate(expression, context) is not True:
                return
        except CelError as exc:
            if fail:
                raise _Denied(
                    f"failed to evaluate matchCondition '{condition.get('name')}': {exc}",
                    "Invalid",
                ) from None
            return
    computed: JSON = {}
    context["variables"] = computed
    for variable in spec.get("variables") or []:
        try:
            computed[str(variable.get("name"))] = evaluate(
                str(variable.get("expression") or ""), context
            )
        except CelError:
            continue  # an expression that uses it reports the missing key
    for validation in spec.get("validations") or []:
        expression = str(validation.get("expression") or "")
        reason = str(validation.get("reason") or "Invalid")
        try:
            result = evaluate(expression, context)
        except CelError as exc:
            if fail:  # an evaluation error is Invalid, whatever the validation's reason
                raise _Denied(
                    f"expression '{expression}' resulted in error: {exc}", "Invalid"
                ) from None
            continue
        if result is not True:
            raise _Denied(_message(validation, expression, context), reason)


def _message(validation: Mapping[str, Any], expression: str, context: Mapping[str, Any]) -> str:
    produced: Any = None
    if validation.get("messageExpression"):
        try:
            produced = evaluate(str(validation["messageExpression"]), context)
        except CelError:
            produced = None
    if isinstance(produced, str) and produced.strip() and "\n" not in produced.strip():
        return produced.strip()
    message = str(validation.get("message") or "").strip()
    return message or f"failed expression: {expression.strip()}"


def _expressions(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(field path, expression)`` of every CEL expression of a policy's spec."""
    for field, key in (
        ("matchConditions", "expression"),
        ("variables", "expression"),
        ("validations", "expression"),
        ("validations", "messageExpression"),
        ("auditAnnotations", "valueExpression"),
    ):
        for index, item in enumerate(spec.get(field) or []):
            if isinstance(item, Mapping) and item.get(key):
                yield f"spec.{field}[{index}].{key}", str(item[key])


def _check_compiles(info: KindInfo, policy: Mapping[str, Any]) -> None:
    causes = []
    for path, expression in _expressions(policy.get("spec") or {}):
        try:
            compile_expression(expression)
        except CelError as exc:
            causes.append((path, f'Invalid value: "{expression}": {exc}'))
    if causes:
        raise invalid(info, str((policy.get("metadata") or {}).get("name") or ""), causes)
