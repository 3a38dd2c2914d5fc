"""``gpustack-operator sim --serve`` as people run it: a subprocess, kubectl, then SIGTERM."""

from __future__ import annotations

import base64
import json
import signal
import sys
from collections.abc import AsyncIterable
from pathlib import Path

import anyio
import pytest
import yaml

from tests.e2e.conftest import Kubectl

EXAMPLE_CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"
DEADLINE = 120
"""Seconds each step may take: a deadline, not a wait (each poll ends when its step
happens). A simulator's start under load (imports, the CRDs, its certificates) took over
30 s with two processes on each of the two cores."""

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(5 * DEADLINE)]

NODE_AND_FEATURE = """
apiVersion: v1
kind: Node
metadata: {name: node-a}
---
apiVersion: nfd.k8s-sigs.io/v1alpha1
kind: NodeFeature
metadata:
  name: node-a-demo
  namespace: gpustack-system
  labels: {nfd.node.kubernetes.io/node-name: node-a}
spec:
  labels: {gpustack.ai/demo: "true"}
"""


async def _read_until(stream: AsyncIterable[bytes] | None, marker: str, within: float) -> str:
    """What a process wrote to *stream* until *marker* appeared (fails after *within* s)."""
    assert stream is not None
    said = ""
    with anyio.fail_after(within):
        async for chunk in stream:
            said += chunk.decode()
            if marker in said:
                break
    return said


