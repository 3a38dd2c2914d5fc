"""The Helm chart as shipped (deploy/helm/gpustack-operator, docs/deploy.md "Helm"), rendered
with the pinned Helm, no cluster needed:

- its generated templates are what hack/helm_chart.py writes from the overlays today;
- every values profile lints clean with ``helm lint --strict`` and renders the overlay it stands
  for object for object (modulo Helm's own labels), NFD's CRDs those of deploy/nfd-crds;
- the rendered manifests validate strictly against the Kubernetes schemas;
- values.schema.json refuses a misspelt value by its name;
- the chain values are exactly the worker's chain flags and render a command line the real
  CLI parses into the chain policy asked for; teams and declared pools become the ConfigMaps
  the worker watches;
- docs/deploy.md gives every value; ``make chart`` packages the chart at the project's version.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpustack_operator.cli import build_parser
from gpustack_operator.commands.worker import build_config, build_options
from gpustack_operator.domain.bootstrap import installed_by_us, render_nfd_crds
from gpustack_operator.domain.chain.declaredpools import (
    DECLARED_POOLS_CONFIGMAP,
    DECLARED_POOLS_KEY,
)
from gpustack_operator.domain.chain.teams import TEAMS_CONFIGMAP, TEAMS_KEY
from tests.e2e.helm import CHART, HELM_LABELS, RELEASE_NAMESPACE, Helm, require_helm
from tests.e2e.test_deploy import KUBERNETES_VERSION, kustomize

REPO = Path(__file__).resolve().parents[2]
PROFILES = {
    "release": None,
    "release-k8s-1.30": CHART / "ci" / "release-k8s-1.30-values.yaml",
    "dev": CHART / "ci" / "dev-values.yaml",
    "monitoring": CHART / "ci" / "monitoring-values.yaml",
}
"""Each overlay and the values file that makes the chart render it (none: the defaults)."""
NOT_CHAIN_VALUES = {"--teams", "--declared-pools", "--system-namespace", "--namespace"}
"""Chain flags the chart sets otherwise: teams and declared pools as the ConfigMaps the worker
watches, the system namespace as the Pod's (the chart installs into gpustack-system)."""


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(require_helm(), tmp_path_factory.mktemp("helm"))


def values_args(profile: str) -> list[str]:
    path = PROFILES[profile]
    return ["-f", str(path)] if path else []


def project_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def generator() -> Any:
    spec = importlib.util.spec_from_file_location("helm_chart", REPO / "hack" / "helm_chart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_templates_are_what_the_overlays_give(kubectl_bin: Path) -> None:
    for path, text in generator().files().items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(REPO)} differs from the overlays: run "
            ".venv/bin/python hack/helm_chart.py"
        )


