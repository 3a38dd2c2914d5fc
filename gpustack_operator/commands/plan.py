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
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from gpustack_operator import fastyaml
from gpustack_operator.commands.argtypes import comma_list
from gpustack_operator.commands.helptext import env_epilog
from gpustack_operator.commands.policy_flags import (
    add_policy_flags,
    kueue_version,
    policy_from_args,
)
from gpustack_operator.domain.chain.declaredpools import (
    DECLARED_POOLS_CONFIGMAP,
    declarations_in_configmap,
    is_pool_object,
)
from gpustack_operator.domain.chain.teams import TeamsError
from gpustack_operator.domain.chain.topology import explain_topology
from gpustack_operator.domain.declarationtext import DeclarationError
from gpustack_operator.domain.node.devicesources.dra import KIND as DRA_KIND
from gpustack_operator.domain.nodeview import (
    has_status,
    name_of,
)
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.validation import is_valid_dns_subdomain
from gpustack_operator.environment import load_group_id_with_memory
from gpustack_operator.kubeconfig import KubeconfigError
from gpustack_operator.render import FORMATS, render, render_explanation

DEFAULT_NAMESPACES = ("default",)
EXIT_BAD_INPUT = 2


class PlanInputError(Exception):
    """Bad input; the message is printed as one line."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``plan``."""
    parser = subparsers.add_parser(
        "plan",
        help="print the Kueue chain the worker would build for some nodes (writes nothing)",
        description=(
            "Compute, without changing anything, every object the worker would converge to "
            "for the given Nodes: NodeFeatures, ResourceFlavors, Cohorts, ClusterQueues and "
            "LocalQueues. Nodes come from --nodes FILE (a List, multi-document YAML or "
            "`kubectl get nodes -o yaml` output) or, read-only, from a cluster "
            "(--kubeconfig/--context). Nodes annotated sim.gpustack.ai/devices get simulated "
            "accelerators. For every node it also says which flavors it feeds and, when fewer "
            "than its hardware suggests, why (--explain NODE for one node; docs/plan.md)."
        ),
        epilog=env_epilog(["plan"], "--kueue-version", "v1beta1"),
    )
    parser.add_argument(
        "--nodes", type=Path, metavar="FILE", help="read Nodes from FILE ('-': standard input)"
    )
    parser.add_argument(
        "--explain",
        metavar="NODE",
        help="print only why NODE feeds the flavors it does (and not more), in the -o format",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
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
        choices=FORMATS,
        default="table",
        help="table: a readable tree; yaml/json: one v1 List, node explanations in its "
        "top-level 'explanations' field (default: table)",
    )
    policy = parser.add_argument_group("the chain, as the worker's flags (docs/configuration.md)")
    add_policy_flags(policy)
    policy.add_argument(
        "--kueue-api-version",
        dest="kueue_version",
        type=kueue_version,
        default=argparse.SUPPRESS,
        metavar="v1beta2|v1beta1",
        # Deprecated spelling of --kueue-version: still accepted, no longer shown.
        help=argparse.SUPPRESS,
    )
    parser.set_defaults(handler=run)


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


def _documents(text: str) -> list[object]:
    """The documents of *text*: one JSON value when it is JSON (``kubectl get -o json``, the
    fast path), else every YAML document."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            document = json.loads(text)
        except ValueError:
            pass  # not JSON after all: YAML's parser says what is wrong, with a line number
        else:
            return [document] if document is not None else []
    return [d for d in fastyaml.load_all(text) if d is not None]


def parse_cluster_text(
    text: str, source: str
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Nodes, Namespaces and DRA ResourceSlices (docs/devices.md, "DRA") in *text*."""
    found = parse_cluster_input(text, source)
    return found.nodes, found.namespaces, found.slices


