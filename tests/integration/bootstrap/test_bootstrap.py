"""The bootstrap reconciler against the simulated API server (real sockets, real runtime)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.apis import NODE_FEATURE_RULES
from gpustack_operator.controllers.bootstrap import FIELD_MANAGER, KEY
from gpustack_operator.domain.bootstrap import render_nfd_crds
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.resources import (
    CLUSTER_ROLES,
    CONFIGMAPS,
    CRDS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    PODS,
    RUNTIME_CLASSES,
)
from tests.conftest import shared_crds_dir
from tests.integration.bootstrap.support import (
    ADMIN_TOKEN,
    IMAGE,
    NS,
    WORKER_TOKEN,
    bootstrap_running,
    config,
    eventually,
    get_or_none,
    idle,
    install_prerequisites,
    reconciles,
    started_sim,
)

pytestmark = pytest.mark.anyio

NVIDIA_DS = "gpustack-operator-device-manager-nvidia"
AMD_DS = "gpustack-operator-device-manager-amd"
MANAGED = {"app.kubernetes.io/managed-by": "gpustack-operator"}
RBAC_AND_CRD_KINDS = (
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
)


def env_of(ds: dict[str, Any]) -> dict[str, Any]:
    container = ds["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


async def installed(client: Client) -> bool:
    names = [
        (DAEMONSETS, NVIDIA_DS),
        (DAEMONSETS, AMD_DS),
        (DAEMONSETS, "node-feature-discovery-worker"),
        (DEPLOYMENTS, "node-feature-discovery-master"),
        (DEPLOYMENTS, "node-feature-discovery-gc"),
    ]
    for res, name in names:
        if await get_or_none(client, res, name, NS) is None:
            return False
    return await get_or_none(client, NODE_FEATURE_RULES, "gpustack-cpu-info") is not None


async def test_installs_nfd_rule_and_device_managers(tmp_path: Path) -> None:
    async with started_sim() as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
        cfg = config(
            env={
                "GPUSTACK_PCI_CLASS_PREFIXES": "03,12",
                "GPUSTACK_NVIDIA_PCI_VENDOR_ID": "0302_10de",
                "GPUSTACK_DEVICE_MANAGER_MONITOR_PERIOD": "7",
                "UNRELATED": "not propagated",
            }
        )
        async with bootstrap_running(kubeconfig, cfg) as bootstrap:
            client = bootstrap.client
            await eventually(lambda: installed(client), "every bootstrap object")
            for crd in ("nodefeatures", "nodefeaturerules", "nodefeaturegroups"):
                obj = await client.get(CRDS, f"{crd}.nfd.k8s-sigs.io")
                assert obj["metadata"]["labels"].items() >= MANAGED.items()

            ds = await client.get(DAEMONSETS, NVIDIA_DS, NS)
            pod = ds["spec"]["template"]["spec"]
            assert pod["containers"][0]["image"] == IMAGE
            assert pod["containers"][0]["args"] == [
                "device-manager",
                "serve",
                "--manufacturer=nvidia",
            ]
            assert pod["nodeSelector"] == {"feature.node.kubernetes.io/pci-10de.present": "true"}
            assert pod["runtimeClassName"] == "nvidia"
            env = env_of(ds)
            assert env["GPUSTACK_PCI_CLASS_PREFIXES"] == "03,12"
            assert env["GPUSTACK_NVIDIA_PCI_VENDOR_ID"] == "0302_10de"
            assert env["GPUSTACK_DEVICE_MANAGER_MONITOR_PERIOD"] == "7"
            assert "UNRELATED" not in env
            assert env["KUBERNETES_NODE_NAME"] == {
                "fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}
            }
            amd = (await client.get(DAEMONSETS, AMD_DS, NS))["spec"]["template"]["spec"]
            assert "runtimeClassName" not in amd
            assert {v["hostPath"]["path"] for v in amd["volumes"] if "hostPath" in v} >= {
                "/dev",
                "/sys",
                "/opt/rocm",
            }
            # Only the vendor that needs one gets a RuntimeClass.
            assert await get_or_none(client, RUNTIME_CLASSES, "nvidia") is not None
            assert await get_or_none(client, RUNTIME_CLASSES, "amd") is None

            conf = await client.get(CONFIGMAPS, "node-feature-discovery-worker-conf", NS)
            worker_conf = yaml.safe_load(conf["data"]["nfd-worker.conf"])
            assert worker_conf["sources"]["pci"] == {
                "deviceClassWhitelist": ["03", "12"],
                "deviceLabelFields": ["vendor"],
            }
            assert worker_conf["core"]["labelSources"] == ["cpu", "pci", "custom"]
            rule = await client.get(NODE_FEATURE_RULES, "gpustack-cpu-info")
            detect = rule["spec"]["rules"][1]["matchFeatures"][0]["matchExpressions"]
            assert detect["class"]["value"] == ["^03", "^12"]
            # The rule lists every known vendor, not only the configured manufacturers.
            assert "1ed5" in detect["vendor"]["value"]


async def test_steady_state_makes_no_writes(tmp_path: Path) -> None:
    async with started_sim() as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
        async with bootstrap_running(kubeconfig, config()) as bootstrap:
            await eventually(lambda: installed(bootstrap.client), "every bootstrap object")
            await eventually(lambda: idle(bootstrap), "the bootstrap queue to drain")
            sim.counters.reset()
            before = reconciles()
            bootstrap.controller.queue.add(KEY)
            await eventually(lambda: reconciles() > before, "one more reconcile")
            await eventually(lambda: idle(bootstrap), "the bootstrap queue to drain")
            assert sim.counters.writes() == 0, sim.counters.snapshot()


async def test_deleted_and_drifted_objects_are_restored(tmp_path: Path) -> None:
    async with started_sim() as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
        async with bootstrap_running(kubeconfig, config()) as bootstrap:
            client = bootstrap.client
            await eventually(lambda: installed(client), "every bootstrap object")
            old = await client.get(DAEMONSETS, NVIDIA_DS, NS)
            await client.delete(DAEMONSETS, NVIDIA_DS, NS)

            async def recreated() -> bool:
                new = await get_or_none(client, DAEMONSETS, NVIDIA_DS, NS)
                return new is not None and new["metadata"]["uid"] != old["metadata"]["uid"]

            await eventually(recreated, "the deleted DaemonSet to be re-created")

            # A person edits a managed field with another field manager: it is reverted.
            patch = {
                "spec": {
                    "template": {"spec": {"containers": [{"name": "main", "image": "evil:1"}]}}
                }
            }
            await client.patch(
                DAEMONSETS,
                AMD_DS,
                patch,
                namespace=NS,
                patch_type="strategic",
                field_manager="kubectl-edit",
            )

            async def image_restored() -> bool:
                ds = await client.get(DAEMONSETS, AMD_DS, NS)
                return bool(ds["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE)

            await eventually(image_restored, "the DaemonSet image to be restored")

            await client.patch(
                CONFIGMAPS,
                "node-feature-discovery-master-conf",
                {"data": {"nfd-master.conf": "{}"}},
                namespace=NS,
                field_manager="kubectl-edit",
            )

            async def config_restored() -> bool:
                cm = await client.get(CONFIGMAPS, "node-feature-discovery-master-conf", NS)
                return "nodeFeatureNamespaceSelector" in cm["data"]["nfd-master.conf"]

            await eventually(config_restored, "the master configuration to be restored")

            admin_config = sim.write_kubeconfig(tmp_path / "admin", token=ADMIN_TOKEN)
            async with await Client.connect(admin_config) as admin:
                await admin.delete(NODE_FEATURE_RULES, "gpustack-cpu-info")
            await eventually(
                lambda: get_or_none(client, NODE_FEATURE_RULES, "gpustack-cpu-info"),
                "the NodeFeatureRule to be re-created",
            )


async def test_missing_prerequisites_hold_back_what_needs_them(tmp_path: Path) -> None:
    """NFD's CRDs and every role ship with deploy/: the bootstrap never writes them, installs
    nothing that needs them while they are missing, and goes on once they appear
    (docs/security.md, "No escalation path")."""
    async with started_sim(prerequisites=False) as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
        before = reconciles("requeue_after")
        async with bootstrap_running(kubeconfig, config()) as bootstrap:
            client = bootstrap.client
            await eventually(
                lambda: reconciles("requeue_after") > before, "a reconcile that waits for them"
            )
            master = await get_or_none(client, DEPLOYMENTS, "node-feature-discovery-master", NS)
            assert master is None
            assert (await client.list(DAEMONSETS, NS)).items == []
            for kind in RBAC_AND_CRD_KINDS:
                assert sim.counters.writes(kind) == 0, kind
            install_prerequisites(sim)  # kubectl apply -k deploy/overlays/...
            await eventually(lambda: installed(client), "every bootstrap object")
            for kind in RBAC_AND_CRD_KINDS:
                assert sim.counters.writes(kind) == 0, kind


async def test_disabled_applications_are_not_installed(tmp_path: Path) -> None:
    async with started_sim() as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
        cfg = config(disabled=["device-manager"])
        async with bootstrap_running(kubeconfig, cfg) as bootstrap:
            client = bootstrap.client
            await eventually(
                lambda: get_or_none(client, NODE_FEATURE_RULES, "gpustack-cpu-info"),
                "the NodeFeatureRule",
            )
            await eventually(lambda: idle(bootstrap), "the bootstrap queue to drain")
            assert await get_or_none(client, DEPLOYMENTS, "node-feature-discovery-master", NS)
            listed = await client.list(DAEMONSETS, NS)
            assert [d["metadata"]["name"] for d in listed.items] == [
                "node-feature-discovery-worker"
            ]
            assert await get_or_none(client, RUNTIME_CLASSES, "nvidia") is None

    async with started_sim(prerequisites=False) as sim:
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig2", token=WORKER_TOKEN)
        async with bootstrap_running(kubeconfig, config(disabled=["*"])) as bootstrap:
            client = bootstrap.client
            before = reconciles()
            await eventually(lambda: reconciles() > before, "the first reconcile")
            await eventually(lambda: idle(bootstrap), "the bootstrap queue to drain")
            assert sim.counters.writes() == 0, sim.counters.snapshot()
            assert await get_or_none(client, CRDS, "nodefeatures.nfd.k8s-sigs.io") is None


def foreign_nfd_crds() -> list[dict[str, Any]]:
    """NFD's released CRDs when available; else ours without the ownership label."""
    shared = shared_crds_dir()
    if shared is not None:
        path = shared / "nfd-v0.19.0" / "nfd-api-crds.yaml"
        return [d for d in yaml.safe_load_all(path.read_text()) if d]
    crds = render_nfd_crds()
    for crd in crds:
        del crd["metadata"]["labels"]
    return crds


