"""The shipped ValidatingAdmissionPolicies, evaluated by the simulator over HTTP with
authentication on (docs/simulator.md, "Admission policies"; docs/security.md, "Device manager
token" and "No escalation path")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpustack_operator.domain.bootstrap import BootstrapSettings, device_manager_prerequisites
from gpustack_sim.apiserver.authn import NODE_NAME_EXTRA, TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.crds import stand_in_crds
from tests.integration.sim.helpers import deployment as valid_deployment

pytestmark = pytest.mark.anyio

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "components"
NS = "gpustack-system"
AGENT = f"system:serviceaccount:{NS}:gpustack-operator-device-manager"
WORKER = f"system:serviceaccount:{NS}:gpustack-operator-worker"
APPLY = {"Content-Type": "application/apply-patch+yaml"}
NODE_FEATURES = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NS}/nodefeatures"
DAEMONSETS = f"/apis/apps/v1/namespaces/{NS}/daemonsets"
OWN_NODE = "gpustack-operator-device-manager-own-node"
WORKLOADS = "gpustack-operator-worker-workloads"
NFD_IMAGE = "registry.k8s.io/nfd/node-feature-discovery:v0.19.0"


def shipped(component: str) -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted((DEPLOY / component).glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[SimServer]:
    auth = TokenAuthenticator()
    auth.add("agent-a", AGENT, extra={NODE_NAME_EXTRA: ["gpu-a"]})
    auth.add("agent-unbound", AGENT)
    auth.add("worker", WORKER)
    auth.add("admin", "admin", groups=["system:masters"])
    server = SimServer(namespaces=["default", NS], authenticator=auth)
    server.load_crds(stand_in_crds())
    for obj in [
        *device_manager_prerequisites(BootstrapSettings(namespace=NS)),
        *shipped("node-bound-agents"),
        *shipped("admission-policies"),
    ]:
        server.store.create(obj)
    # What RBAC gives the worker on workloads (deploy/base/rbac.yaml), so that only the
    # policy decides here.
    server.store.create({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "worker-edit", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "workloads"},
        "subjects": [{"kind": "ServiceAccount", "name": "gpustack-operator-worker",
                      "namespace": NS}],
    })  # fmt: skip
    server.store.create({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "workloads"},
        "rules": [{"apiGroups": ["apps"], "resources": ["daemonsets"],
                   "verbs": ["create", "update", "patch", "get"]}],
    })  # fmt: skip
    async with server:
        yield server


def client(sim: SimServer, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=sim.url, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


def node_feature(node: str, *, label: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": f"{node}-gpustack-device-manager",
            "namespace": NS,
            "labels": {"nfd.node.kubernetes.io/node-name": label or node},
        },
        "spec": {"labels": {"gpustack.ai/vendor": "nvidia"}},
    }


async def apply(http: httpx.AsyncClient, obj: dict[str, Any]) -> httpx.Response:
    url = f"{NODE_FEATURES}/{obj['metadata']['name']}?fieldManager=gpustack-device-manager"
    return await http.patch(url, content=yaml.safe_dump(obj), headers=APPLY)


async def test_an_agent_writes_only_its_own_nodes_node_feature(sim: SimServer) -> None:
    async with client(sim, "agent-a") as agent:
        created = await apply(agent, node_feature("gpu-a"))
        assert created.status_code == 201, created.text
        updated = node_feature("gpu-a")
        updated["spec"]["labels"]["gpustack.ai/count"] = "2"
        assert (await apply(agent, updated)).status_code == 200

        other = await apply(agent, node_feature("gpu-b"))
        assert other.status_code == 403, other.text
        cause = (
            f"ValidatingAdmissionPolicy '{OWN_NODE}' with binding '{OWN_NODE}' denied request: "
            "the device manager of node gpu-a may write only the NodeFeature "
            "gpu-a-gpustack-device-manager labelled for that node, not "
            "gpu-b-gpustack-device-manager"
        )
        assert other.json()["message"] == (
            f'nodefeatures.nfd.k8s-sigs.io "gpu-b-gpustack-device-manager" is forbidden: {cause}'
        )
        assert other.json()["reason"] == "Forbidden"
        assert other.json()["details"]["causes"] == [{"message": cause}]
        # Its own name, but labelled for another node: NFD would put the labels there.
        relabelled = await apply(agent, node_feature("gpu-a", label="gpu-b"))
        assert relabelled.status_code == 403, relabelled.text
        # A plain create of another node's NodeFeature is the same write.
        posted = await agent.post(NODE_FEATURES, json=node_feature("gpu-b"))
        assert posted.status_code == 403
    stored = sim.store.get("nfd.k8s-sigs.io/v1alpha1", "NodeFeature",
                           "gpu-a-gpustack-device-manager", NS)  # fmt: skip
    assert stored is not None
    assert stored["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": "gpu-a"}
    assert stored["spec"]["labels"]["gpustack.ai/count"] == "2"
    assert sim.store.get("nfd.k8s-sigs.io/v1alpha1", "NodeFeature",
                         "gpu-b-gpustack-device-manager", NS) is None  # fmt: skip


async def test_an_agent_token_without_a_node_is_refused(sim: SimServer) -> None:
    async with client(sim, "agent-unbound") as agent, client(sim, "admin") as admin:
        refused = await apply(agent, node_feature("gpu-a"))
        assert refused.status_code == 403
        assert "the device manager's token carries no node-name claim" in refused.json()["message"]
        # The policy matches only the device manager: an administrator writes any node's.
        assert (await apply(admin, node_feature("gpu-b"))).status_code == 201


def daemonset(name: str, account: str, image: str, command: list[str]) -> dict[str, Any]:
    pod = {"serviceAccountName": account,
           "containers": [{"name": "main", "image": image, "command": command}]}  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
        },
    }


async def test_the_worker_runs_nfd_only_with_nfds_image_and_command(sim: SimServer) -> None:
    name = "node-feature-discovery-worker"
    async with client(sim, "worker") as worker:
        nfd = daemonset(name, name, NFD_IMAGE, ["nfd-worker"])
        admitted = await worker.post(DAEMONSETS, json=nfd)
        assert admitted.status_code == 201, admitted.text

        nfd["spec"]["template"]["spec"]["containers"][0]["image"] = "example.com/evil:1"
        swapped = await worker.put(f"{DAEMONSETS}/{name}", json=nfd)
        assert swapped.status_code == 403, swapped.text
        assert swapped.json()["message"] == (
            f'daemonsets.apps "{name}" is forbidden: ValidatingAdmissionPolicy '
            f"'{WORKLOADS}' with binding '{WORKLOADS}' denied request: NFD's workloads run "
            "NFD's released image (change this prefix here if you pass --nfd-image)"
        )
        shell = daemonset(name.replace("worker", "gc"), "node-feature-discovery-gc", NFD_IMAGE,
                          ["sh", "-c", "cat /var/run/secrets/*"])  # fmt: skip
        assert (await worker.post(DAEMONSETS, json=shell)).status_code == 403
        # Running as nfd-master under another name is what the policy exists to stop.
        disguised = daemonset("gpustack-operator-device-manager-x", "node-feature-discovery-master",
                              "example.com/op:1", ["gpustack-operator"])  # fmt: skip
        refused = await worker.post(DAEMONSETS, json=disguised)
        assert refused.status_code == 403
        assert "each as its own ServiceAccount" in refused.json()["message"]
    assert sim.policies.denials  # kept for troubleshooting, as RBAC denials are


async def test_a_policy_that_does_not_compile_is_refused(sim: SimServer) -> None:
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "broken"},
        "spec": {"validations": [{"expression": "object.metadata.name =="}]},
    }
    async with client(sim, "admin") as admin:
        answer = await admin.post(
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", json=policy
        )
    assert answer.status_code == 422
    assert "spec.validations[0].expression" in answer.json()["message"]


async def test_failure_policy_default_message_and_actions(sim: SimServer) -> None:
    """An expression that errors denies under Fail (422) and is skipped under Ignore; without
    a message the expression is quoted; a Warn-only binding does not refuse."""
    vap = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    bindings = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    rules = {
        "resourceRules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["configmaps"],
            }
        ]
    }
    validations = [{"expression": "object.data.size == '1'"},
                   {"expression": "object.metadata.name.startsWith('ok')"}]  # fmt: skip

    def config_map(name: str, **data: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}

    async with client(sim, "admin") as admin:
        for name, failure, actions in (("strict", "Fail", ["Deny"]), ("lax", "Ignore", ["Warn"])):
            policy = {"apiVersion": "admissionregistration.k8s.io/v1",
                      "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
                      "spec": {"failurePolicy": failure, "matchConstraints": rules,
                               "validations": validations}}  # fmt: skip
            assert (await admin.post(vap, json=policy)).status_code == 201
            binding = {"apiVersion": "admissionregistration.k8s.io/v1",
                       "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
                       "spec": {"policyName": name, "validationActions": actions,
                                "matchResources": {"namespaceSelector": {"matchLabels": {
                                    "kubernetes.io/metadata.name": name}}}}}  # fmt: skip
            assert (await admin.post(bindings, json=binding)).status_code == 201
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            assert (await admin.post("/api/v1/namespaces", json=namespace)).status_code == 201

        url = "/api/v1/namespaces/strict/configmaps"
        missing = await admin.post(url, json=config_map("ok-1"))
        assert missing.status_code == 422, missing.text
        assert missing.json()["reason"] == "Invalid"
        assert (
            "denied request: expression 'object.data.size == '1'' resulted in error"
            in (missing.json()["message"])
        )
        named = await admin.post(url, json=config_map("bad", size="1"))
        assert named.status_code == 422
        assert named.json()["message"].endswith(
            "denied request: failed expression: object.metadata.name.startsWith('ok')"
        )
        assert (await admin.post(url, json=config_map("ok-2", size="1"))).status_code == 201
        # Ignore skips the error; Warn does not refuse what fails.
        lax = "/api/v1/namespaces/lax/configmaps"
        assert (await admin.post(lax, json=config_map("bad"))).status_code == 201
        # Other namespaces are outside both bindings.
        assert (await admin.post("/api/v1/namespaces/default/configmaps",
                                 json=config_map("bad"))).status_code == 201  # fmt: skip


async def test_with_authentication_off_policies_see_the_administrator(
    anyio_backend: str,
) -> None:
    """Without an authenticator every request is the administrator's; a rule for
    ``deployments`` leaves ``deployments/status`` alone, as on a real server."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "frozen"},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["apps"],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": ["deployments"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": "request.userInfo.username != 'system:admin'",
                    "message": "frozen",
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "frozen"},
        "spec": {"policyName": "frozen", "validationActions": ["Deny"]},
    }
    deployment = valid_deployment("d", "default", replicas=1)
    async with SimServer() as server, httpx.AsyncClient(base_url=server.url) as http:
        for obj in (policy, binding, deployment):
            server.store.create(obj)
        url = "/apis/apps/v1/namespaces/default/deployments/d"
        stored = (await http.get(url)).json()
        stored["status"] = {"replicas": 1}
        assert (await http.put(f"{url}/status", json=stored)).status_code == 200
        stored = (await http.get(url)).json()
        stored["spec"]["replicas"] = 2
        refused = await http.put(url, json=stored)
        assert refused.status_code == 403, refused.text
        assert refused.json()["message"].endswith("denied request: frozen")
