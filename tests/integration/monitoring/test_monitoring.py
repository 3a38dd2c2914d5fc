"""The monitoring component (deploy/components/monitoring, docs/monitoring.md) checked with
Prometheus' own tools: the rules load, every alert fires on the series meant to raise it and
stays quiet on healthy ones, every dashboard query parses, and the worker's and the agent's
/metrics pass ``promtool check metrics`` and export every name the rules and panels use."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from gpustack_operator.devicemanager.detectors.nvidia import NvidiaDetector
from gpustack_operator.devicemanager.metrics import register_device_metrics
from gpustack_operator.runtime import metrics as runtime_metrics
from gpustack_sim.cluster.cluster import SimCluster
from tests.integration.chain.support import example_nodes
from tests.unit.devicemanager.fakes import FakeNvml, tesla_t4

HERE = Path(__file__).resolve().parent
BUNDLE = HERE.parents[2] / "deploy" / "components" / "monitoring"

# Names the rules use that neither process exports: Prometheus' own `up`, kube-state-metrics'
# DaemonSet status, and the worker's Kueue-configuration gauge (docs/monitoring.md, "Alerts").
FOREIGN = {"up", "kube_daemonset_status_number_unavailable", "gpustack_kueue_configuration_missing"}
OURS = re.compile(r"\b((?:controller_runtime|workqueue|leader_election|rest_client|gpustack)_\w+)")


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip(
            "promtool not found: install Debian's prometheus package "
            "(apt-get install prometheus), as .ci/run does"
        )
    return found


def _run(argv: list[str], stdin: str | None = None, cwd: Path | None = None) -> str:
    result = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, cwd=cwd, timeout=60, check=False
    )
    assert result.returncode == 0, f"{' '.join(argv)}:\n{result.stdout}{result.stderr}"
    return result.stdout + result.stderr


def _groups() -> list[dict[str, Any]]:
    rule = yaml.safe_load((BUNDLE / "prometheusrule.yaml").read_text())
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _alerts() -> set[str]:
    return {r["alert"] for g in _groups() for r in g["rules"] if "alert" in r}


def _dashboard_queries() -> list[str]:
    dashboard = json.loads((BUNDLE / "dashboard.json").read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert all(p.get("targets") for p in dashboard["panels"] if p["type"] != "row")
    return queries


def test_rules_pass_promtool_check(promtool: str, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": _groups()}))
    out = _run([promtool, "check", "rules", str(rules)])
    assert f"SUCCESS: {sum(len(g['rules']) for g in _groups())} rules found" in out


def test_every_alert_fires_and_stays_quiet(promtool: str, tmp_path: Path) -> None:
    cases = yaml.safe_load((HERE / "alerts-test.yaml").read_text())
    checks = [c for test in cases["tests"] for c in test["alert_rule_test"]]
    assert {c["alertname"] for c in checks if c["exp_alerts"]} == _alerts()
    assert {c["alertname"] for c in checks if not c["exp_alerts"]} == _alerts()
    stripped = [
        {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
        for g in _groups()
    ]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": stripped}))
    shutil.copy(HERE / "alerts-test.yaml", tmp_path / "alerts-test.yaml")
    assert "SUCCESS" in _run([promtool, "test", "rules", "alerts-test.yaml"], cwd=tmp_path)


def test_every_dashboard_query_parses(promtool: str, tmp_path: Path) -> None:
    """Grafana's variables are replaced by values they take, then each query is loaded as a
    recording rule, which promtool parses."""
    queries = _dashboard_queries()
    rules = [
        {"record": f"dashboard:query_{i}", "expr": q.replace("$__rate_interval", "5m")}
        for i, q in enumerate(queries)
    ]
    for rule in rules:
        rule["expr"] = rule["expr"].replace('=~"$node"', '=~".*"')
        assert "$" not in rule["expr"], rule["expr"]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert f"SUCCESS: {len(rules)} rules found" in _run([promtool, "check", "rules", str(path)])


@pytest.mark.anyio
async def test_metrics_pass_promtool_and_cover_every_name_used(promtool: str) -> None:
    """The worker's and the agents' /metrics are ``generate_latest`` of the runtime registry
    (runtime/probes.py); the agent adds its per-device collector to it."""
    async with SimCluster(example_nodes(), ["default"]) as cluster:
        await cluster.converge(60)
        worker = generate_latest(runtime_metrics.REGISTRY).decode()
    devices = CollectorRegistry()
    nvml = FakeNvml([tesla_t4("GPU-a", utilization=50, memory_used_mib=2048, power_mw=40_000)])
    register_device_metrics(devices, "gpu-1", [NvidiaDetector(nvml)])
    agent = generate_latest(devices).decode()
    for text in (worker, agent):
        _run([promtool, "check", "metrics"], stdin=text)

    # Sampled series, and families declared with no series yet (the leader gauge of a worker
    # that runs without leader election, as in the simulator).
    lines = (worker + agent).splitlines()
    exported = {line.split("{")[0].split(" ")[0] for line in lines if not line.startswith("#")}
    exported |= {line.split()[2] for line in lines if line.startswith("# TYPE ")}
    used = {
        name
        for expr in [*_dashboard_queries(), *(r["expr"] for g in _groups() for r in g["rules"])]
        for name in OURS.findall(expr)
    }
    assert used - FOREIGN <= exported, sorted(used - FOREIGN - exported)