@dataclass
class ClusterInput:
    """What a cluster dump holds for ``plan`` and ``sim``."""

    nodes: list[Mapping[str, Any]] = field(default_factory=list)
    namespaces: list[Mapping[str, Any]] = field(default_factory=list)
    slices: list[Mapping[str, Any]] = field(default_factory=list)
    pools: list[Mapping[str, Any]] = field(default_factory=list)
    """Karpenter NodePools and Cluster API node groups (docs/autoscaling.md)."""
    configmaps: list[Mapping[str, Any]] = field(default_factory=list)
    """ConfigMaps: the pool declarations' (``gpustack-declared-pools``) is read."""

    def with_declarations(self, policy: ChainPolicy) -> ChainPolicy:
        """*policy* with the pools of the dump's declarations ConfigMap in its namespace
        added, as the worker reads them (docs/autoscaling.md, "Pools declared by a
        person"); a document that cannot be read is :class:`PlanInputError`."""
        found = [
            c
            for c in self.configmaps
            if name_of(c) == DECLARED_POOLS_CONFIGMAP
            and (c.get("metadata") or {}).get("namespace") == policy.system_namespace
        ]
        if not found:
            return policy
        try:
            pools = declarations_in_configmap(found[0], policy.manufacturers_by_resource)
        except DeclarationError as exc:
            raise PlanInputError(str(exc)) from exc
        return replace(policy, declared_pools=(*policy.declared_pools, *pools))