@pytest.mark.parametrize("profile", PROFILES)
def test_every_values_profile_lints_clean(helm: Helm, profile: str) -> None:
    result = helm.run("lint", "--strict", str(CHART), *values_args(profile), check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    labels = out["metadata"].get("labels") or {}
    for key in HELM_LABELS:
        labels.pop(key, None)
    return out


@pytest.mark.parametrize("profile", PROFILES)
def test_the_chart_renders_the_overlay_object_for_object(
    helm: Helm, kubectl_bin: Path, profile: str
) -> None:
    rendered = helm.template(CHART, *values_args(profile))
    chart_labels = {"helm.sh/chart": f"gpustack-operator-{project_version()}"}
    for obj in rendered:
        labels = obj["metadata"].get("labels") or {}
        assert {k: labels.get(k) for k in HELM_LABELS} == {
            **chart_labels,
            "app.kubernetes.io/managed-by": "Helm",
        }, obj["metadata"]["name"]
    crds = [o for o in rendered if o["kind"] == "CustomResourceDefinition"]
    chart = {
        (o["kind"], o["metadata"]["name"]): without_helm_labels(o)
        for o in rendered
        if o["kind"] != "CustomResourceDefinition"
    }
    overlay = {
        (o["kind"], o["metadata"]["name"]): without_helm_labels(o)
        for o in kustomize(kubectl_bin, REPO / "deploy" / "overlays" / profile)
    }
    assert sorted(chart) == sorted(overlay)
    for key, obj in overlay.items():
        assert chart[key] == obj, f"{key} differs from deploy/overlays/{profile}"
    # NFD's CRDs: those make deploy creates (deploy/nfd-crds), where the cluster has none.
    shipped = {
        c["metadata"]["name"]: without_helm_labels(c)
        for c in (
            yaml.safe_load(p.read_text()) for p in (REPO / "deploy" / "nfd-crds").glob("*.yaml")
        )
    }
    assert {c["metadata"]["name"]: without_helm_labels(c) for c in crds} == shipped


@pytest.mark.parametrize("profile", PROFILES)
def test_rendered_manifests_validate_strictly(helm: Helm, profile: str) -> None:
    checked = 0
    for obj in helm.template(CHART, *values_args(profile)):
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # the Prometheus Operator's kinds: no schema here (docs/monitoring.md)
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        checked += 1
    assert checked >= 25


@pytest.mark.parametrize(
    ("setting", "name"),
    [
        ("imge.tag=v1", "imge"),
        ("image.tga=v1", "tga"),
        ("chain.quotaResource=credits", "quotaResource"),
        ("leaderElection.enable=false", "enable"),
        ("monitoring.enable=true", "enable"),
        ("logLevel=verbose", "logLevel"),
        ("chain.quotaResources=gpus", "quotaResources"),
    ],
)
def test_a_values_typo_is_refused_by_name(helm: Helm, setting: str, name: str) -> None:
    result = helm.run(
        "template", "x", str(CHART), "--namespace", RELEASE_NAMESPACE, "--set", setting, check=False
    )
    assert result.returncode != 0, f"--set {setting} was accepted"
    assert name in result.stderr, result.stderr


def test_installing_into_the_system_namespace_is_refused_with_the_fix(helm: Helm) -> None:
    result = helm.run("template", "x", str(CHART), "--namespace", "gpustack-system", check=False)
    assert result.returncode != 0
    assert "install the release in another namespace" in result.stderr, result.stderr


def chain_flags() -> set[str]:
    worker = build_parser({})._subparsers._group_actions[0].choices["worker"]  # type: ignore[union-attr]
    (group,) = [g for g in worker._action_groups if g.title and g.title.startswith("the chain")]
    return {o for a in group._group_actions for o in a.option_strings} - NOT_CHAIN_VALUES


def kebab(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def test_the_chain_values_are_the_workers_chain_flags() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert {f"--{kebab(k)}" for k in values["chain"]} == chain_flags()


CHAIN_SETTINGS = {
    "manufacturer": ["nvidia", "amd"],
    "excludedNamespaces": "kube-system,batch",
    "kueueVersion": "v1beta1",
    "quotaResources": "credits",
    "flavorTolerations": "none",
    "topology": "off",
    "tenancy": "ordinary",
    "virtualScheduler": True,
    "tenantQuotaCap": "nvidia.com/gpu=4",
    "unpooledSettling": "30s",
    "provisioningRequests": "off",
    "softGrace": "60s",
    "maintenanceGrace": "10m",
    "joinWindow": "45s",
    "deviceGrace": "2m",
    "hostCounting": "once",
}


def worker_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def test_values_render_a_command_line_the_worker_takes(helm: Helm, tmp_path: Path) -> None:
    values = {
        "chain": CHAIN_SETTINGS,
        "logLevel": "warning",
        "logFormat": "json",
        "leaderElection": {
            "enabled": True,
            "leaseDuration": "30s",
            "renewDeadline": "20s",
            "retryPeriod": "5s",
        },
        "extraArgs": ["--max-concurrent-reconciles=4"],
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    args = worker_container(helm.template(CHART, "-f", str(tmp_path / "values.yaml")))["args"]
    parsed = build_parser({}).parse_args(args)
    assert parsed.log_level == "warning" and parsed.log_format == "json"
    assert set(chain_flags()) <= {a.split("=")[0] for a in args if a.startswith("--")}
    policy = build_config(parsed).policy
    assert sorted(policy.manufacturers) == ["amd", "nvidia"]
    assert policy.quota_resources == "credits"
    assert policy.virtual_scheduler is True
    assert dict(policy.tenant_quota_caps) == {"nvidia.com/gpu": 4}
    assert policy.unpooled_settling == 30.0
    assert "batch" in policy.excluded_namespaces
    assert policy.host_counting.value == "once"
    assert parsed.max_concurrent_reconciles == 4
    election = build_options(parsed).leader_election
    assert election is not None and election.lease_duration == 30.0
    # The defaults leave every flag to the worker, and leader election off is one flag.
    args = worker_container(helm.template(CHART, "--set", "leaderElection.enabled=false"))["args"]
    assert args == ["worker", "--no-leader-elect"]


def test_teams_and_declared_pools_become_the_configmaps_the_worker_watches(helm: Helm) -> None:
    teams = REPO / "examples" / "teams" / "teams.yaml"
    pools = REPO / "examples" / "autoscaling" / "declared-pools.yaml"
    objects = helm.template(
        CHART, "--set-file", f"teams={teams}", "--set-file", f"declaredPools={pools}"
    )
    maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    assert maps[TEAMS_CONFIGMAP]["data"] == {TEAMS_KEY: teams.read_text()}
    assert maps[DECLARED_POOLS_CONFIGMAP]["data"] == {DECLARED_POOLS_KEY: pools.read_text()}
    for obj in (maps[TEAMS_CONFIGMAP], maps[DECLARED_POOLS_CONFIGMAP]):
        assert obj["metadata"]["namespace"] == "gpustack-system"
    assert not [o for o in helm.template(CHART) if o["kind"] == "ConfigMap"]


def value_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in ("resources",):
            out.extend(value_paths(value, f"{path}."))
        else:
            out.append(path)
    return out


def test_docs_give_every_value() -> None:
    text = (REPO / "docs" / "deploy.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [p for p in value_paths(values) if f"`{p}`" not in text]
    assert not missing, f"docs/deploy.md does not give these chart values: {missing}"


def test_chart_version_is_the_project_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == project_version()


def test_make_chart_packages_it_at_the_project_version(helm: Helm, tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("make not found")
    result = subprocess.run(
        [
            "make",
            "-s",
            "--no-print-directory",
            "chart",
            f"CHART_DIR={tmp_path}",
            f"HELM={helm.binary}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        env=helm.environment(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (package,) = tmp_path.glob("*.tgz")
    assert package.name == f"gpustack-operator-{project_version()}.tgz"
    with tarfile.open(package) as tar:
        names = tar.getnames()
        chart = yaml.safe_load(tar.extractfile("gpustack-operator/Chart.yaml").read())  # type: ignore[union-attr]
    assert chart["version"] == chart["appVersion"] == project_version()
    assert "gpustack-operator/values.schema.json" in names
    assert "gpustack-operator/templates/NOTES.txt" in names


def test_the_worker_counts_the_charts_nfd_crds_as_ours() -> None:
    """installed_by_us and the chart's nfdCrdIsOurs apply one rule (docs/deploy.md, "Helm")."""
    crd = render_nfd_crds()[0]
    meta = crd["metadata"]
    meta["labels"] = {
        **meta["labels"],
        "app.kubernetes.io/managed-by": "Helm",
        "helm.sh/chart": f"gpustack-operator-{project_version()}",
    }
    meta["annotations"] = {"meta.helm.sh/release-name": "gpustack-operator"}
    assert installed_by_us(crd)
    meta["labels"]["helm.sh/chart"] = "node-feature-discovery-0.17.3"
    assert not installed_by_us(crd)
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert 'hasPrefix "gpustack-operator-" (get $labels "helm.sh/chart"' in helpers
    assert '"app.kubernetes.io/managed-by" | toString) "gpustack-operator"' in helpers
    assert 'hasKey $annotations "meta.helm.sh/release-name"' in helpers
