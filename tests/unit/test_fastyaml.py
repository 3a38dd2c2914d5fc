"""The fast YAML loader gives exactly what ``yaml.safe_load_all`` gives."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpustack_operator import fastyaml

REPO = Path(__file__).resolve().parents[2]
TRICKY = """\
a: 1
b: "1"
c: true
d: 'yes'
e: null
f: ~
g: 2026-11-23T00:00:00Z
h: 1.5
i: [x, 2, {j: k}]
base: &base {cpu: "8", memory: 16Gi}
merged: {<<: *base, cpu: "16"}
alias: *base
empty:
"quoted key": 0x1F
---
- second
- document
---
"""


@pytest.mark.parametrize(
    "text",
    [TRICKY, (REPO / "examples" / "cluster.yaml").read_text()],
    ids=["tricky", "example-cluster"],
)
def test_same_result_as_the_safe_loader(text: str) -> None:
    assert list(fastyaml.load_all(text)) == list(yaml.safe_load_all(text))


def test_errors_are_the_safe_loaders() -> None:
    with pytest.raises(yaml.YAMLError):
        list(fastyaml.load_all("a: [1, 2\nb: 3\n"))
    with pytest.raises(yaml.constructor.ConstructorError):
        list(fastyaml.load_all("? [1, 2]\n: x\n"))


PLAIN_THEN_ALIAS = """\
kind: List
items: [{metadata: {name: a, labels: {x: "1", y: 2}}}, {n: 1e3, t: 2026-01-01, b: !!binary aGk=}]
---
first: &f {v: 1}
again: *f
---
last: [1, 1, 1]
"""


def test_an_unusual_later_document_falls_back_without_repeating_earlier_ones() -> None:
    assert list(fastyaml.load_all(PLAIN_THEN_ALIAS)) == list(yaml.safe_load_all(PLAIN_THEN_ALIAS))


def test_api_dumps_are_built_from_events_without_the_composer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A `kubectl get -o yaml` dump never needs the composing path (which is the slow one)."""

    def refuse(data: bytes, skip: int) -> object:
        raise AssertionError("the composing path was used")

    monkeypatch.setattr(fastyaml, "_compose_all", refuse)
    text = (REPO / "examples" / "cluster.yaml").read_text()
    assert list(fastyaml.load_all(text)) == list(yaml.safe_load_all(text))
