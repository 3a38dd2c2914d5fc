"""Helm against a cluster for the chart's tests: the pinned binary (hack/helm.sh), the chart at a
git ref, and the install -> upgrade -> rollback -> uninstall cycle as one function that takes any
kubeconfig, so it runs against the simulated server here and against a real control plane too.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.errors import NotFound
from gpustack_operator.runtime.resources import Resource
from tests.conftest import HELM_MISSING, helm_binary, in_ci

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "gpustack-operator"
RELEASE = "gpustack-operator"
RELEASE_NAMESPACE = "default"
"""Helm's release record lives outside gpustack-system, which the chart itself creates."""
SYSTEM_NAMESPACE = "gpustack-system"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
"""The labels the chart adds to the overlays' objects (templates/_helpers.tpl)."""
PREVIOUS_CHART_REF = "HEAD"
"""The git ref of the chart version an upgrade starts from. No chart has been released yet, so
it is the committed chart; set it to the last release's tag once there is one."""


def require_helm() -> Path:
    """The pinned Helm; skips with the script's name where it is absent (fails under CI)."""
    found = helm_binary()
    if found is None:
        if in_ci():
            pytest.fail(f"CI is set and Helm is missing: {HELM_MISSING}")
        pytest.skip(HELM_MISSING)
    return found


@dataclass
class Helm:
    """Runs Helm with one kubeconfig and private cache, configuration and data folders."""

    binary: Path
    home: Path
    kubeconfig: Path | None = None
    env: dict[str, str] = field(default_factory=dict)

    def argv(self, *args: str) -> list[str]:
        kube = [f"--kubeconfig={self.kubeconfig}"] if self.kubeconfig else []
        return [str(self.binary), *kube, *args]

    def environment(self) -> dict[str, str]:
        import os

        return {
            **os.environ,
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
            **self.env,
        }

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Synchronously (rendering and linting need no server)."""
        result = subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            check=False,
            env=self.environment(),
            timeout=120,
        )
        if check and result.returncode != 0:
            output = result.stderr + result.stdout
            raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{output}")
        return result

    async def __call__(self, *args: str, check: bool = True) -> str:
        """Against the cluster, without blocking the event loop the simulated server runs on."""
        result = await anyio.run_process(self.argv(*args), check=False, env=self.environment())
        out = result.stdout.decode() + result.stderr.decode()
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{out}")
        return out

    def template(
        self, chart: Path = CHART, *args: str, namespace: str = RELEASE_NAMESPACE
    ) -> list[dict[str, Any]]:
        out = self.run("template", RELEASE, str(chart), "--namespace", namespace, *args).stdout
        return [d for d in yaml.safe_load_all(out) if d]


def chart_at(ref: str, into: Path) -> Path:
    """The chart as committed at git *ref*, extracted under *into*; skips where that commit
    has none (a ref before the chart existed)."""
    relative = CHART.relative_to(REPO).as_posix()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref, relative],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        pytest.skip(f"no chart at git ref {ref}: {archive.stderr.decode().strip()[-200:]}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / relative


def object_key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace") or "", meta["name"]


def manifest_objects(manifest: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(manifest) if d]


def resource_of(obj: dict[str, Any], namespaced: bool) -> Resource:
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = obj["kind"].lower() + ("es" if obj["kind"].endswith("s") else "s")
    if obj["kind"].endswith("y"):
        plural = obj["kind"].lower()[:-1] + "ies"
    return Resource(group, version, obj["kind"], plural, namespaced)


async def get_object(client: Client, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The server's copy of a rendered object, or None."""
    namespace = obj["metadata"].get("namespace")
    res = resource_of(obj, namespaced=bool(namespace))
    try:
        return await client.get(res, obj["metadata"]["name"], namespace)
    except NotFound:
        return None


