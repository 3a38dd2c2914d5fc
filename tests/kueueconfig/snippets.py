"""Every Kueue Configuration snippet the project ships (docs/ and deploy/), and a strict
decode of one against Kueue's v1beta2 Configuration fields.

Kueue decodes its configuration file strictly, so an unknown field stops its manager at
start; a snippet a reader copies must hold only fields Kueue v0.19.2 knows
(``configuration_v1beta2.yaml`` beside this module lists them, from Kueue's Go types).
:func:`kueue_configuration_snippets` is the one place that finds the snippets, so that any
check of them (this decode, or a load by a real Kueue) reads the same set.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA_FILE = Path(__file__).with_name("configuration_v1beta2.yaml")
CONFIG_GROUP = "config.kueue.x-k8s.io"
CONFIG_VERSION = f"{CONFIG_GROUP}/v1beta2"
CONFIG_KEY = "controller_manager_config.yaml"

DISTINCTIVE_FIELDS = frozenset(
    {
        "waitForPodsReady",
        "fairSharing",
        "admissionFairSharing",
        "integrations",
        "manageJobsWithoutQueueName",
        "managedJobsNamespaceSelector",
        "internalCertManagement",
        "multiKueue",
        "objectRetentionPolicies",
        "visibilityServer",
        "featureGates",
    }
)
"""Top-level fields only Kueue's Configuration has: a YAML fragment in the docs holding one
of them (or ``resources.transformations`` and the like) is a piece of that Configuration."""

RESOURCES_FIELDS = frozenset(
    {"transformations", "excludeResourcePrefixes", "deviceClassMappings", "quotaCheckStrategy"}
)

_FENCE = re.compile(r"^```(\w*)\s*$")
_DURATION = re.compile(r"^[-+]?(\d+(\.\d*)?(ns|us|µs|ms|s|m|h))+$|^0$")
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[kMGTPE]i?|m|u|n)?$")


@dataclass(frozen=True)
class Snippet:
    """One Kueue Configuration (whole, or a fragment to merge into one) and where it is."""

    where: str
    """``docs/workloads.md:352`` (the first line of the YAML) or a deploy/ file."""
    config: Mapping[str, Any]
    whole: bool
    """A whole Configuration (``apiVersion``/``kind``), not a fragment."""


def _is_configuration(doc: object) -> bool:
    return isinstance(doc, Mapping) and str(doc.get("apiVersion", "")).startswith(
        f"{CONFIG_GROUP}/"
    )


def _is_fragment(doc: object) -> bool:
    if not isinstance(doc, Mapping) or "apiVersion" in doc or "kind" in doc:
        return False
    if DISTINCTIVE_FIELDS & set(doc):
        return True
    resources = doc.get("resources")
    return isinstance(resources, Mapping) and bool(RESOURCES_FIELDS & set(resources))


def _from_documents(docs: list[object], where: str) -> Iterator[Snippet]:
    for doc in docs:
        if _is_configuration(doc):
            assert isinstance(doc, Mapping)
            yield Snippet(where, doc, whole=True)
        elif _is_fragment(doc):
            assert isinstance(doc, Mapping)
            yield Snippet(where, doc, whole=False)
        elif isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap":
            text = (doc.get("data") or {}).get(CONFIG_KEY)
            if isinstance(text, str):
                inner = yaml.safe_load(text)
                yield Snippet(f"{where} ({CONFIG_KEY})", inner, whole=_is_configuration(inner))


def _code_blocks(page: Path) -> Iterator[tuple[int, str, str]]:
    """(first line number, language, text) of each fenced block of *page*."""
    lines = page.read_text(encoding="utf-8").splitlines()
    start, language, body = 0, "", list[str]()
    inside = False
    for number, line in enumerate(lines, start=1):
        fence = _FENCE.match(line)
        if fence and not inside:
            inside, start, language, body = True, number + 1, fence.group(1), []
        elif line.strip() == "```" and inside:
            inside = False
            yield start, language, "\n".join(body)
        elif inside:
            body.append(line)


def _docs_snippets(root: Path) -> Iterator[Snippet]:
    pages = [*sorted((root / "docs").glob("*.md")), root / "README.md"]
    for page in pages:
        if not page.is_file():
            continue
        for line, language, text in _code_blocks(page):
            if language not in ("yaml", "yml", ""):
                continue
            try:
                docs = list(yaml.safe_load_all(text))
            except yaml.YAMLError:
                if language:
                    raise
                continue  # an untagged block that is not YAML (a diagram, a listing)
            yield from _from_documents(docs, f"{page.relative_to(root)}:{line}")


def _deploy_snippets(root: Path) -> Iterator[Snippet]:
    for path in sorted((root / "deploy").rglob("*.y*ml")):
        if "templates" in path.relative_to(root).parts:
            continue  # a Helm chart's templates are YAML only once rendered
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        yield from _from_documents(docs, str(path.relative_to(root)))


def kueue_configuration_snippets(root: Path = REPO) -> list[Snippet]:
    """Every Kueue Configuration snippet in *root*'s docs/ (and README) and deploy/."""
    return [*_docs_snippets(root), *_deploy_snippets(root)]


