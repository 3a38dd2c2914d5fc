"""Who am I and what may I do: the review and token endpoints of the simulated API server.

``kubectl auth can-i`` posts a SelfSubjectAccessReview, ``kubectl auth whoami`` a
SelfSubjectReview and ``kubectl create token`` a TokenRequest; controllers and webhooks post
SubjectAccessReviews and TokenReviews. The answers come from the simulator's own
authenticator and RBAC (docs/simulator.md, "Server parts").
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gpustack_sim.apiserver import protobuf
from gpustack_sim.apiserver.authn import ADMIN, UserInfo, service_account_user
from gpustack_sim.apiserver.errors import ApiError, bad_request
from gpustack_sim.apiserver.rbac import CURRENT_REQUEST, Attributes

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

__all__ = ["add_review_routes"]

_AUTHZ = "/apis/authorization.k8s.io/v1"
_AUTHN = "/apis/authentication.k8s.io/v1"
DEFAULT_TOKEN_SECONDS = 3600
MIN_TOKEN_SECONDS = 600  # the API server refuses shorter tokens
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"  # kind's --api-audiences


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _requester() -> UserInfo:
    current = CURRENT_REQUEST.get()
    return current.user if current is not None else ADMIN


def _user_json(user: UserInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"username": user.name, "groups": list(user.groups)}
    if user.uid:
        out["uid"] = user.uid
    if user.extra:
        out["extra"] = {k: list(v) for k, v in user.extra.items()}
    return out


async def _object(request: web.Request, kind: str) -> dict[str, Any]:
    """The posted review, JSON or protobuf (kubectl's typed clients send protobuf)."""
    raw = await request.read()
    try:
        body = protobuf.decode(raw) if raw.startswith(protobuf.MAGIC) else json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(
            f"the {kind} body is neither JSON nor Kubernetes protobuf: {exc}"
        ) from None
    if not isinstance(body, dict) or not isinstance(body.get("spec", {}), dict):
        raise bad_request(f"a {kind} must be a JSON object with an object spec")
    return body


def _attributes(user: UserInfo, spec: Mapping[str, Any], namespace: str = "") -> Attributes:
    """The request a review asks about; 422 when it names neither kind of attributes."""
    res = spec.get("resourceAttributes")
    nonres = spec.get("nonResourceAttributes")
    if isinstance(res, Mapping):
        return Attributes(
            user,
            str(res.get("verb") or ""),
            "",
            True,
            str(res.get("group") or ""),
            str(res.get("resource") or ""),
            str(res.get("subresource") or ""),
            namespace or str(res.get("namespace") or ""),
            str(res.get("name") or ""),
        )
    if isinstance(nonres, Mapping):
        return Attributes(user, str(nonres.get("verb") or ""), str(nonres.get("path") or ""), False)
    raise ApiError(
        422,
        "spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes "
        "or resourceAttributes must be specified",
        "Invalid",
    )


def _bound_node(sim: SimServer, namespace: str, ref: Any) -> str | None:
    """The node a token bound to *ref* carries as its ``authentication.kubernetes.io/node-name``
    extra: the Node itself, or the node of a bound Pod (Kubernetes 1.32+,
    ``pkg/serviceaccount/claims.go``, the ``ServiceAccountTokenNodeBinding`` and
    ``ServiceAccountTokenPodNodeInfo`` features); None for other objects."""
    if not isinstance(ref, Mapping):
        return None
    kind, name = ref.get("kind"), ref.get("name")
    if kind == "Node" and isinstance(name, str) and name:
        return name
    if kind == "Pod" and isinstance(name, str) and name:
        info = sim.registry.lookup("", "v1", "pods")
        pod = sim.store.get_stored(info, namespace, name) if info is not None else None
        node = ((pod or {}).get("spec") or {}).get("nodeName")
        return node if isinstance(node, str) and node else None
    return None


def _review_answer(sim: SimServer, body: dict[str, Any], attrs: Attributes) -> web.Response:
    status = {"allowed": sim.authorizer.allowed(attrs)}  # RBAC gives no reason for a "no"
    answer = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": body.get("kind") or "SubjectAccessReview",
        "metadata": {"creationTimestamp": None},
        "spec": body.get("spec") or {},
        "status": status,
    }
    return web.json_response(answer, status=201)