async def test_sim_serve_works_with_kubectl_and_stops_on_sigterm(
    kubectl_bin: Path, crd_dirs: list[Path], tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "sim-kubeconfig.yaml"
    argv = [
        sys.executable,
        "-m",
        "gpustack_operator",
        "sim",
        "--serve",
        "--kubeconfig-out",
        str(kubeconfig),
    ]
    for directory in crd_dirs:
        argv += ["--crds", str(directory)]
    process = await anyio.open_process(argv)
    try:
        banner = await _read_until(process.stdout, "kubectl get nodes", DEADLINE)
        assert f"export KUBECONFIG={kubeconfig}" in banner
        assert "not a production cluster" in banner
        assert "API server: https://127.0.0.1:" in banner
        cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
        assert cluster["server"].startswith("https://")
        assert base64.b64decode(cluster["certificate-authority-data"]).startswith(b"-----BEGIN")

        kubectl = Kubectl(kubectl_bin, kubeconfig, tmp_path / "kube-cache")
        nodes = await kubectl("get", "nodes")
        assert "No resources found" in nodes.stderr.decode()
        namespaces = await kubectl.out("get", "namespaces", "-o", "name")
        assert set(namespaces.split()) == {
            "namespace/default",
            "namespace/kube-system",
            "namespace/gpustack-system",
        }
        resources = await kubectl.out("api-resources", "-o", "name")
        assert "clusterqueues.kueue.x-k8s.io" in resources.split()
        assert "nodefeatures.nfd.k8s-sigs.io" in resources.split()

        # Over HTTPS authentication and RBAC are on, as on a kind cluster: an unknown token
        # is refused, a ServiceAccount's token is that account, with what RBAC grants it.
        bogus = await kubectl("--token", "not-a-token", "get", "namespaces", check=False)
        assert bogus.returncode != 0 and b"Unauthorized" in bogus.stderr
        with anyio.fail_after(DEADLINE):
            while True:  # the ServiceAccount stand-in creates `default`
                got = await kubectl("get", "serviceaccount", "default", check=False)
                if got.returncode == 0:
                    break
                await anyio.sleep(0.1)
        token = (await kubectl.out("create", "token", "default")).strip()
        whoami = await kubectl.out(
            "--token", token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"
        )
        assert whoami == "system:serviceaccount:default:default"
        denied = await kubectl("--token", token, "get", "nodes", check=False)
        assert denied.returncode != 0 and b"Forbidden" in denied.stderr

        await kubectl.out("apply", "-f", "-", stdin=NODE_AND_FEATURE)
        with anyio.fail_after(DEADLINE):
            while True:  # the NFD stand-in merges the NodeFeature's labels onto the Node
                node = json.loads(await kubectl.out("get", "node", "node-a", "-o", "json"))
                if node["metadata"].get("labels", {}).get("gpustack.ai/demo") == "true":
                    break
                await anyio.sleep(0.1)

        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(DEADLINE):
            code = await process.wait()
        assert code == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_sim_serve_alone_says_what_it_serves_and_takes_the_example(
    kubectl_bin: Path, tmp_path: Path
) -> None:
    """From a fresh clone (no --crds): the banner names what is served, how to seed it and the
    kubeconfig; kubectl apply validates the example and explain reads a stand-in
    (docs/simulator.md, "Using it with kubectl")."""
    kubeconfig = tmp_path / "sim-kubeconfig.yaml"
    argv = [sys.executable, "-m", "gpustack_operator", "sim", "--serve", "--plain-http"]
    process = await anyio.open_process([*argv, "--kubeconfig-out", str(kubeconfig)])
    try:
        banner = await _read_until(process.stdout, "Stop with Ctrl-C", DEADLINE)
        assert f"kubeconfig: {kubeconfig}" in banner
        assert "API server: http://127.0.0.1:" in banner  # --plain-http
        assert "no Nodes yet" in banner
        assert "stand-in CRDs" in banner and "ClusterQueue" in banner
        assert "kubectl apply -f examples/cluster.yaml" in banner
        assert "--cluster examples/cluster.yaml" in banner

        kubectl = Kubectl(kubectl_bin, kubeconfig, tmp_path / "kube-cache")
        example = EXAMPLE_CLUSTER
        assert "node/cpu-epyc-1 created" in await kubectl.out("apply", "-f", str(example))
        assert "desired state of a ClusterQueue" in await kubectl.out(
            "explain", "clusterqueue.spec"
        )
        # The ServiceAccount stand-in: a new namespace gets its `default` ServiceAccount.
        assert "ServiceAccount" in banner
        await kubectl("create", "namespace", "team")
        with anyio.fail_after(DEADLINE):
            while True:  # the stand-in creates it right after the namespace
                got = await kubectl("get", "serviceaccount", "default", "-n", "team", check=False)
                if got.returncode == 0:
                    break
                await anyio.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(DEADLINE):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_sim_serve_with_a_cluster_serves_https_and_the_operator_connects(
    kubectl_bin: Path, tmp_path: Path
) -> None:
    """``--serve --cluster``: HTTPS with the simulator's CA and the administrator's client
    certificate in the kubeconfig; the worker and the device-manager agents of the run
    connect over the same TLS, converge, and go on reconciling what kubectl changes
    (docs/simulator.md, "Using it with kubectl")."""
    kubeconfig = tmp_path / "sim-kubeconfig.yaml"
    argv = [sys.executable, "-m", "gpustack_operator", "--log-level", "warning", "sim"]
    argv += ["--serve", "--cluster", str(EXAMPLE_CLUSTER), "--kubeconfig-out", str(kubeconfig)]
    process = await anyio.open_process(argv)
    try:
        said = await _read_until(process.stderr, "Stop with Ctrl-C", DEADLINE)
        assert "API server: https://127.0.0.1:" in said
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        assert cluster["server"].startswith("https://")
        assert base64.b64decode(cluster["certificate-authority-data"]).startswith(b"-----BEGIN")
        assert base64.b64decode(user["client-certificate-data"]).startswith(b"-----BEGIN")

        kubectl = Kubectl(kubectl_bin, kubeconfig, tmp_path / "kube-cache")
        # The agents described the Nodes over TLS (their NodeFeatures are in the chain).
        features = await kubectl.out("get", "nodefeatures", "-n", "gpustack-system", "-o", "name")
        assert features.split()
        await kubectl("create", "namespace", "team-tls")
        with anyio.fail_after(DEADLINE):
            while True:  # the worker, still connected over TLS, gives it a LocalQueue
                queues = await kubectl.out("get", "localqueues", "-n", "team-tls", "-o", "name")
                if queues.split():
                    break
                await anyio.sleep(0.2)

        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(DEADLINE):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_plain_http_applies_to_a_cluster_run_too() -> None:
    """``--plain-http`` turns HTTPS off with ``--cluster`` as it does without it."""
    from gpustack_operator.cli import build_parser
    from gpustack_sim.command import build_cluster

    parser = build_parser(env={})
    tls = build_cluster(parser.parse_args(["sim", "--cluster", str(EXAMPLE_CLUSTER)]), [])
    plain = build_cluster(
        parser.parse_args(["sim", "--cluster", str(EXAMPLE_CLUSTER), "--plain-http"]), []
    )
    assert tls.sim.ca is not None
    assert plain.sim.ca is None
