"""``gpustack-operator plan``: table/yaml/json output on examples/, bad input, live cluster."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from gpustack_operator.cli import main

from . import test_crd_schemas as crds

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "cluster.yaml"


def run_plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_reads_as_a_tree(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_plan(capsys, "--nodes", str(EXAMPLE), "--namespaces", "default,team-a")
    assert code == 0, err
    assert out.startswith("Nodes: 9 (8 managed)")
    assert (
        "gpu-t4-1         yes      intel-xeon-platinum-8358-ln-x64         nvidia-tesla-t4 x2"
        in out
    )
    assert "Cohort gpustack--intel-xeon-platinum-8358-ln-x64-4c-16g--nvidia-tesla-t4-1d" in out
    assert (
        "└─ ClusterQueue gpustack--intel-xeon-platinum-8358-ln-x64-4c-16g--nvidia-tesla-t4-1d"
        in out
    )
    assert "nodes=2  cpu=16 memory=64Gi ephemeral-storage=192Gi nvidia.com/gpu=4" in out
    assert "(no borrowing: sliced)" in out
    assert "in default, team-a" in out
    assert "cpu-opted-out" in out and "cpu-opted-out    no" in out


def test_json_is_one_v1_list_that_validates(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_plan(capsys, "--nodes", str(EXAMPLE), "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    kinds = [item["kind"] for item in doc["items"]]
    order = ["NodeFeature", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue"]
    assert kinds == sorted(kinds, key=order.index)
    namespaces = {i["metadata"]["namespace"] for i in doc["items"] if i["kind"] == "LocalQueue"}
    assert namespaces == {"default"}
    if crds.CRDS is not None:
        for item in doc["items"]:
            crds.validate(item)


def test_yaml_reparses_to_the_same_list(capsys: pytest.CaptureFixture[str]) -> None:
    _, as_json, _ = run_plan(capsys, "--nodes", str(EXAMPLE), "-o", "json")
    code, as_yaml, _ = run_plan(capsys, "--nodes", str(EXAMPLE), "-o", "yaml")
    assert code == 0
    parsed = yaml.safe_load(as_yaml)
    assert parsed == json.loads(as_json)
    if crds.CRDS is None:
        pytest.skip("real CRDs not found: put them in ../shared/crds or set GPUSTACK_SHARED_CRDS")
    for item in parsed["items"]:
        crds.validate(item)


def test_multi_document_input_and_namespace_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = yaml.safe_load(EXAMPLE.read_text())["items"][:2]
    items.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-x"}})
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump_all(items))
    code, out, _ = run_plan(capsys, "--nodes", str(path), "-o", "json")
    assert code == 0
    lqs = [i for i in json.loads(out)["items"] if i["kind"] == "LocalQueue"]
    assert {i["metadata"]["namespace"] for i in lqs} == {"team-x"}


def test_v1beta1_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_plan(
        capsys, "--nodes", str(EXAMPLE), "-o", "json", "--kueue-api-version", "v1beta1"
    )
    assert code == 0
    queues = [i for i in json.loads(out)["items"] if i["kind"] == "ClusterQueue"]
    assert queues and all("cohort" in q["spec"] for q in queues)


def test_deprecated_kueue_api_version_is_accepted_but_not_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--help"])
    assert exit_info.value.code == 0
    out, _ = capsys.readouterr()
    assert "--kueue-version" in out
    assert "--kueue-api-version" not in out


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("a: [unclosed", "not valid YAML at line"),
        ("", "no Node objects found"),
        ("apiVersion: v1\nkind: List\nitems: []\n", "no Node objects found"),
        ("- 1\n- 2\n", "is not a Kubernetes object"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p1}\n", "kind Pod (p1) is not a Node"),
        ("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n", "Node n1 has no status"),
        ("apiVersion: v1\nkind: Node\nmetadata: {}\nstatus: {}\n", "Node #1 has no metadata.name"),
        ("apiVersion: v1\nkind: Node\nmetadata: {name: N_1}\nstatus: {}\n", "invalid name"),
        (
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  annotations:\n"
            '    sim.gpustack.ai/devices: \'[{"manufacturer": "acme", "name": "X", '
            '"memoryMiB": 1}]\'\nstatus: {}\n',
            "node n1: sim.gpustack.ai/devices[0]: unknown manufacturer 'acme'",
        ),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {}\n---\n"
            "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {}\n",
            "Node n1 appears twice",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, needle: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    code, out, err = run_plan(capsys, "--nodes", str(path))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert needle in err and str(path) in err


def test_missing_file_and_missing_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_plan(capsys, "--nodes", str(tmp_path / "absent.yaml"))
    assert code == 2 and "absent.yaml: cannot read" in err and err.count("\n") == 1
    code, _, err = run_plan(capsys)
    assert code == 2 and "--nodes FILE" in err


def test_bad_environment_is_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUSTACK_NVIDIA_PCI_VENDOR_ID", "nope")
    code, _, err = run_plan(capsys, "--nodes", str(EXAMPLE))
    assert code == 2 and "GPUSTACK_NVIDIA_PCI_VENDOR_ID" in err and err.count("\n") == 1


@pytest.mark.anyio
async def test_live_cluster_is_read_only(
    sim: Any, sim_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = yaml.safe_load(EXAMPLE.read_text())["items"]
    for node in items[:3]:
        sim.store.create(node)
    writes_before = sim.counters.writes()
    offline = main(["plan", "--nodes", str(EXAMPLE), "-o", "json"])
    assert offline == 0
    capsys.readouterr()
    code = await anyio.to_thread.run_sync(
        main, ["plan", "--kubeconfig", str(sim_kubeconfig), "-o", "json"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    flavors = {i["metadata"]["name"] for i in doc["items"] if i["kind"] == "ResourceFlavor"}
    assert "gpustack--amd-epyc-7763-64-core-processor-ln-x64-32c-64g-192g" in flavors
    namespaces = {i["metadata"]["namespace"] for i in doc["items"] if i["kind"] == "LocalQueue"}
    assert "default" in namespaces and "kube-system" not in namespaces
    assert sim.counters.writes() == writes_before
    assert sim.counters.get("list", "Node") >= 1


def test_explanations_ride_beside_the_items(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_plan(capsys, "--nodes", str(EXAMPLE), "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"apiVersion", "kind", "metadata", "items", "explanations"}
    by_node = {e["node"]: e for e in doc["explanations"]}
    assert len(by_node) == 9
    assert by_node["cpu-opted-out"] == {
        "node": "cpu-opted-out",
        "managed": False,
        "flavors": [],
        "reasons": [
            {"code": "opted-out", "message": by_node["cpu-opted-out"]["reasons"][0]["message"]}
        ],
    }
    assert [r["code"] for r in by_node["gpu-no-cpu-info"]["reasons"]] == ["no-cpu-identity"]
    assert by_node["gpu-t4-1"]["reasons"] == [] and len(by_node["gpu-t4-1"]["flavors"]) == 2
    # No Kueue object carries them.
    assert "explanations" not in json.dumps(doc["items"])


def test_table_lists_every_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_plan(capsys, "--nodes", str(EXAMPLE))
    assert code == 0, err
    assert "Why some nodes feed less" in out
    assert "  cpu-opted-out: opted-out: opted out with gpustack.ai/managed=false" in out
    assert "  gpu-no-cpu-info: no-cpu-identity: no CPU identity" in out


def test_explain_one_node(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_plan(capsys, "--nodes", str(EXAMPLE), "--explain", "gpu-no-cpu-info")
    assert code == 0, err
    assert out.splitlines()[:5] == [
        "Node gpu-no-cpu-info",
        "  managed: yes",
        "  feeds 1 flavor(s):",
        "    gpustack--generic-128c-2048g-3072g--nvidia-h100-80gb-hbm3-8d",
        "  why not more:",
    ]
    assert out.splitlines()[5].startswith("    no-cpu-identity: no CPU identity")
    code, out, err = run_plan(
        capsys, "--nodes", str(EXAMPLE), "--explain", "cpu-opted-out", "-o", "json"
    )
    assert code == 0, err
    assert json.loads(out)["reasons"][0]["code"] == "opted-out"


def test_explain_an_unknown_node_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_plan(capsys, "--nodes", str(EXAMPLE), "--explain", "nope")
    assert (code, out) == (2, "")
    assert "node nope is not in the input" in err


def test_nodes_from_stdin_in_yaml_and_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, from_file, _ = run_plan(capsys, "--nodes", str(EXAMPLE), "-o", "json")
    assert code == 0
    monkeypatch.setattr("sys.stdin", io.StringIO(EXAMPLE.read_text()))
    code, from_stdin, err = run_plan(capsys, "--nodes", "-", "-o", "json")
    assert code == 0, err
    assert from_stdin == from_file
    as_json = json.dumps(yaml.safe_load(EXAMPLE.read_text()))
    monkeypatch.setattr("sys.stdin", io.StringIO(as_json))
    code, from_json, err = run_plan(capsys, "--nodes", "-", "-o", "json")
    assert code == 0, err
    assert from_json == from_file


def test_bad_stdin_names_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("{not json: [\n"))
    code, _, err = run_plan(capsys, "--nodes", "-")
    assert code == 2
    assert err.startswith("gpustack-operator plan: error: <stdin>: not valid YAML at line")


AUTOSCALING = Path(__file__).resolve().parents[3] / "examples" / "autoscaling"


@pytest.mark.anyio
async def test_live_cluster_pools_and_declarations_are_read_as_the_worker_reads_them(
    sim: Any, sim_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/autoscaling.md, "In the worker": ``plan --kubeconfig`` reads the NodePools and
    Cluster API node groups the cluster serves and the ConfigMap gpustack-declared-pools."""
    from gpustack_sim.standins.crds import autoscaling_stand_in_crds

    served = {
        c["metadata"]["name"]
        for c in sim.store.list("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    }
    sim.load_crds(
        c for c in autoscaling_stand_in_crds(False) if c["metadata"]["name"] not in served
    )
    for obj in yaml.safe_load((AUTOSCALING / "pools-at-zero.yaml").read_text())["items"]:
        if (
            obj["kind"] != "Namespace"
            or sim.store.get("v1", "Namespace", obj["metadata"]["name"]) is None
        ):
            sim.store.create(obj)
    if sim.store.get("v1", "Namespace", "gpustack-system") is None:
        sim.store.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpustack-system"}}
        )
    sim.store.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "gpustack-declared-pools", "namespace": "gpustack-system"},
            "data": {"pools.yaml": (AUTOSCALING / "declared-pools.yaml").read_text()},
        }
    )
    code = await anyio.to_thread.run_sync(
        main, ["plan", "--kubeconfig", str(sim_kubeconfig), "-o", "json"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    queues = {i["metadata"]["name"] for i in doc["items"] if i["kind"] == "ClusterQueue"}
    assert queues == {
        "pool-capi-md-a100",
        "pool-declared-l4-flex",
        "pool-karpenter-h100",
        "pool-karpenter-l40s",
    }
    assert [r["pool"] for r in doc["poolRejections"]] == ["karpenter.inference-mixed"]