def add_review_routes(app: web.Application, sim: SimServer) -> None:
    """Register the review and token endpoints (before the generic resource routes)."""

    async def self_access(request: web.Request) -> web.Response:
        body = await _object(request, "SelfSubjectAccessReview")
        return _review_answer(sim, body, _attributes(_requester(), body.get("spec") or {}))

    async def subject_access(request: web.Request) -> web.Response:
        body = await _object(request, "SubjectAccessReview")
        spec = body.get("spec") or {}
        user = UserInfo(
            str(spec.get("user") or ""),
            str(spec.get("uid") or ""),
            tuple(spec.get("groups") or ()),
            {k: tuple(v) for k, v in (spec.get("extra") or {}).items()},
        )
        if not user.name and not user.groups:
            raise ApiError(
                422,
                'spec.user: Invalid value: "": at least one of user or group must be specified',
                "Invalid",
            )
        namespace = request.match_info.get("namespace", "")
        return _review_answer(sim, body, _attributes(user, spec, namespace))

    async def self_subject(request: web.Request) -> web.Response:
        answer = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "SelfSubjectReview",
            "metadata": {"creationTimestamp": _stamp(_now())},
            "status": {"userInfo": _user_json(_requester())},
        }
        return web.json_response(answer, status=201)

    async def token_review(request: web.Request) -> web.Response:
        body = await _object(request, "TokenReview")
        spec = dict(body.get("spec") or {})
        if not spec.get("token"):
            raise ApiError(422, 'TokenReview.authentication.k8s.io "" is invalid', "Invalid")
        user = None
        if sim.authenticator is not None:
            user = sim.authenticator.authenticate(str(spec["token"]))
        status: dict[str, Any] = {"user": {}}
        if user is None:
            status["error"] = "[invalid bearer token, token lookup failed]"
        else:
            status["authenticated"] = True
            status["user"] = _user_json(user)
            status["audiences"] = list(spec.get("audiences") or [API_AUDIENCE])
        answer = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }
        return web.json_response(answer, status=201)

    async def token(request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        info = sim.registry.lookup("", "v1", "serviceaccounts")
        assert info is not None
        account = sim.store.get_stored(info, namespace, name)
        body = await _object(request, "TokenRequest")
        spec = dict(body.get("spec") or {})
        seconds = int(spec.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS)
        if seconds < MIN_TOKEN_SECONDS:
            raise ApiError(
                422,
                f"spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration "
                "less than 10 minutes",
                "Invalid",
            )
        spec["expirationSeconds"] = seconds
        spec.setdefault("audiences", [API_AUDIENCE])
        issued = secrets.token_urlsafe(32)
        if sim.authenticator is not None:
            user = service_account_user(
                namespace,
                name,
                uid=account["metadata"].get("uid", ""),
                node=_bound_node(sim, namespace, spec.get("boundObjectRef")),
            )
            sim.authenticator.add(
                issued, user.name, uid=user.uid, groups=user.groups, extra=user.extra
            )
        answer = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": _stamp(_now()),
            },
            "spec": spec,
            "status": {
                "token": issued,
                "expirationTimestamp": _stamp(_now() + timedelta(seconds=seconds)),
            },
        }
        return web.json_response(answer, status=201)

    app.router.add_post(f"{_AUTHZ}/selfsubjectaccessreviews", self_access)
    app.router.add_post(f"{_AUTHZ}/subjectaccessreviews", subject_access)
    app.router.add_post(
        f"{_AUTHZ}/namespaces/{{namespace}}/localsubjectaccessreviews", subject_access
    )
    app.router.add_post(f"{_AUTHN}/selfsubjectreviews", self_subject)
    app.router.add_post(f"{_AUTHN}/tokenreviews", token_review)
    app.router.add_post("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", token)
