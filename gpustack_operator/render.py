"""How ``plan`` and ``sim`` print a Kueue chain: one ``v1`` ``List`` (JSON/YAML) or a tree.

Pure text rendering of a :class:`~gpustack_operator.domain.plan.desired.DesiredState`, whether it
was computed offline (``plan``) or read back from an API server (``sim``), so both commands
print the same thing for the same chain.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from gpustack_operator.domain.chain.explain import NodeExplanation
from gpustack_operator.domain.chain.flavors import flavor_nodes
from gpustack_operator.domain.chain.poolchain import unbounded_resources
from gpustack_operator.domain.chain.teams import SHARE_ANNOTATION, TEAM_LABEL, pool_of
from gpustack_operator.domain.chain.tenancy import Tenancy
from gpustack_operator.domain.chain.topology import domain_tree, topology_levels
from gpustack_operator.domain.labels import note
from gpustack_operator.domain.node.capacity import device_keys
from gpustack_operator.domain.node.keys import cpu_node_key
from gpustack_operator.domain.node.nodedevices import pool_resource_label
from gpustack_operator.domain.node.nodeprofiles import is_managed
from gpustack_operator.domain.nodeview import annotations_of, labels_of, name_of
from gpustack_operator.domain.plan.desired import DesiredState

FORMATS = ("table", "yaml", "json")
EXPLANATIONS_FIELD = "explanations"
TENANCY_FIELD = "tenancy"
POOL_REJECTIONS_FIELD = "poolRejections"
POOL_WARNINGS_FIELD = "poolWarnings"


def render(state: DesiredState, output: str, manufacturers: Mapping[str, Any]) -> str:
    """*state* in the format *output* (one of :data:`FORMATS`)."""
    if output == "json":
        return render_json(state)
    if output == "yaml":
        return render_yaml(state)
    if output == "table":
        return render_table(state, manufacturers)
    raise ValueError(f"unknown output format {output!r}; use one of {', '.join(FORMATS)}")


def _document(state: DesiredState) -> dict[str, Any]:
    """The v1 ``List``; ``plan``'s node explanations ride beside ``items`` in a top-level
    ``explanations`` field, outside every Kueue object (docs/plan.md, "Output")."""
    doc = state.as_list()
    if state.tenancy is not Tenancy.ORDINARY:
        doc[TENANCY_FIELD] = state.tenancy.value
    if state.explanations:
        doc[EXPLANATIONS_FIELD] = [e.as_dict() for e in state.explanations]
    if state.pool_rejections:  # docs/autoscaling.md, "Pools that get no queue"
        doc[POOL_REJECTIONS_FIELD] = [
            {"pool": r.key, "reason": r.reason} for r in state.pool_rejections
        ]
    if state.pool_warnings:  # docs/autoscaling.md, "Provisioning requests"
        doc[POOL_WARNINGS_FIELD] = [
            {"pool": r.key, "reason": r.reason} for r in state.pool_warnings
        ]
    return doc


def render_json(state: DesiredState) -> str:
    """One v1 ``List`` of every object, as indented JSON."""
    return json.dumps(_document(state), indent=2) + "\n"


def render_yaml(state: DesiredState) -> str:
    """One v1 ``List`` of every object, as YAML in the object order of the state."""
    return yaml.safe_dump(_document(state), sort_keys=False, default_flow_style=False, width=100)


def render_explanation(explanation: NodeExplanation, output: str) -> str:
    """One node's explanation (``plan --explain NODE``) in the format *output*."""
    if output == "json":
        return json.dumps(explanation.as_dict(), indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(explanation.as_dict(), sort_keys=False, width=100)
    lines = [
        f"Node {explanation.node}",
        f"  managed: {'yes' if explanation.managed else 'no'}",
        f"  feeds {len(explanation.flavors)} flavor(s)" + (":" if explanation.flavors else ""),
    ]
    lines.extend(f"    {flavor}" for flavor in explanation.flavors)
    if explanation.topology:
        lines.append(f"  topology: {explanation.topology}")
    if explanation.reasons:
        lines.append("  why not more:")
        lines.extend(f"    {r.code}: {r.message}" for r in explanation.reasons)
    else:
        lines.append("  nothing held back")
    return "\n".join(lines) + "\n"


def _quota_text(
    resources: list[Mapping[str, Any]], why: str = "sliced", unbounded: Iterable[str] = ()
) -> str:
    """``cpu=16 memory=32Gi ... nvidia.com/gpu=4`` (``credits=4`` in credits mode), flagging
    a zero borrowing limit (sliced queues; teams that do not borrow) and a zero lending
    limit (teams that do not lend; docs/teams.md); a resource in *unbounded* (a pool that
    does not bound it, docs/autoscaling.md "Quota") reads ``unbounded``."""
    parts = []
    loose = set(unbounded)
    for res in resources:
        name = str(res.get("name", ""))
        short = "credits" if name.startswith("credits.gpustack.ai/") else name
        parts.append(f"{short}={'unbounded' if name in loose else res.get('nominalQuota')}")
    sliced = bool(resources) and all(r.get("borrowingLimit") == "0" for r in resources)
    keeps = bool(resources) and all(r.get("lendingLimit") == "0" for r in resources)
    return (
        " ".join(parts)
        + (f"  (no borrowing: {why})" if sliced else "")
        + ("  (no lending: team)" if keeps else "")
    )


def _node_rows(state: DesiredState, manufacturers: Mapping[str, Any]) -> list[list[str]]:
    header = ["NODE", "MANAGED", "CPU KEY", "DEVICES"]
    pools = {e.node: str(len(e.flavors)) for e in state.explanations}
    rows = [[*header, "FLAVORS"] if pools else header]
    for node in sorted(state.nodes, key=name_of):
        labels = labels_of(node)
        devices = [
            f"{akey} x{labels.get(f'acceleratable.feature.gpustack.ai/{akey}.count', '?')}"
            + (f" ({resource})" if (resource := pool_resource_label(labels, akey)) else "")
            for akey in device_keys(labels, manufacturers)
        ]
        rows.append(
            [
                name_of(node),
                "yes" if is_managed(node) else "no",
                cpu_node_key(labels, annotations_of(node)) or "-",
                ", ".join(devices) or "-",
                *([pools.get(name_of(node), "0")] if pools else []),
            ]
        )
    return rows


def _reason_lines(state: DesiredState) -> list[str]:
    """``Why some nodes feed less:`` and one line per reason, when any node has one."""
    lines = [f"  {e.node}: {r.code}: {r.message}" for e in state.explanations for r in e.reasons]
    return ["", "Why some nodes feed less (plan --explain NODE for one):", *lines] if lines else []


def _columns(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def unit_of(notes: Mapping[str, str], accelerated: bool) -> str:
    """``4 CPU + 16Gi + 1 device``; what a pool does not say is said in words (a pool at
    zero whose node size is not declared, docs/autoscaling.md "Quota")."""
    cpu, ram = notes.get(note("unitCPU")), notes.get(note("unitRAM"))
    if cpu is None and ram is None:
        return "1 device (CPU and memory per device not known)" if accelerated else "not known"
    unit = f"{cpu or 'unknown'} CPU + {ram or 'unknown memory'}"
    return unit + (" + 1 device" if accelerated else "")


def _queue_lines(
    queue: Mapping[str, Any],
    counts: Mapping[str, int],
    local: Mapping[str, tuple[str, list[str]]],
    last: bool,
) -> list[str]:
    notes = queue["metadata"].get("annotations", {})
    accelerated = notes.get(note("acceleratable")) == "true"
    unit = unit_of(notes, accelerated)
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
    team = labels_of(queue).get(TEAM_LABEL)
    if team:  # docs/teams.md, "What plan and queues show"
        share = annotations_of(queue).get(SHARE_ANNOTATION, "?")
        lines.append(f"{pad}   team {team}: {share} of pool {pool_of(queue)}")
    why = "sliced" if notes.get(note("slicedAccelerator")) else "team"
    children = [
        f"Flavor {f['name']}\n      nodes={counts.get(f['name'], 0)}  "
        f"{_quota_text(f['resources'], why, unbounded_resources(queue))}"
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
    if state.tenancy is not Tenancy.ORDINARY:
        lines.insert(0, f"Tenancy: {state.tenancy.value} (a vCluster tenant; docs/tenants.md)")
    lines.extend(_columns(_node_rows(state, manufacturers)))
    lines.extend(_reason_lines(state))
    if state.pool_rejections:  # docs/autoscaling.md, "Pools that get no queue"
        lines.extend(["", "Declared pools without a queue:"])
        lines.extend(f"  {r.key}: {r.reason}" for r in state.pool_rejections)
    if state.pool_warnings:  # docs/autoscaling.md, "Provisioning requests"
        lines.extend(["", "Declared pools with a queue but less than they ask for:"])
        lines.extend(f"  {r.key}: {r.reason}" for r in state.pool_warnings)
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
        for group in (cohort.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:  # docs/teams.md: rounding's remainder
                lines.append(
                    f"   own quota (borrowable by its teams) {flavor['name']}: "
                    f"{_quota_text(flavor.get('resources') or [])}"
                )
        queues = by_cohort.get(name, [])
        for i, member in enumerate(queues):
            lines.extend(_queue_lines(member, counts, local, i == len(queues) - 1))
    lines.extend(_topology_lines(state, manufacturers))
    return "\n".join(lines) + "\n"


def _topology_lines(state: DesiredState, manufacturers: Mapping[str, Any]) -> list[str]:
    """Each TAS flavor's domain tree with the devices (CPUs for a CPU pool) under each
    domain (docs/topology.md, "Seeing it")."""
    levels = {t["metadata"]["name"]: topology_levels(t) for t in state.topologies}
    members = flavor_nodes(state.nodes, manufacturers)
    lines: list[str] = []
    for flavor in state.resource_flavors:
        topology = flavor["spec"].get("topologyName")
        if not topology or topology not in levels:
            continue
        notes = flavor["metadata"].get("annotations", {})
        accelerated = notes.get(note("acceleratable")) == "true"
        per_node = int(notes.get(note("accelerator" if accelerated else "cpu"), "0") or 0)
        nodes = members.get(flavor["metadata"]["name"], [])
        unit = "devices" if accelerated else "CPUs"
        lines += ["", f"Topology {topology} of flavor {flavor['metadata']['name']} ({unit}):"]
        lines.append("  levels: " + " > ".join(levels[topology]))
        tree = domain_tree(nodes, levels[topology], {name_of(n): per_node for n in nodes})
        lines.extend(f"  {line}" for line in tree)
    return lines