async def test_pre_existing_nfd_is_used_and_left_alone(tmp_path: Path) -> None:
    async with started_sim(foreign_nfd_crds(), prerequisites=False) as sim:
        install_prerequisites(sim, nfd=False)
        foreign_cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "node-feature-discovery-worker-conf", "namespace": NS},
            "data": {"nfd-worker.conf": "core: {}\n"},
        }
        sim.store.create(foreign_cm)
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
        async with bootstrap_running(kubeconfig, config()) as bootstrap:
            client = bootstrap.client
            await eventually(
                lambda: get_or_none(client, DAEMONSETS, NVIDIA_DS, NS), "the device managers"
            )
            await eventually(
                lambda: get_or_none(client, NODE_FEATURE_RULES, "gpustack-cpu-info"),
                "the NodeFeatureRule (needed for CPU annotations even with a foreign NFD)",
            )
            await eventually(lambda: idle(bootstrap), "the bootstrap queue to drain")
            crd = await client.get(CRDS, "nodefeatures.nfd.k8s-sigs.io")
            assert "app.kubernetes.io/managed-by" not in (crd["metadata"].get("labels") or {})
            assert all(
                m["manager"] != FIELD_MANAGER for m in crd["metadata"].get("managedFields") or []
            )
            assert (
                await get_or_none(client, DEPLOYMENTS, "node-feature-discovery-master", NS) is None
            )
            assert (
                await get_or_none(client, CLUSTER_ROLES, "gpustack-node-feature-discovery-master")
                is None
            )
            cm = await client.get(CONFIGMAPS, "node-feature-discovery-worker-conf", NS)
            assert cm["data"] == {"nfd-worker.conf": "core: {}\n"}


