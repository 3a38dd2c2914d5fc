"""The deployment as shipped: kustomize overlays, the bootstrap's objects, the image recipe.

- every overlay renders with the real ``kubectl kustomize`` and validates strictly against the
  Kubernetes schemas bundled with ``kubernetes-validate``;
- ``checkov`` finds nothing in the rendered manifests and the bootstrap's rendered objects but
  the findings docs/security.md accepts (one checkov run per session, ~20 s);
- the Dockerfile installs the project from the lock file, as a wheel that carries both
  packages and the console script (checked offline with uv);
- docs/configuration.md lists every flag of every subcommand.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpustack_operator.cli import build_parser
from gpustack_operator.domain.bootstrap import (
    BootstrapSettings,
    render_cpu_info_rule,
    render_device_manager,
    render_nfd,
    render_runtime_classes,
)

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = ("release", "dev", "release-k8s-1.30")
# A widely deployed release among those kubernetes-validate bundles (it works offline).
KUBERNETES_VERSION = "1.33.0"
RELEASE_IMAGE = "docker.io/gpustack/gpustack-operator:v0.1.0"


def kustomize(kubectl: Path, directory: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(kubectl), "kustomize", str(directory)], check=True, capture_output=True, text=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def bootstrap_objects() -> list[dict[str, Any]]:
    """Everything the bootstrap can install, for every manufacturer, as the release runs it
    (NFD's CRDs and all RBAC ship with the overlays)."""
    settings = BootstrapSettings(image_pull_policy="Always")
    manufacturers = settings.manufacturers
    return [
        *render_nfd(settings),
        render_cpu_info_rule(settings.pci_class_prefixes, manufacturers),
        *render_device_manager(settings, sorted(manufacturers), RELEASE_IMAGE),
        *render_runtime_classes(manufacturers.values()),
    ]


@pytest.fixture(scope="module")
def rendered(kubectl_bin: Path) -> dict[str, list[dict[str, Any]]]:
    out = {name: kustomize(kubectl_bin, REPO / "deploy" / "overlays" / name) for name in OVERLAYS}
    out["bootstrap"] = bootstrap_objects()
    return out


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"{kind} {name} not rendered")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_the_worker(rendered: dict[str, Any], overlay: str) -> None:
    objects = rendered[overlay]
    kinds = sorted({o["kind"] for o in objects})
    # No CRD: kubectl apply would relabel another NFD's as ours, and delete -k would delete
    # them (make deploy creates NFD's CRDs only where none exist, docs/deploy.md).
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Namespace",
        "NetworkPolicy",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    cluster_scoped = {k for k in kinds if k.startswith(("Cluster", "Custom", "Validating"))}
    for obj in objects:
        if obj["kind"] not in {"Namespace", *cluster_scoped}:
            assert obj["metadata"]["namespace"] == "gpustack-system", obj["metadata"]["name"]
    deployment = find(objects, "Deployment", "gpustack-operator-worker")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    expected_image = "gpustack-operator:dev" if overlay == "dev" else RELEASE_IMAGE
    assert container["image"] == expected_image
    security = container["securityContext"]
    assert security["runAsNonRoot"] and security["readOnlyRootFilesystem"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["resources"]["limits"] and container["resources"]["requests"]
    service = find(objects, "Service", "gpustack-operator-worker-metrics")
    assert service["spec"]["ports"][0]["port"] == 8080
    # The container's command line is one the real CLI accepts.
    args = build_parser({}).parse_args(container["args"])
    assert args.handler.__name__ == "run_worker"
    env = {e["name"] for e in container["env"]}
    assert {"KUBERNETES_POD_NAME", "KUBERNETES_POD_NAMESPACE"} <= env


def test_the_pre_1_32_overlay_is_the_release_without_the_node_bound_policy(
    rendered: dict[str, Any],
) -> None:
    """deploy/overlays/release-k8s-1.30 (docs/deploy.md, "Prerequisites")."""

    def names(overlay: str) -> set[tuple[str, str]]:
        return {(o["kind"], o["metadata"]["name"]) for o in rendered[overlay]}

    bound = "gpustack-operator-device-manager-own-node"
    assert names("release") - names("release-k8s-1.30") == {
        ("ValidatingAdmissionPolicy", bound),
        ("ValidatingAdmissionPolicyBinding", bound),
    }
    assert names("release-k8s-1.30") <= names("release")


@pytest.mark.parametrize("source", [*OVERLAYS, "bootstrap"])
def test_manifests_validate_strictly(rendered: dict[str, Any], source: str) -> None:
    checked = 0
    for obj in rendered[source]:
        if obj["apiVersion"].startswith("nfd.k8s-sigs.io/"):
            continue  # a custom kind: validated against its CRDs in tests/unit/bootstrap
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        checked += 1
    assert checked


def test_invalid_manifest_is_rejected() -> None:
    """The validator really validates (guards against a silently permissive setup)."""
    bad = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": 80, "bogus": True}]},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


# --- checkov ------------------------------------------------------------------------------


def accepted_findings() -> list[tuple[str, list[str]]]:
    """(check id, resource globs) from the table in docs/security.md."""
    text = (REPO / "docs" / "security.md").read_text()
    rows = []
    for line in text.splitlines():
        match = re.match(r"\|\s*`(CKV2?_K8S_\d+)`\s*\|(.*?)\|", line)
        if match:
            rows.append((match.group(1), re.findall(r"`([^`]+)`", match.group(2))))
    assert rows, "docs/security.md lists no accepted checkov findings"
    return rows


@pytest.fixture(scope="module")
def checkov_failures(
    rendered: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> list[tuple[str, str]]:
    checkov = shutil.which("checkov", path=str(Path(sys.executable).parent))
    if checkov is None:
        pytest.skip("checkov not found next to the Python interpreter (uv sync installs it)")
    directory = tmp_path_factory.mktemp("manifests")
    for name, objects in rendered.items():
        (directory / f"{name}.yaml").write_text(yaml.safe_dump_all(objects))
    result = subprocess.run(
        [
            checkov,
            "-d",
            str(directory),
            "--framework",
            "kubernetes",
            "--quiet",
            "--compact",
            "--skip-download",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.stdout.strip(), f"checkov printed nothing: {result.stderr[-2000:]}"
    reports = json.loads(result.stdout)
    failures = []
    for report in reports if isinstance(reports, list) else [reports]:
        for failed in report.get("results", {}).get("failed_checks", []):
            failures.append((failed["check_id"], failed["resource"]))
    return failures


def test_checkov_finds_only_accepted_issues(checkov_failures: list[tuple[str, str]]) -> None:
    accepted = accepted_findings()

    def is_accepted(check: str, resource: str) -> bool:
        return any(
            check == c and any(fnmatch.fnmatchcase(resource, g) for g in globs)
            for c, globs in accepted
        )

    unexpected = sorted({f for f in checkov_failures if not is_accepted(*f)})
    assert not unexpected, "checkov findings not accepted in docs/security.md:\n" + "\n".join(
        f"{c} {r}" for c, r in unexpected
    )
    stale = [
        c
        for c, globs in accepted
        if not any(
            c == fc and any(fnmatch.fnmatchcase(r, g) for g in globs) for fc, r in checkov_failures
        )
    ]
    assert not stale, f"docs/security.md accepts findings checkov no longer reports: {stale}"


# --- the image recipe ---------------------------------------------------------------------


def dockerfile_stages() -> list[list[str]]:
    stages: list[list[str]] = []
    for raw in (REPO / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    builder, final = dockerfile_stages()
    # One base for both stages, a build argument whose default is the public Python image
    # (make image-test passes a Debian base it makes itself, docs/deploy.md).
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.12-slim$", text, re.M), "BASE_IMAGE default"
    assert builder[0] == "FROM ${BASE_IMAGE} AS builder"
    assert final[0] == "FROM ${BASE_IMAGE}"
    text = "\n".join(builder)
    # The image builds with the uv that `make install` bootstraps (one pinned version).
    pinned = re.search(r"^UV_VERSION \?= (\S+)$", (REPO / "Makefile").read_text(), re.M)
    assert pinned, "Makefile pins no UV_VERSION"
    assert f"uv=={pinned.group(1)}" in text
    assert "uv sync --frozen --no-dev --extra amd --no-editable" in text
    final_text = "\n".join(final)
    for forbidden in ("pip install", "uv ", "apt-get", "gcc", "build-essential"):
        assert forbidden not in final_text, f"final stage must not run {forbidden!r}"
    assert "COPY --from=builder /opt/venv /opt/venv" in final
    assert "USER 65532:65532" in final
    assert 'ENTRYPOINT ["gpustack-operator"]' in final


def test_docker_context_has_what_the_dockerfile_copies() -> None:
    ignored = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for stage in dockerfile_stages():
        for line in stage:
            if not line.startswith("COPY ") or "--from=" in line:
                continue
            for source in line.split()[1:-1]:
                assert (REPO / source).exists(), f"COPY {source}: not in the repository"
                assert source not in ignored, f"COPY {source}: excluded by .dockerignore"


def uv() -> Path:
    found = shutil.which("uv") or (
        str(REPO / ".tools" / "bin" / "uv") if (REPO / ".tools" / "bin" / "uv").exists() else None
    )
    if found is None:
        pytest.skip("uv not found (make install bootstraps it into .tools/)")
    return Path(found)


def test_locked_install_and_wheel(tmp_path: Path) -> None:
    """What the builder stage installs, checked offline: the lock matches pyproject.toml
    (``--locked`` fails otherwise, where the Dockerfile's ``--frozen`` would not notice), the
    amd extra resolves, and the project wheel carries both packages and the console script."""
    binary = uv()
    export = subprocess.run(
        [
            str(binary),
            "export",
            "--offline",
            "--locked",
            "--no-dev",
            "--extra",
            "amd",
            "--no-emit-project",
            "--no-hashes",
            "-q",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert export.returncode == 0, export.stderr
    pinned = {line.split("==")[0] for line in export.stdout.splitlines() if "==" in line}
    # kr8s reads the credentials (docs/runtime.md, "Credentials"): a runtime dependency.
    assert {"anyio", "aiohttp", "pydantic", "structlog", "amdsmi", "kr8s"} <= pinned
    assert not {"pytest", "ruff", "mypy", "checkov", "kubernetes"} & pinned, (
        "dev tools leak into the image"
    )
    build = subprocess.run(
        [str(binary), "build", "--offline", "--wheel", "--out-dir", str(tmp_path), "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if build.returncode != 0 and "offline" in build.stderr.lower():
        pytest.skip(f"the build backend is not in uv's cache (offline): {build.stderr[-300:]}")
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("gpustack_operator-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        scripts = archive.read(entry_points).decode()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    # `pip install` of the wheel without extras pulls kr8s.
    requires = [
        line.split(":", 1)[1].strip()
        for line in metadata.decode().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert any(r.startswith("kr8s") for r in requires), requires
    assert "gpustack_operator/cli.py" in names
    # One top-level package: the reconcilers ship inside it, nothing generic such as
    # ``controllers`` lands in site-packages (README.md, "Layout").
    assert "gpustack_operator/controllers/bootstrap.py" in names
    top = {name.split("/", 1)[0] for name in names}
    assert {name for name in top if not name.endswith(".dist-info")} == {"gpustack_operator"}
    assert "gpustack_operator/domain/bootstrap/crds.py" in names
    assert "gpustack-operator = gpustack_operator.cli:main" in scripts


# --- docs/configuration.md ----------------------------------------------------------------


def command_flags(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_flags(sub, (*path, name))
            continue
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                yield path, option


def test_configuration_doc_lists_every_flag() -> None:
    text = (REPO / "docs" / "configuration.md").read_text()
    sections: dict[str, str] = {}
    for chunk in re.split(r"^### ", text, flags=re.MULTILINE)[1:]:
        title, _, body = chunk.partition("\n")
        sections[title.strip().strip("`")] = body
    missing = []
    for path, option in command_flags(build_parser({})):
        title = " ".join(("gpustack-operator", *path))
        if path and path[-1] == "device-manager" and len(path) == 1:
            continue
        if f"`{option}`" not in sections.get(title, ""):
            missing.append(f"{title} {option}")
    assert not missing, "docs/configuration.md does not list:\n" + "\n".join(missing)


# --- the Makefile -------------------------------------------------------------------------


def test_make_help_aligns_its_columns() -> None:
    if shutil.which("make") is None:
        pytest.skip("make not found")
    out = subprocess.run(
        ["make", "-s", "--no-print-directory", "help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [line for line in out.splitlines() if line.strip()]
    targets = set(re.findall(r"^([a-z-]+):.*## ", (REPO / "Makefile").read_text(), re.M))
    assert {line.split()[0] for line in lines} == targets
    # Every description starts in the same column, past the longest target's name.
    starts = {len(line) - len(line.lstrip()[len(line.split()[0]) :].lstrip()) for line in lines}
    assert len(starts) == 1, out
    assert starts.pop() > max(len(t) for t in targets) + 2