@cache
def configuration_schema() -> dict[str, dict[str, str]]:
    """Kueue v0.19.2's v1beta2 Configuration: type name -> field -> type."""
    loaded = yaml.safe_load(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _check(
    value: object, kind: str, path: str, schema: Mapping[str, Mapping[str, str]]
) -> list[str]:
    if kind.startswith("[") and kind.endswith("]"):
        if not isinstance(value, list):
            return [f"{path}: expected a list, found {value!r}"]
        return [
            e for i, v in enumerate(value) for e in _check(v, kind[1:-1], f"{path}[{i}]", schema)
        ]
    if kind.startswith("{") and kind.endswith("}"):
        if not isinstance(value, Mapping):
            return [f"{path}: expected a mapping, found {value!r}"]
        return [e for k, v in value.items() for e in _check(v, kind[1:-1], f"{path}.{k}", schema)]
    if kind in schema:
        if not isinstance(value, Mapping):
            return [f"{path}: expected a mapping ({kind}), found {value!r}"]
        fields = schema[kind]
        errors = []
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key not in fields:
                errors.append(f"{where}: unknown field (Kueue's {kind} has no {key!r})")
                continue
            errors.extend(_check(item, fields[key], where, schema))
        return errors
    ok = {
        "string": lambda v: isinstance(v, str),
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "duration": lambda v: isinstance(v, str) and bool(_DURATION.match(v)),
        "quantity": lambda v: (
            (isinstance(v, int | float) and not isinstance(v, bool))
            or (isinstance(v, str) and bool(_QUANTITY.match(v)))
        ),
        "labelSelector": lambda v: (
            isinstance(v, Mapping) and set(v) <= {"matchLabels", "matchExpressions"}
        ),
        "opaque": lambda v: True,
    }
    if kind not in ok:
        raise ValueError(f"the schema names an unknown type {kind!r} at {path}")
    return [] if ok[kind](value) else [f"{path}: expected {kind}, found {value!r}"]


def strict_decode_errors(config: Mapping[str, Any], *, whole: bool) -> list[str]:
    """What keeps Kueue v0.19.2 from decoding *config* as a v1beta2 Configuration (empty:
    it decodes). A fragment (*whole* false) is checked as a part of one."""
    schema = configuration_schema()
    errors = _check(config, "Configuration", "", schema)
    if whole:
        if config.get("apiVersion") != CONFIG_VERSION:
            errors.append(f"apiVersion: {config.get('apiVersion')!r}, not {CONFIG_VERSION}")
        if config.get("kind") != "Configuration":
            errors.append(f"kind: {config.get('kind')!r}, not Configuration")
    return errors
