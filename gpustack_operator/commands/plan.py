"""``gpustack-operator plan``: what the worker would converge to, computed offline.

Reads Nodes from a file (a ``List``, multi-document YAML or ``kubectl get nodes -o yaml``
output) or, read-only, from a live cluster, runs the same domain functions as the operator
(device-manager labels for ``sim.gpustack.ai/devices``, the worker's capacity labels, the
Kueue chain) and prints the result. It never writes to a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpustack_operator.domain.capacity import device_keys
from gpustack_operator.domain.desired import DesiredState, plan_state
from gpustack_operator.domain.flavors import flavor_nodes, is_managed
from gpustack_operator.domain.keys import cpu_node_key
from gpustack_operator.domain.kueue import KueueVersion
from gpustack_operator.domain.labels import note
from gpustack_operator.domain.manufacturers import load_manufacturers
from gpustack_operator.domain.nodefeature import DEFAULT_SYSTEM_NAMESPACE
from gpustack_operator.domain.nodeview import (
    annotations_of,
    has_status,
    labels_of,
    name_of,
)
from gpustack_operator.domain.queues import DEFAULT_EXCLUDED_NAMESPACES
from gpustack_operator.domain.settings import load_group_id_with_memory
from gpustack_operator.domain.validation import is_valid_dns_subdomain

DEFAULT_NAMESPACES = ("default",)
EXIT_BAD_INPUT = 2


class PlanInputError(Exception):
    """Bad input; the message is printed as one line."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="print the Kueue chain the worker would build for some nodes (writes nothing)",
        description=(
            "Compute, without changing anything, every object the worker would converge to "
            "for the given Nodes: NodeFeatures, ResourceFlavors, Cohorts, ClusterQueues and "
            "LocalQueues. Nodes come from --nodes FILE (a List, multi-document YAML or "
            "`kubectl get nodes -o yaml` output) or, read-only, from a cluster "
            "(--kubeconfig/--context). Nodes annotated sim.gpustack.ai/devices get simulated "
            "accelerators."
        ),
    )
    parser.add_argument("--nodes", type=Path, metavar="FILE", help="read Nodes from FILE")
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="read Nodes and Namespaces from this cluster instead of --nodes (read-only)",
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")
    parser.add_argument(
        "--namespaces",
        metavar="A,B",
        help="namespaces that get LocalQueues (default: the Namespace objects in FILE, else "
        "'default'; with --kubeconfig every Namespace of the cluster)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "yaml", "json"),
        default="table",
        help="table: a readable tree; yaml/json: one v1 List (default: table)",
    )
    parser.add_argument(
        "--system-namespace",
        default=DEFAULT_SYSTEM_NAMESPACE,
        metavar="NS",
        help=f"the operator's namespace (default: {DEFAULT_SYSTEM_NAMESPACE})",
    )
    parser.add_argument(
        "--excluded-namespaces",
        default=",".join(DEFAULT_EXCLUDED_NAMESPACES),
        metavar="A,B",
        help="namespaces that never get LocalQueues (default: %(default)s)",
    )
    parser.add_argument(
        "--kueue-api-version",
        choices=[v.value for v in KueueVersion],
        default=KueueVersion.V1BETA2.value,
        help="Kueue API version to render (default: %(default)s)",
    )
    parser.set_defaults(handler=run)