async def test_foreign_object_of_a_desired_name_is_left_alone(tmp_path: Path) -> None:
    async with started_sim() as sim:
        foreign = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "node-feature-discovery-master-conf", "namespace": NS},
            "data": {"nfd-master.conf": "{}"},
        }
        sim.store.create(foreign)
        # A DaemonSet of ours for a manufacturer no longer configured is removed.
        stale = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": "gpustack-operator-device-manager-metax",
                "namespace": NS,
                "labels": {**MANAGED, "app.kubernetes.io/component": "device-manager"},
            },
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "main", "image": "old"}]},
                },
            },
        }
        sim.store.create(stale)
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
        async with bootstrap_running(kubeconfig, config()) as bootstrap:
            client = bootstrap.client
            await eventually(lambda: installed(client), "every bootstrap object")
            await eventually(lambda: idle(bootstrap), "the bootstrap queue to drain")
            assert (
                await get_or_none(client, DAEMONSETS, "gpustack-operator-device-manager-metax", NS)
                is None
            )
            cm = await client.get(CONFIGMAPS, "node-feature-discovery-master-conf", NS)
            assert cm["data"] == {"nfd-master.conf": "{}"}

            admin_config = sim.write_kubeconfig(tmp_path / "admin", token=ADMIN_TOKEN)

            async def warned() -> bool:
                async with await Client.connect(admin_config) as admin:
                    events = await admin.list(EVENTS, NS)
                return any(
                    e.get("reason") == "NotManaged"
                    and e["involvedObject"]["name"] == "node-feature-discovery-master-conf"
                    for e in events.items
                )

            await eventually(warned, "a NotManaged Warning Event on the foreign ConfigMap")


