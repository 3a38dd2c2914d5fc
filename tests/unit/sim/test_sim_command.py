"""``gpustack-operator sim``: argument parsing and CRD loading (the serving loop is e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack_operator.cli import build_parser
from gpustack_sim.command import default_kubeconfig_path, load_crd_documents

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
"""


def test_crds_are_read_from_every_yaml_file_and_other_kinds_skipped(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(CRD + "---\napiVersion: v1\nkind: ConfigMap\n---\n")
    (tmp_path / "b.yml").write_text(CRD.replace("widgets", "gadgets"))
    (tmp_path / "notes.txt").write_text("kind: CustomResourceDefinition\n")
    crds = load_crd_documents([tmp_path])
    assert [c["metadata"]["name"] for c in crds] == ["widgets.example.com", "gadgets.example.com"]


def test_bad_crd_folders_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        load_crd_documents([tmp_path / "missing"])
    (tmp_path / "broken.yaml").write_text("a: [unclosed\n")
    with pytest.raises(ValueError, match=r"broken\.yaml: cannot read YAML"):
        load_crd_documents([tmp_path])


def test_parser_needs_a_mode_and_has_safe_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser(env={})
    args = parser.parse_args(["sim"])
    assert args.serve is False and args.cluster is None
    assert args.handler(args) == 2  # neither --cluster nor --serve: nothing to do
    assert "--serve" in capsys.readouterr().err
    args = parser.parse_args(["sim", "--serve", "--crds", "x", "--crds", "y"])
    assert args.serve is True
    assert args.crds == [Path("x"), Path("y")]
    assert args.port == 0
    assert args.bind_address == "127.0.0.1"
    assert args.kubeconfig_out is None
    assert (args.output, args.timeout, args.namespaces) == ("table", 60.0, None)
    assert default_kubeconfig_path().name == "gpustack-operator-sim-kubeconfig.yaml"


def test_serve_can_come_from_the_environment() -> None:
    parser = build_parser(env={"GPUSTACK_SIM_SERVE": "true", "GPUSTACK_SIM_PORT": "8123"})
    args = parser.parse_args(["sim"])
    assert args.serve is True and args.port == 8123


def test_without_the_simulator_installed_sim_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The wheel and the image hold no gpustack_sim (its own distribution, sim/)."""
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gpustack_sim" else found(name, *a),
    )
    args = build_parser({}).parse_args(["sim", "--cluster", "examples/cluster.yaml"])
    assert args.handler(args) == 2
    said = capsys.readouterr().err
    assert "no simulator (the gpustack-sim distribution missing)" in said
    assert "make demo" in said and "pip install ./sim" in said