def changed(before: Any, after: Any) -> str:
    """Which entries of two snapshots differ (their keys), for a failure message."""
    if isinstance(before, dict) and isinstance(after, dict):
        keys = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        return ", ".join(f"{k}: {before.get(k)!r:.300} -> {after.get(k)!r:.300}" for k in keys)
    return f"{before!r:.300} -> {after!r:.300}"


Snapshot = Callable[[Client], Awaitable[Any]]


@dataclass
class Lifecycle:
    """What one install -> upgrade -> rollback -> uninstall cycle saw, for the caller's checks."""

    installed: list[dict[str, Any]]
    upgraded_args: list[str]
    rolled_back_args: list[str]
    history: list[dict[str, Any]]
    left_after_uninstall: list[str]


def worker_args(obj: dict[str, Any] | None) -> list[str]:
    assert obj is not None, "the worker's Deployment is missing"
    return list(obj["spec"]["template"]["spec"]["containers"][0]["args"])


async def chart_lifecycle(
    kubeconfig: Path,
    helm: Helm,
    *,
    chart: Path = CHART,
    from_chart: Path | None = None,
    install_args: Sequence[str] = (),
    upgrade_args: Sequence[str] = (
        "--set",
        "logLevel=debug",
        "--set",
        "chain.quotaResources=credits",
    ),
    foreign: Snapshot | None = None,
    after_install: Callable[[Client], Awaitable[None]] | None = None,
) -> Lifecycle:
    """Install *from_chart* (default *chart*), upgrade to *chart* with *upgrade_args*, roll back
    to revision 1 and uninstall, on the cluster of *kubeconfig* (an administrator's). After
    each step every object of the release is checked on the server; *foreign* (a snapshot of
    objects that are not ours) must read the same after every step; *after_install* runs once
    the first release is in place (to start the worker, say)."""
    helm.kubeconfig = kubeconfig
    release = (RELEASE, "--namespace", RELEASE_NAMESPACE)
    async with await Client.connect(kubeconfig) as client:
        before = await foreign(client) if foreign else None

        async def unchanged_foreign(step: str) -> None:
            if foreign is not None:
                after = await foreign(client)
            assert after == before, f"foreign objects changed by {step}: " + changed(before, after)

        async def release_objects(step: str) -> list[dict[str, Any]]:
            manifest = await helm("get", "manifest", *release)
            objects = manifest_objects(manifest)
            assert objects, f"{step}: the release holds no object"
            for obj in objects:
                live = await get_object(client, obj)
                assert live is not None, f"{step}: {object_key(obj)} missing on the server"
                annotations = live["metadata"].get("annotations") or {}
                assert annotations.get("meta.helm.sh/release-name") == RELEASE, object_key(obj)
                assert (live["metadata"].get("labels") or {}).get(
                    "app.kubernetes.io/managed-by"
                ) == "Helm", object_key(obj)
            return objects

        await helm("install", *release, str(from_chart or chart), *install_args)
        installed = await release_objects("install")
        await unchanged_foreign("install")
        if after_install is not None:
            await after_install(client)
            await unchanged_foreign("the worker's start")
        deployment = next(o for o in installed if o["kind"] == "Deployment")

        await helm("upgrade", *release, str(chart), *install_args, *upgrade_args)
        await release_objects("upgrade")
        upgraded = worker_args(await get_object(client, deployment))
        await unchanged_foreign("upgrade")

        await helm("rollback", *release, "1")
        objects = await release_objects("rollback")
        rolled_back = worker_args(await get_object(client, deployment))
        await unchanged_foreign("rollback")
        history = json.loads(await helm("history", *release, "-o", "json"))

        await helm("uninstall", *release, "--wait")
        left = []
        for obj in objects:
            if await get_object(client, obj) is not None:
                left.append("/".join(object_key(obj)))
        await unchanged_foreign("uninstall")
        assert "not found" in (await helm("status", *release, check=False)).lower()
    return Lifecycle(installed, upgraded, rolled_back, history, left)