async def test_image_is_read_from_the_worker_pod(tmp_path: Path) -> None:
    async with started_sim() as sim:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gpustack-operator-worker-abc", "namespace": NS},
            "spec": {
                "containers": [
                    {"name": "worker", "image": "ghcr.io/x/op:1.2", "imagePullPolicy": "Always"}
                ]
            },
        }
        sim.store.create(pod)
        kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig", token=WORKER_TOKEN)
        cfg = config(
            device_manager_image=None,
            env={"KUBERNETES_POD_NAME": "gpustack-operator-worker-abc"},
        )
        async with bootstrap_running(kubeconfig, cfg) as bootstrap:
            client = bootstrap.client
            ds = await _wait_for(client, NVIDIA_DS)
            container = ds["spec"]["template"]["spec"]["containers"][0]
            assert container["image"] == "ghcr.io/x/op:1.2"
            assert container["imagePullPolicy"] == "Always"
            assert await client.get(PODS, "gpustack-operator-worker-abc", NS)


async def _wait_for(client: Client, name: str) -> dict[str, Any]:
    await eventually(lambda: get_or_none(client, DAEMONSETS, name, NS), f"DaemonSet {name}")
    found = await get_or_none(client, DAEMONSETS, name, NS)
    assert found is not None
    return found
