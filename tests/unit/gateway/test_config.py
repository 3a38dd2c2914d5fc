"""Parsing the cluster list: flags, config file, kubeconfig contexts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpustack_operator.gateway.cluster import ClusterSpec
from gpustack_operator.gateway.config import (
    ConfigError,
    check_name,
    collect_clusters,
    kubeconfig_contexts,
    load_config_file,
    parse_cluster_flag,
)
from gpustack_operator.gateway.kubeconfig import parse_kubeconfig


def _kubeconfig(path: Path, contexts: list[str]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://x"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": n, "context": {"cluster": "c", "user": "u"}} for n in contexts
                ],
            }
        )
    )
    return path


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("east=/k/east.yaml", ClusterSpec("east", Path("/k/east.yaml"), None)),
        ("east=/k/east.yaml:admin@east", ClusterSpec("east", Path("/k/east.yaml"), "admin@east")),
        ("e.1=rel.yaml:ctx", ClusterSpec("e.1", Path("rel.yaml"), "ctx")),
    ],
)
def test_cluster_flag(value: str, want: ClusterSpec) -> None:
    assert parse_cluster_flag(value) == want


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("east", "expected NAME=KUBECONFIG"),
        ("east=", "expected NAME=KUBECONFIG"),
        ("east=:ctx", "path is empty"),
        ("bad/name=/k", "invalid cluster name"),
        ("-east=/k", "invalid cluster name"),
    ],
)
def test_bad_cluster_flags(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_cluster_flag(value)


def test_names() -> None:
    assert check_name("kind-kind") == "kind-kind"
    assert check_name("a") == "a"
    for bad in ("", "a b", "x" * 254, "a/", "é"):
        with pytest.raises(ConfigError):
            check_name(bad)


def test_config_file_paths_are_relative_to_it(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "clusters:\n"
        "  - {name: east, kubeconfig: east.yaml, context: admin}\n"
        "  - {name: west, kubeconfig: /abs/west.yaml}\n"
    )
    assert load_config_file(config) == [
        ClusterSpec("east", tmp_path / "east.yaml", "admin"),
        ClusterSpec("west", Path("/abs/west.yaml"), None),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "expected a mapping"),
        ("clusters: 3", "expected a list under 'clusters'"),
        ("clusters: [{kubeconfig: x}]", "'name' is required"),
        ("clusters: [{name: a}]", "'kubeconfig' .* is required"),
        ("clusters: [{name: a, kubeconfig: x, context: 3}]", "'context' must be a string"),
        ("clusters: [3]", r"clusters\[0\]: expected a mapping"),
        ("{", "cannot read the gateway config"),
    ],
)
def test_bad_config_files(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config_file(config)


def test_every_context_of_a_kubeconfig(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config", ["east", "west"])
    assert kubeconfig_contexts(path) == [
        ClusterSpec("east", path, "east"),
        ClusterSpec("west", path, "west"),
    ]
    with pytest.raises(ConfigError, match="missing: no such file; pass an existing kubeconfig"):
        kubeconfig_contexts(tmp_path / "missing")


def test_sources_combine_and_names_stay_unique(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config", ["east", "west"])
    specs = collect_clusters(["north=/k/n.yaml"], kubeconfig=path)
    assert [s.name for s in specs] == ["north", "east", "west"]
    with pytest.raises(ConfigError, match="'east' is listed twice"):
        collect_clusters(["east=/k/e.yaml"], kubeconfig=path)
    assert collect_clusters() == []


def test_kubeconfig_documents() -> None:
    config = parse_kubeconfig('{"clusters": [{"name": "c"}], "contexts": [{"name": "x"}]}')
    assert config["contexts"][0]["name"] == "x"
    with pytest.raises(ConfigError, match="non-empty 'contexts'"):
        parse_kubeconfig("clusters: [{name: c}]")
    with pytest.raises(ConfigError, match="not YAML or JSON"):
        parse_kubeconfig("{{{")
