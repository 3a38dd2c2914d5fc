"""No escalation path from any of our ServiceAccounts (docs/security.md, "No escalation path").

From the rendered manifests (the release overlay with its components, plus what the bootstrap
installs), every ServiceAccount's rights are evaluated with the simulator's RBAC authorizer
(the real authorizer's semantics) and searched for a way to more: rights over roles and
bindings (write a role it holds, bind, escalate), impersonation, Secrets and ServiceAccount
tokens, webhooks, CRDs and admission policies, node proxies and certificate approval, and
workloads (or exec) that run as another ServiceAccount of a namespace with rights it lacks.
The search must find nothing, and must find the old ``patch clusterroles`` path when a test
puts that rule back.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from gpustack_operator.domain.bootstrap import BootstrapSettings, render_device_manager, render_nfd
from gpustack_operator.sim.authn import UserInfo, service_account_user
from gpustack_operator.sim.kinds import KindRegistry
from gpustack_operator.sim.rbac import Attributes, RbacAuthorizer, covers
from gpustack_operator.sim.store import Store
from tests.integration.bootstrap.rbac import REPO, render_kustomization
from tests.integration.bootstrap.test_rbac import kubectl

JSON = dict[str, Any]
NS = "gpustack-system"
OTHER_NS = "default"  # stands for every namespace where we have no ServiceAccount
RBAC = "rbac.authorization.k8s.io"
WORKER = "gpustack-operator-worker"
POLICY = "gpustack-operator-worker-workloads"
WRITE = ("create", "update", "patch")
WORKLOADS = (
    ("", "pods"),
    ("", "replicationcontrollers"),
    ("apps", "deployments"),
    ("apps", "daemonsets"),
    ("apps", "statefulsets"),
    ("apps", "replicasets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
)
POD_ENTRY = (("create", "exec"), ("create", "attach"), ("patch", "ephemeralcontainers"))
ADMISSION = (
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
)
# ServiceAccounts whose Pods the worker's admission policy pins to NFD's released image and
# command: running them gives the worker nothing but NFD doing its job.
PINNED_BY_POLICY = {
    "node-feature-discovery-master",
    "node-feature-discovery-worker",
    "node-feature-discovery-gc",
}


def rendered() -> list[JSON]:
    settings = BootstrapSettings(namespace=NS)
    return [
        *render_kustomization(kubectl(), REPO / "deploy" / "overlays" / "release"),
        *render_nfd(settings),
        *render_device_manager(settings, sorted(settings.manufacturers), "example.com/op:1"),
    ]


def authorizer(objects: list[JSON]) -> RbacAuthorizer:
    store = Store(KindRegistry.with_builtins())
    for ns in (NS, OTHER_NS):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for obj in objects:
        if obj["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
            store.create(copy.deepcopy(obj))
    return RbacAuthorizer(store)


def accounts(objects: list[JSON]) -> dict[str, UserInfo]:
    return {
        o["metadata"]["name"]: service_account_user(
            o["metadata"]["namespace"], o["metadata"]["name"]
        )
        for o in objects
        if o["kind"] == "ServiceAccount"
    }


def names(objects: list[JSON], *kinds: str) -> set[str]:
    return {"", "cluster-admin"} | {o["metadata"]["name"] for o in objects if o["kind"] in kinds}


def escalation_paths(objects: list[JSON]) -> list[str]:
    auth = authorizer(objects)
    users = accounts(objects)
    role_names = names(objects, "Role", "ClusterRole")
    binding_names = names(objects, "RoleBinding", "ClusterRoleBinding")

    def can(user: UserInfo, verb: str, group: str, resource: str, ns: str = "", name: str = "",
            sub: str = "") -> bool:  # fmt: skip
        return auth.allowed(Attributes(user, verb, "", True, group, resource, sub, ns, name))

    def gains(user: UserInfo, other: UserInfo, ns: str) -> bool:
        return bool(covers(auth.rules_for(user, ns), auth.rules_for(other, ns)))

    def found(account: str, user: UserInfo) -> Iterator[str]:
        for ns in ("", NS, OTHER_NS):
            scoped = (
                [("roles", "rolebindings")] if ns else [("clusterroles", "clusterrolebindings")]
            )
            for roles, bindings in scoped:
                for name in role_names:
                    for verb in ("escalate", "bind"):
                        if can(user, verb, RBAC, roles, ns, name):
                            yield f"{account}: {verb} {roles} {name or '*'} in {ns or 'cluster'}"
                    for verb in WRITE:
                        if can(user, verb, RBAC, roles, ns, name):
                            yield f"{account}: {verb} {roles} {name or '*'} (rewrite a role)"
                for name in binding_names:
                    for verb in WRITE:
                        if can(user, verb, RBAC, bindings, ns, name):
                            yield f"{account}: {verb} {bindings} {name or '*'} (bind itself)"
            for resource in ("users", "groups", "serviceaccounts"):
                if can(user, "impersonate", "", resource, ns):
                    yield f"{account}: impersonate {resource}"
            for verb in ("get", "list", "watch"):
                if can(user, verb, "", "secrets", ns):
                    yield f"{account}: {verb} secrets in {ns or 'cluster'}"
            for group, resource in ADMISSION:
                for verb in WRITE:
                    if can(user, verb, group, resource, ns):
                        yield f"{account}: {verb} {resource}"
            if can(user, "create", "", "nodes", ns, sub="proxy") or can(
                user, "get", "", "nodes", ns, sub="proxy"
            ):
                yield f"{account}: nodes/proxy"
            if can(
                user, "update", "certificates.k8s.io", "certificatesigningrequests", sub="approval"
            ):
                yield f"{account}: approve certificates"
            for other_name, other in users.items():
                other_ns = other.service_account[0] if other.service_account else ""
                if other_name == account or not ns or other_ns != ns or not gains(user, other, ns):
                    continue
                if can(user, "create", "", "serviceaccounts", ns, other_name, "token"):
                    yield f"{account}: mint a token of {other_name}"
                for verb, sub in POD_ENTRY:
                    if can(user, verb, "", "pods", ns, sub=sub):
                        yield f"{account}: pods/{sub} into a Pod of {other_name}"
                for group, resource in WORKLOADS:
                    if not any(can(user, verb, group, resource, ns) for verb in WRITE):
                        continue
                    pinned = (
                        account == WORKER
                        and group == "apps"
                        and resource in ("deployments", "daemonsets")
                        and other_name in PINNED_BY_POLICY
                    )
                    if not pinned:
                        yield f"{account}: {resource} running as {other_name} in {ns}"

    return sorted({p for account, user in users.items() for p in found(account, user)})


def test_no_service_account_can_gain_a_right() -> None:
    objects = rendered()
    assert {WORKER, "gpustack-operator-device-manager", *PINNED_BY_POLICY} <= set(accounts(objects))
    paths = escalation_paths(objects)
    assert not paths, "escalation paths:\n" + "\n".join(paths)


def test_the_old_patch_clusterroles_rule_is_found() -> None:
    objects = rendered()
    for obj in objects:
        if obj["kind"] == "ClusterRole" and obj["metadata"]["name"] == WORKER:
            obj["rules"].append({"apiGroups": [RBAC], "resources": ["clusterroles"],
                                 "verbs": ["patch"]})  # fmt: skip
    paths = escalation_paths(objects)
    assert f"{WORKER}: patch clusterroles * (rewrite a role)" in paths, paths


def test_a_workload_right_without_the_policy_is_found() -> None:
    """The worker's Deployments could run as nfd-master (which labels Nodes) but for the
    admission policy; granting it StatefulSets, which the policy does not cover, is a path."""
    objects = rendered()
    for obj in objects:
        if obj["kind"] == "Role" and obj["metadata"]["name"] == WORKER:
            obj["rules"].append({"apiGroups": ["apps"], "resources": ["statefulsets"],
                                 "verbs": ["create"]})  # fmt: skip
    paths = escalation_paths(objects)
    assert f"{WORKER}: statefulsets running as node-feature-discovery-master in {NS}" in paths


def test_the_worker_workload_policy_is_shipped() -> None:
    """The policy the search relies on (PINNED_BY_POLICY): present, bound to the system
    namespace, matching the worker's Deployments and DaemonSets, pinning NFD's image and
    command. Its CEL is evaluated by the simulator's admission tests once it evaluates CEL."""
    objects = rendered()
    policy = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
                  and o["metadata"]["name"] == POLICY)  # fmt: skip
    binding = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"
                   and o["spec"]["policyName"] == POLICY)  # fmt: skip
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": NS
    }
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                      "operations": ["CREATE", "UPDATE"],
                      "resources": ["deployments", "daemonsets"]}]  # fmt: skip
    assert policy["spec"]["failurePolicy"] == "Fail"
    condition = policy["spec"]["matchConditions"][0]["expression"]
    assert f"system:serviceaccount:{NS}:{WORKER}" in condition
    text = str(policy["spec"])
    for account in PINNED_BY_POLICY:
        assert account in text
    assert "registry.k8s.io/nfd/node-feature-discovery:" in text
    assert "serviceAccountName" in text and "secretKeyRef" in text


@pytest.fixture(autouse=True)
def _needs_kubectl() -> None:
    kubectl()