def parse_cluster_input(text: str, source: str) -> ClusterInput:
    """Nodes, Namespaces, DRA ResourceSlices and pool objects in *text*; a dump of pools at
    zero may hold no Node."""
    try:
        documents = _documents(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise PlanInputError(f"{source}: not valid YAML{where}: {problem}") from None
    nodes: list[Mapping[str, Any]] = []
    namespaces: list[Mapping[str, Any]] = []
    slices: list[Mapping[str, Any]] = []
    pools: list[Mapping[str, Any]] = []
    configmaps: list[Mapping[str, Any]] = []
    for d, document in enumerate(documents):
        for obj in _objects_of(document, f"{source}: document {d + 1}"):
            kind = obj.get("kind")
            if kind == "Namespace":
                namespaces.append(obj)
                continue
            if kind == DRA_KIND and str(obj.get("apiVersion", "")).startswith("resource.k8s.io/"):
                slices.append(obj)
                continue
            if is_pool_object(obj):
                pools.append(obj)
                continue
            if kind == "ConfigMap" and obj.get("apiVersion") == "v1":
                configmaps.append(obj)
                continue
            if kind != "Node":
                label = f"kind {kind}" if isinstance(kind, str) else "an object without kind"
                raise PlanInputError(
                    f"{source}: {label} ({name_of(obj) or 'unnamed'}) is not a Node"
                )
            nodes.append(obj)
    if not nodes and not pools:
        raise PlanInputError(f"{source}: no Node objects found")
    seen: set[str] = set()
    for i, node in enumerate(nodes):
        name = name_of(node)
        if not name:
            raise PlanInputError(f"{source}: Node #{i + 1} has no metadata.name")
        if not is_valid_dns_subdomain(name):
            raise PlanInputError(
                f"{source}: Node {name!r} has an invalid name: use a DNS subdomain (lower-case "
                "letters, digits, '-' and '.', at most 253 characters)"
            )
        if name in seen:
            raise PlanInputError(f"{source}: Node {name} appears twice")
        seen.add(name)
        if not has_status(node):
            raise PlanInputError(
                f"{source}: Node {name} has no status (plan needs status.capacity)"
            )
    return ClusterInput(nodes, namespaces, slices, pools, configmaps)


def read_nodes_file(path: Path) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The Nodes and Namespaces in a YAML/JSON file (``-``: standard input);
    :class:`PlanInputError` if unreadable."""
    nodes, namespaces, _ = read_cluster_file(path)
    return nodes, namespaces


def read_cluster_file(
    path: Path,
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The Nodes, Namespaces and ResourceSlices in a YAML/JSON file (``-``: standard input)."""
    found = read_cluster_input(path)
    return found.nodes, found.namespaces, found.slices


def read_cluster_input(path: Path) -> ClusterInput:
    """Everything ``plan`` reads from a YAML/JSON file (``-``: standard input)."""
    stdin = str(path) == "-"
    source = "<stdin>" if stdin else str(path)
    try:
        text = sys.stdin.read() if stdin else path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanInputError(f"{source}: cannot read: {exc}") from None
    return parse_cluster_input(text, source)


async def read_cluster(
    kubeconfig: str | None, context: str | None, system_namespace: str
) -> ClusterInput:
    """Nodes, Namespaces, the pool objects the cluster serves and the declarations
    ConfigMap of a live cluster, as the worker reads them (docs/autoscaling.md, "In the
    worker"), with GET requests only (paged LISTs)."""
    # Imported here: the runtime client pulls in kr8s, which --nodes FILE never needs.
    from gpustack_operator.controllers.declaredpool import served_pool_kinds
    from gpustack_operator.kubeconfig import connect
    from gpustack_operator.runtime.errors import NotFound
    from gpustack_operator.runtime.resources import CONFIGMAPS, NAMESPACES, NODES

    async with await connect(kubeconfig, context) as client:
        nodes = (await client.list_all(NODES)).items
        namespaces = (await client.list_all(NAMESPACES)).items
        pools: list[Mapping[str, Any]] = []
        for kind in await served_pool_kinds(client):
            listed = (await client.list_all(kind)).items
            pools.extend({**o, "apiVersion": kind.api_version, "kind": kind.kind} for o in listed)
        configmaps: list[Mapping[str, Any]] = []
        try:
            found = await client.get(CONFIGMAPS, DECLARED_POOLS_CONFIGMAP, system_namespace)
        except NotFound:
            pass
        else:
            configmaps.append({**found, "apiVersion": "v1", "kind": "ConfigMap"})
    return ClusterInput(list(nodes), list(namespaces), [], pools, configmaps)


# --- Command ---------------------------------------------------------------------------------


def _namespaces(
    args: argparse.Namespace, found: Iterable[Mapping[str, Any]], live: bool
) -> Sequence[str | Mapping[str, Any]]:
    if args.namespaces is not None:
        return comma_list(args.namespaces)
    found = list(found)
    if found or live:
        return found
    return list(DEFAULT_NAMESPACES)


def run(args: argparse.Namespace) -> int:
    """``plan``: read the Nodes, compute the chain, print it; exit 2 on bad input."""
    try:
        policy = policy_from_args(args)
    except ValueError as exc:  # a flag's value, not the input file
        sys.stderr.write(f"gpustack-operator plan: error: {exc}\n")
        return EXIT_BAD_INPUT
    try:
        if args.nodes is not None:
            if args.kubeconfig or args.context:
                raise PlanInputError("give either --nodes or --kubeconfig/--context, not both")
            dump = read_cluster_input(args.nodes)
            policy = dump.with_declarations(policy)
            nodes, found, slices, pool_objects = (
                dump.nodes,
                dump.namespaces,
                dump.slices,
                dump.pools,
            )
            live = False
        elif args.kubeconfig or args.context:
            try:
                live_dump = asyncio.run(
                    read_cluster(args.kubeconfig, args.context, policy.system_namespace)
                )
            except KubeconfigError as exc:  # one line naming the file and the fix
                raise PlanInputError(str(exc)) from None
            except Exception as exc:
                raise PlanInputError(
                    f"cannot read the cluster ({args.kubeconfig or 'default kubeconfig'}): "
                    f"{type(exc).__name__}: {exc}".splitlines()[0]
                ) from None
            nodes, found = live_dump.nodes, live_dump.namespaces
            for node in nodes:
                if not has_status(node):
                    raise PlanInputError(f"cluster: Node {name_of(node)} has no status")
            policy = live_dump.with_declarations(policy)
            slices = []
            pool_objects = live_dump.pools
            live = True
        else:
            raise PlanInputError("give --nodes FILE, or --kubeconfig FILE to read a cluster")
        manufacturers = policy.manufacturers
        state = plan_state(
            nodes,
            _namespaces(args, found, live),
            policy,
            with_memory=load_group_id_with_memory(),
            resource_slices=slices,
            pool_objects=pool_objects,
            now=time.time(),
        )
        if args.explain is not None:
            found_explanation = next(
                (e for e in state.explanations if e.node == args.explain), None
            )
            if found_explanation is None:
                raise PlanInputError(
                    f"node {args.explain} is not in the input: give one of the Node names it holds"
                )
            merged = next(n for n in state.nodes if name_of(n) == args.explain)
            found_explanation = replace(
                found_explanation, topology=explain_topology(merged, policy.topology)
            )
            sys.stdout.write(render_explanation(found_explanation, args.output))
            return 0
    except (PlanInputError, ValueError) as exc:
        source = f"{args.nodes}: " if args.nodes is not None and isinstance(exc, ValueError) else ""
        if isinstance(exc, TeamsError):  # the declaration checked against the chain's pools
            source = f"--teams {args.teams}: "
        message = " ".join(str(exc).split())
        sys.stderr.write(f"gpustack-operator plan: error: {source}{message}\n")
        return EXIT_BAD_INPUT
    sys.stdout.write(render(state, args.output, manufacturers))
    return 0
