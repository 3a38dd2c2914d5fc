"""The RBAC rule semantics of the simulator (docs/simulator.md, "Authentication and
authorization"): request attributes, rule matching and coverage."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_sim.apiserver.authn import (
    NODE_NAME_EXTRA,
    TokenAuthenticator,
    TokenFileError,
    service_account_user,
)
from gpustack_sim.apiserver.rbac import Attributes, covers, request_attributes, rule_allows

USER = service_account_user("gpustack-system", "worker")


def attrs(method: str, path: str, **query: str) -> Attributes:
    return request_attributes(method, path, query, USER)


def test_requests_are_parsed_as_the_api_server_does() -> None:
    pod_status = attrs("PUT", "/api/v1/namespaces/ns/pods/p/status")
    assert (pod_status.verb, pod_status.resource, pod_status.subresource) == (
        "update",
        "pods",
        "status",
    )
    assert (pod_status.namespace, pod_status.name) == ("ns", "p")
    watch = attrs("GET", "/api/v1/nodes", watch="true", fieldSelector="metadata.name=gpu-1")
    assert (watch.verb, watch.name, watch.namespace) == ("watch", "gpu-1", "")
    assert attrs("GET", "/apis/apps/v1/namespaces/ns/daemonsets").verb == "list"
    assert attrs("DELETE", "/apis/apps/v1/namespaces/ns/daemonsets").verb == "deletecollection"
    namespace = attrs("GET", "/api/v1/namespaces/team-a")
    assert (namespace.resource, namespace.name, namespace.namespace) == (
        "namespaces",
        "team-a",
        "team-a",
    )
    discovery = attrs("GET", "/apis/kueue.x-k8s.io/v1beta2")
    assert not discovery.resource_request and discovery.verb == "get"
    rbac = attrs("PATCH", "/apis/rbac.authorization.k8s.io/v1/clusterroles/x")
    assert (rbac.api_group, rbac.resource, rbac.verb) == (
        "rbac.authorization.k8s.io",
        "clusterroles",
        "patch",
    )


def rule(verbs: str, resources: str, groups: str = "", names: str = "") -> dict[str, Any]:
    """A PolicyRule from space-separated lists (``-`` is the core group)."""
    out: dict[str, Any] = {
        "verbs": verbs.split(),
        "apiGroups": [("" if g == "-" else g) for g in (groups or "-").split()],
        "resources": resources.split(),
    }
    if names:
        out["resourceNames"] = names.split()
    return out


POD = "/api/v1/namespaces/n/pods"
URLS = {"verbs": ["get"]}


@pytest.mark.parametrize(
    ("rule_", "request_", "allowed"),
    [
        (rule("*", "pods"), ("GET", "/api/v1/pods"), True),
        (rule("get", "pods"), ("GET", "/api/v1/pods"), False),
        (rule("list", "*", "*"), ("GET", "/apis/apps/v1/deployments"), True),
        (rule("list", "pods", "apps"), ("GET", "/api/v1/pods"), False),
        # A subresource needs its own grant, or */subresource.
        (rule("update", "pods"), ("PUT", f"{POD}/p/status"), False),
        (rule("update", "pods/status"), ("PUT", f"{POD}/p/status"), True),
        (rule("update", "*/status"), ("PUT", f"{POD}/p/status"), True),
        (rule("update", "pods/status"), ("PUT", f"{POD}/p"), False),
        # resourceNames: only requests that name one of them.
        (rule("get", "pods", names="p"), ("GET", f"{POD}/p"), True),
        (rule("get", "pods", names="p"), ("GET", f"{POD}/q"), False),
        (rule("create", "pods", names="p"), ("POST", POD), False),
        (rule("list", "pods", names="p"), ("GET", POD), False),
        # Non-resource URLs: exact, "*", or a prefix ending in "*".
        ({**URLS, "nonResourceURLs": ["/apis/*"]}, ("GET", "/apis/apps/v1"), True),
        ({**URLS, "nonResourceURLs": ["/apis"]}, ("GET", "/apis/apps/v1"), False),
        ({**URLS, "nonResourceURLs": ["*"]}, ("GET", "/version"), True),
        (rule("get", "*", "*"), ("GET", "/version"), False),
    ],
)
def test_rule_matching(rule_: dict[str, Any], request_: tuple[str, str], allowed: bool) -> None:
    assert rule_allows(rule_, attrs(*request_)) is allowed


def test_coverage_breaks_rules_down() -> None:
    owner = [
        {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "*/status"]},
        {"verbs": ["patch"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"],
         "resourceNames": ["mine"]},
    ]  # fmt: skip
    assert covers(owner, [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]) == []
    assert (
        covers(owner, [{"verbs": ["get"], "apiGroups": [""], "resources": ["nodes/status"]}]) == []
    )
    missing = covers(owner, [{"verbs": ["get", "watch"], "apiGroups": [""], "resources": ["pods"]}])
    assert missing == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["watch"]}]
    # Names: a named grant covers only named sub-rules it lists.
    named = {"verbs": ["patch"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"]}
    assert covers(owner, [{**named, "resourceNames": ["mine"]}]) == []
    assert covers(owner, [{**named, "resourceNames": ["other"]}])
    assert covers(owner, [named])
    assert covers([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}], [named]) == []
    assert covers([{"verbs": ["get"], "nonResourceURLs": ["/metrics*"]}],
                  [{"verbs": ["get"], "nonResourceURLs": ["/metrics/x"]}]) == []  # fmt: skip


def test_token_file_users_and_their_groups() -> None:
    auth = TokenAuthenticator.from_text(
        "# token,user,uid,groups,extra\n"
        "w0rker,system:serviceaccount:gpustack-system:worker,u1\n"
        'ag3nt,system:serviceaccount:gpustack-system:agent,u2,"",'
        f'"{NODE_NAME_EXTRA}=gpu-1"\n'
        'adm1n,alice,u3,"system:masters,ops"\n'
    )
    worker = auth.authenticate("w0rker")
    assert worker is not None and worker.service_account == ("gpustack-system", "worker")
    assert worker.groups == (
        "system:serviceaccounts",
        "system:serviceaccounts:gpustack-system",
        "system:authenticated",
    )
    agent = auth.authenticate("ag3nt")
    assert agent is not None and agent.extra == {NODE_NAME_EXTRA: ("gpu-1",)}
    admin = auth.authenticate("adm1n")
    assert admin is not None and admin.groups == ("system:masters", "ops", "system:authenticated")
    assert admin.service_account is None
    assert auth.authenticate("nope") is None
    with pytest.raises(TokenFileError, match=r"tokens\.csv:2: expected"):
        TokenAuthenticator.from_text("# header\nonly-a-token\n", "tokens.csv")
