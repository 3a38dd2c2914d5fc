"""No escalation path from any of our ServiceAccounts (docs/security.md, "No escalation path").

From the rendered manifests (the release overlay with its components, plus what the bootstrap
installs), every ServiceAccount's rights are evaluated with the simulator's RBAC authorizer
(the real authorizer's semantics) and searched for a way to more: rights over roles and
bindings (write a role it holds, bind, escalate), impersonation, Secrets and ServiceAccount
tokens, webhooks, CRDs and admission policies, node proxies and certificate approval, and
workloads (or exec) that run as another ServiceAccount of a namespace with rights it lacks.
Where the shipped ValidatingAdmissionPolicies stand in the way of a workload path, the
simulator evaluates them on the workload the attacker would write. The search must find
nothing, and must find the old ``patch clusterroles`` path when a test puts that rule back.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from gpustack_operator.domain.bootstrap import BootstrapSettings, render_device_manager, render_nfd
from gpustack_sim.apiserver.admissionpolicy import PolicyAdmission
from gpustack_sim.apiserver.authn import UserInfo, service_account_user
from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.kinds import KindRegistry
from gpustack_sim.apiserver.rbac import CURRENT_REQUEST, Attributes, RbacAuthorizer, covers
from gpustack_sim.apiserver.store import Store
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
NFD_ACCOUNTS = {
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


def policy_store(objects: list[JSON]) -> Store:
    """A store holding the shipped admission policies, evaluated on every write."""
    store = Store(KindRegistry.with_builtins())
    for ns in (NS, OTHER_NS):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for obj in objects:
        if obj["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            store.create(copy.deepcopy(obj))
    store.admission.append(PolicyAdmission(store).admit)
    return store


def admits_hostile_workload(store: Store, user: UserInfo, resource: str, account: str) -> bool:
    """Whether the policies let *user* create a Deployment or DaemonSet running *account*
    with an image and command of its choosing, under any name that could pass (the
    account's own, a device manager's, another)."""
    kind = {"deployments": "Deployment", "daemonsets": "DaemonSet"}[resource]
    pod = {
        "serviceAccountName": account,
        "containers": [{"name": "x", "image": "example.com/attacker:1", "command": ["sh"]}],
    }
    for name in (account, "gpustack-operator-device-manager-x", "x"):
        obj = {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "selector": {"matchLabels": {"a": "x"}},
                "template": {"metadata": {"labels": {"a": "x"}}, "spec": pod},
            },
        }
        attrs = Attributes(user, "create", "", True, "apps", resource, "", NS, name)
        reset = CURRENT_REQUEST.set(attrs)
        try:
            store.create_as(store.info_for("apps/v1", kind), obj, dry_run=True)
        except ApiError as exc:
            if "denied request" not in str(exc):
                raise
            continue
        finally:
            CURRENT_REQUEST.reset(reset)
        return True
    return False


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
    policies = policy_store(objects)
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
                    held_by_policy = (
                        group == "apps"
                        and resource in ("deployments", "daemonsets")
                        and not admits_hostile_workload(policies, user, resource, other_name)
                    )
                    if not held_by_policy:
                        yield f"{account}: {resource} running as {other_name} in {ns}"

    return sorted({p for account, user in users.items() for p in found(account, user)})


def test_no_service_account_can_gain_a_right() -> None:
    objects = rendered()
    assert {WORKER, "gpustack-operator-device-manager", *NFD_ACCOUNTS} <= set(accounts(objects))
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


def test_without_the_workload_policy_the_worker_runs_as_nfd_master() -> None:
    """The search relies on the evaluated policy, not on its presence: leave it out and the
    worker's Deployments running as nfd-master (which may label every Node) are a path."""
    objects = [o for o in rendered() if not o["kind"].startswith("ValidatingAdmissionPolicy")]
    paths = escalation_paths(objects)
    assert f"{WORKER}: deployments running as node-feature-discovery-master in {NS}" in paths


def test_the_workload_policy_admits_what_the_worker_renders() -> None:
    """NFD's and the device managers' workloads, as the worker renders them, pass the policy
    (docs/security.md, "No escalation path"); so does an update of them."""
    settings = BootstrapSettings(namespace=NS)
    store = policy_store(rendered())
    worker = service_account_user(NS, WORKER)
    workloads = [
        o
        for o in (*render_nfd(settings), *render_device_manager(settings, ["nvidia"], "x/op:1"))
        if o["kind"] in ("Deployment", "DaemonSet")
    ]
    assert {o["metadata"]["name"] for o in workloads} >= NFD_ACCOUNTS
    for obj in workloads:
        plural = obj["kind"].lower() + "s"
        reset = CURRENT_REQUEST.set(
            Attributes(worker, "create", "", True, "apps", plural, "", NS, obj["metadata"]["name"])
        )
        try:
            store.create(copy.deepcopy(obj))
            store.update(copy.deepcopy(obj))
        finally:
            CURRENT_REQUEST.reset(reset)


@pytest.fixture(autouse=True)
def _needs_kubectl() -> None:
    kubectl()