def _split(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


# --- Input -----------------------------------------------------------------------------------


def _objects_of(document: object, where: str) -> list[Mapping[str, Any]]:
    if not isinstance(document, Mapping):
        raise PlanInputError(f"{where} is not a Kubernetes object (a YAML mapping)")
    kind = document.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in document:
        items = document.get("items") or []
        if not isinstance(items, list):
            raise PlanInputError(f"{where}: items is not a list")
        result: list[Mapping[str, Any]] = []
        for i, item in enumerate(items):
            result.extend(_objects_of(item, f"{where} item {i}"))
        return result
    return [document]


def parse_nodes_text(
    text: str, source: str
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Nodes and Namespaces in *text*; :class:`PlanInputError` names *source* and the object."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise PlanInputError(f"{source}: not valid YAML{where}: {problem}") from None
    nodes: list[Mapping[str, Any]] = []
    namespaces: list[Mapping[str, Any]] = []
    for d, document in enumerate(documents):
        for obj in _objects_of(document, f"{source}: document {d + 1}"):
            kind = obj.get("kind")
            if kind == "Namespace":
                namespaces.append(obj)
                continue
            if kind != "Node":
                label = f"kind {kind}" if isinstance(kind, str) else "an object without kind"
                raise PlanInputError(
                    f"{source}: {label} ({name_of(obj) or 'unnamed'}) is not a Node"
                )
            nodes.append(obj)
    if not nodes:
        raise PlanInputError(f"{source}: no Node objects found")
    seen: set[str] = set()
    for i, node in enumerate(nodes):
        name = name_of(node)
        if not name:
            raise PlanInputError(f"{source}: Node #{i + 1} has no metadata.name")
        if not is_valid_dns_subdomain(name):
            raise PlanInputError(f"{source}: Node {name!r} has an invalid name")
        if name in seen:
            raise PlanInputError(f"{source}: Node {name} appears twice")
        seen.add(name)
        if not has_status(node):
            raise PlanInputError(
                f"{source}: Node {name} has no status (plan needs status.capacity)"
            )
    return nodes, namespaces


def read_nodes_file(path: Path) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanInputError(f"{path}: cannot read: {exc}") from None
    return parse_nodes_text(text, str(path))


async def _list_all(api: Any, url: str) -> list[Mapping[str, Any]]:
    items: list[Mapping[str, Any]] = []
    token = ""
    while True:
        params = {"limit": "500", **({"continue": token} if token else {})}
        async with api.call_api("GET", version="v1", url=url, params=params) as response:
            body = response.json()
        items.extend(body.get("items") or [])
        token = (body.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


async def read_cluster(
    kubeconfig: str | None, context: str | None
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Nodes and Namespaces of a live cluster, with GET requests only."""
    from kr8s.asyncio import Api

    api = Api(kubeconfig=kubeconfig, context=context, bypass_factory=True)
    try:
        await api
        nodes = await _list_all(api, "nodes")
        namespaces = await _list_all(api, "namespaces")
    finally:
        session = getattr(api, "_session", None)
        if session is not None:
            await session.aclose()
    for node in nodes:
        if isinstance(node, dict):
            node.setdefault("apiVersion", "v1")
            node.setdefault("kind", "Node")
    return nodes, namespaces


# --- Output ----------------------------------------------------------------------------------


def render_json(state: DesiredState) -> str:
    return json.dumps(state.as_list(), indent=2) + "\n"


def render_yaml(state: DesiredState) -> str:
    return yaml.safe_dump(state.as_list(), sort_keys=False, default_flow_style=False, width=100)


def _quota_text(resources: list[Mapping[str, Any]]) -> str:
    """``cpu=16 memory=32Gi ... credits=4``, flagging sliced queues' zero borrowing limit."""
    parts = []
    for res in resources:
        name = str(res.get("name", ""))
        short = "credits" if name.startswith("credits.gpustack.ai/") else name
        parts.append(f"{short}={res.get('nominalQuota')}")
    sliced = bool(resources) and all(r.get("borrowingLimit") == "0" for r in resources)
    return " ".join(parts) + ("  (no borrowing: sliced)" if sliced else "")


def _node_rows(state: DesiredState, manufacturers: Mapping[str, Any]) -> list[list[str]]:
    rows = [["NODE", "MANAGED", "CPU KEY", "DEVICES"]]
    for node in sorted(state.nodes, key=name_of):
        labels = labels_of(node)
        devices = [
            f"{akey} x{labels.get(f'acceleratable.feature.gpustack.ai/{akey}.count', '?')}"
            for akey in device_keys(labels, manufacturers)
        ]
        rows.append(
            [
                name_of(node),
                "yes" if is_managed(node) else "no",
                cpu_node_key(labels, annotations_of(node)) or "-",
                ", ".join(devices) or "-",
            ]
        )
    return rows


def _columns(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def _queue_lines(
    queue: Mapping[str, Any],
    counts: Mapping[str, int],
    local: Mapping[str, tuple[str, list[str]]],
    last: bool,
) -> list[str]:
    notes = queue["metadata"].get("annotations", {})
    accelerated = notes.get(note("acceleratable")) == "true"
    unit = f"{notes.get(note('unitCPU'), '?')} CPU + {notes.get(note('unitRAM'), '?')}"
    unit += " + 1 device" if accelerated else ""
    what = notes.get(note("manufacturer"), "?")
    if notes.get(note("product")):
        what += f" {notes[note('product')]}"
    if notes.get(note("slicedAccelerator")):
        what += f", sliced x{notes[note('slicedAccelerator')]}"
    pad = "   " if last else "│  "
    lines = [
        f"{'└─' if last else '├─'} ClusterQueue {queue['metadata']['name']}",
        f"{pad}   {'accelerated' if accelerated else 'general'} ({what}); unit {unit}",
    ]
    children = [
        f"Flavor {f['name']}\n      nodes={counts.get(f['name'], 0)}  {_quota_text(f['resources'])}"
        for group in queue["spec"].get("resourceGroups", [])
        for f in group["flavors"]
    ]
    entry = local.get(queue["metadata"]["name"])
    if entry is not None:
        children.append(f"LocalQueue {entry[0]} in {', '.join(entry[1])}")
    else:
        children.append("LocalQueue - (no namespace selected)")
    for i, child in enumerate(children):
        last_child = i == len(children) - 1
        first, _, rest = child.partition("\n")
        lines.append(f"{pad}{'└─' if last_child else '├─'} {first}")
        if rest:
            lines.append(f"{pad}{'   ' if last_child else '│  '}{rest}")
    return lines


def render_table(state: DesiredState, manufacturers: Mapping[str, Any]) -> str:
    """A tree for people: Cohort -> ClusterQueue -> flavors (quotas, nodes) -> LocalQueues."""
    counts = {name: len(nodes) for name, nodes in flavor_nodes(state.nodes, manufacturers).items()}
    managed = sum(1 for n in state.nodes if is_managed(n))
    lines = [f"Nodes: {len(state.nodes)} ({managed} managed)"]
    lines.extend(_columns(_node_rows(state, manufacturers)))
    lines.append("")
    by_cohort: dict[str, list[Mapping[str, Any]]] = {}
    for queue in state.cluster_queues:
        spec = queue.get("spec", {})
        by_cohort.setdefault(spec.get("cohortName") or spec.get("cohort") or "", []).append(queue)
    local: dict[str, tuple[str, list[str]]] = {}
    for local_queue in state.local_queues:
        entry = local.setdefault(
            local_queue["spec"]["clusterQueue"], (local_queue["metadata"]["name"], [])
        )
        entry[1].append(local_queue["metadata"]["namespace"])
    lines.append(
        f"Kueue chain: {len(state.cohorts)} Cohorts, {len(state.cluster_queues)} ClusterQueues, "
        f"{len(state.resource_flavors)} ResourceFlavors, {len(state.local_queues)} LocalQueues"
    )
    for cohort in state.cohorts:
        name = cohort["metadata"]["name"]
        lines.append("")
        lines.append(f"Cohort {name}")
        queues = by_cohort.get(name, [])
        for i, member in enumerate(queues):
            lines.extend(_queue_lines(member, counts, local, i == len(queues) - 1))
    return "\n".join(lines) + "\n"


# --- Command ---------------------------------------------------------------------------------


def _namespaces(
    args: argparse.Namespace, found: Iterable[Mapping[str, Any]], live: bool
) -> Sequence[str | Mapping[str, Any]]:
    if args.namespaces is not None:
        return list(_split(args.namespaces))
    found = list(found)
    if found or live:
        return found
    return list(DEFAULT_NAMESPACES)


def run(args: argparse.Namespace) -> int:
    try:
        if args.nodes is not None:
            if args.kubeconfig or args.context:
                raise PlanInputError("give either --nodes or --kubeconfig/--context, not both")
            nodes, found = read_nodes_file(args.nodes)
            live = False
        elif args.kubeconfig or args.context:
            try:
                nodes, found = asyncio.run(read_cluster(args.kubeconfig, args.context))
            except Exception as exc:
                raise PlanInputError(
                    f"cannot read the cluster ({args.kubeconfig or 'default kubeconfig'}): "
                    f"{type(exc).__name__}: {exc}".splitlines()[0]
                ) from None
            for node in nodes:
                if not has_status(node):
                    raise PlanInputError(f"cluster: Node {name_of(node)} has no status")
            live = True
        else:
            raise PlanInputError("give --nodes FILE, or --kubeconfig PATH to read a cluster")
        manufacturers = load_manufacturers()
        state = plan_state(
            nodes,
            _namespaces(args, found, live),
            manufacturers=manufacturers,
            system_namespace=args.system_namespace,
            excluded_namespaces=_split(args.excluded_namespaces),
            kueue_version=KueueVersion(args.kueue_api_version),
            with_memory=load_group_id_with_memory(),
        )
    except (PlanInputError, ValueError) as exc:
        source = f"{args.nodes}: " if args.nodes is not None and isinstance(exc, ValueError) else ""
        message = " ".join(str(exc).split())
        sys.stderr.write(f"gpustack-operator plan: error: {source}{message}\n")
        return EXIT_BAD_INPUT
    if args.output == "json":
        sys.stdout.write(render_json(state))
    elif args.output == "yaml":
        sys.stdout.write(render_yaml(state))
    else:
        sys.stdout.write(render_table(state, manufacturers))
    return 0
