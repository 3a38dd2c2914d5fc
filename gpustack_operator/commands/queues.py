"""``gpustack-operator queues``: the pools a namespace can submit to, in readable terms.

For each LocalQueue the worker made in the namespace: the pool's device and unit, the
resource that counts (the device resource, or cpu for CPU-only pools), its quota, and what
Kueue reports as reserved and in use in the ClusterQueue's status (docs/workloads.md,
"Finding a pool"). Read-only: it reads a few objects, so it goes through kr8s's objects
(:mod:`gpustack_operator.kr8sobjects`) rather than the runtime's informers (docs/runtime.md,
"Credentials").

It takes only the chain flags that change what it prints (``READING_FLAGS``): which Kueue
version to read, which manufacturers' device pools to list, and which namespaces get no
LocalQueues (to say why one has no pools). An error is one line on stderr and exit 1, a
namespace that does not exist included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpustack_operator.apis import KUEUE_GROUP, kueue_resources
from gpustack_operator.commands.cluster_flags import add_connection_flags
from gpustack_operator.commands.policy_flags import (
    READING_FLAGS,
    add_policy_flags,
    policy_from_args,
)
from gpustack_operator.domain.chain.kueueusage import STOPPED
from gpustack_operator.domain.chain.kueueusage import borrowed as borrowed_of
from gpustack_operator.domain.chain.poolchain import unbounded_resources
from gpustack_operator.domain.chain.poolinfo import unit_text
from gpustack_operator.domain.chain.queues import is_owned, withheld_by_queue
from gpustack_operator.domain.chain.teams import SHARE_ANNOTATION, TEAM_LABEL
from gpustack_operator.domain.chain.topology import topology_levels
from gpustack_operator.domain.declarationstatus import (
    KINDS,
    SOURCE_NONE,
    STATUS_CONFIGMAP,
    DeclarationStatus,
    statuses_of,
)
from gpustack_operator.domain.node.availability import (
    NodeAvailability,
    explain_availability,
    node_availability,
)
from gpustack_operator.domain.node.workertimers import TIMERS_CONFIGMAP, timers_from_configmap
from gpustack_operator.domain.node.workerverdicts import (
    VERDICTS_CONFIGMAP,
    in_force,
    verdicts_from_configmap,
)
from gpustack_operator.domain.nodeview import annotations_of, labels_of, name_of, uid_of
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.gateway.pools import pool_entry
from gpustack_operator.kr8sobjects import list_objects, served_versions
from gpustack_operator.kubeconfig import KubeconfigError, close_kr8s, connect_kr8s
from gpustack_operator.runtime.resources import CONFIGMAPS, NODES

HOST_RESOURCES = ("cpu", "memory", "ephemeral-storage")
COLUMNS = ("LOCALQUEUE", "UNIT", "RESOURCE", "QUOTA", "RESERVED", "USED")
TEAM_COLUMNS = ("TEAM", "SHARE", "BORROWED")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``queues``."""
    parser = subparsers.add_parser(
        "queues",
        help="list the pools a namespace can submit to: device, unit, quota, usage, LocalQueue",
        description=(
            "List, for one namespace, every pool (ClusterQueue) the worker built and the "
            "LocalQueue to name in a workload's kueue.x-k8s.io/queue-name label: the device "
            "model and unit, the quota of the resource that counts, and the reservation and "
            "usage Kueue reports. Reads the cluster, writes nothing (docs/workloads.md)."
        ),
    )
    add_connection_flags(parser)
    parser.add_argument(
        "-n", "--namespace", default="default", metavar="NS", help="namespace (default: default)"
    )
    parser.add_argument(
        "-o", "--output", choices=("table", "json"), default="table", help="(default: table)"
    )
    add_policy_flags(
        parser.add_argument_group("the chain, as the worker's flags (docs/configuration.md)"),
        only=READING_FLAGS,
    )
    parser.set_defaults(handler=run_queues)


def _counted_resource(entry: Mapping[str, Any]) -> str:
    quota = entry["nominalQuota"]
    devices = sorted(r for r in quota if r not in HOST_RESOURCES)
    return devices[0] if devices else "cpu"


def queue_levels(
    cluster_queues: Iterable[Mapping[str, Any]],
    flavors: Iterable[Mapping[str, Any]],
    topologies: Iterable[Mapping[str, Any]],
) -> dict[str, list[list[str]]]:
    """Per ClusterQueue, the level sets of its TAS flavors' Topologies (docs/topology.md,
    "Seeing it"): the keys a workload may name in ``podset-required-topology``."""
    levels = {name_of(t): list(topology_levels(t)) for t in topologies}
    named = {name_of(f): str((f.get("spec") or {}).get("topologyName") or "") for f in flavors}
    out: dict[str, list[list[str]]] = {}
    for queue in cluster_queues:
        sets: list[list[str]] = []
        for group in (queue.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                found = levels.get(named.get(str(flavor.get("name")), ""))
                if found and found not in sets:
                    sets.append(found)
        if sets:
            out[name_of(queue)] = sets
    return out


def pool_rows(
    cluster_queues: Iterable[Mapping[str, Any]],
    local_queues: Iterable[Mapping[str, Any]],
    levels: Mapping[str, list[list[str]]] | None = None,
    *,
    manufacturers: Iterable[str] | None = None,
    withheld: Mapping[str, list[NodeAvailability]] | None = None,
) -> list[dict[str, Any]]:
    """One row per LocalQueue of the worker's whose ClusterQueue is known, by name; with
    *manufacturers*, device pools of other manufacturers are left out (CPU pools stay);
    *levels* (:func:`queue_levels`) adds the topology levels each offers; *withheld* (queue
    -> verdicts), the nodes each pool does not count now and why (docs/node-lifecycle.md,
    "Seeing why")."""
    queues = {name_of(q): q for q in cluster_queues if is_owned(q)}
    wanted = None if manufacturers is None else set(manufacturers)
    rows = []
    for local in sorted(local_queues, key=name_of):
        target = str((local.get("spec") or {}).get("clusterQueue") or "")
        if not is_owned(local) or target not in queues:
            continue
        entry = pool_entry("", queues[target])
        if wanted is not None and entry["acceleratable"] and entry["manufacturer"] not in wanted:
            continue
        unit = entry["unit"]
        resource = _counted_resource(entry)
        loose = unbounded_resources(queues[target])  # docs/autoscaling.md, "Quota"
        nominal = {r: "unbounded" if r in loose else q for r, q in entry["nominalQuota"].items()}
        usage, reservation = entry["usage"] or {}, entry["reservation"] or {}
        rows.append(
            {
                "localQueue": name_of(local),
                "namespace": (local.get("metadata") or {}).get("namespace", ""),
                "clusterQueue": target,
                "acceleratable": entry["acceleratable"],
                "manufacturer": entry["manufacturer"],
                "product": entry["product"],
                "unit": unit_text(
                    acceleratable=entry["acceleratable"],
                    product=entry["product"],
                    cpu=unit.get("cpu"),
                    memory=unit.get("memory"),
                    accelerators=unit.get("accelerators", 1),
                    slices=unit.get("slices"),
                ),
                "resource": resource,
                "quota": nominal.get(resource, "0"),
                "reserved": reservation.get(resource, "0"),
                "used": usage.get(resource, "0"),
                "nominalQuota": nominal,
                "reservation": entry["reservation"],
                "usage": entry["usage"],
                **team_columns(queues[target], resource),
                **({"levels": levels[target]} if levels and target in levels else {}),
                "stopPolicy": (queues[target].get("spec") or {}).get("stopPolicy", ""),
                "nodes": [
                    {"node": v.node, **v.as_dict()} for v in (withheld or {}).get(target, [])
                ],
            }
        )
    return rows


def team_columns(cluster_queue: Mapping[str, Any], resource: str) -> dict[str, Any]:
    """A team queue's team, share of its pool, whether it borrows and lends, and how much of
    *resource* it borrows now (docs/teams.md, "What plan and queues show"); ``{}`` for a
    pool without teams."""
    team = labels_of(cluster_queue).get(TEAM_LABEL)
    if not team:
        return {}
    limits = [
        r
        for g in (cluster_queue.get("spec") or {}).get("resourceGroups") or []
        for f in g.get("flavors") or []
        for r in f.get("resources") or []
        if r.get("name") == resource
    ]
    borrowed = borrowed_of(cluster_queue, resource)
    return {
        "team": team,
        "share": annotations_of(cluster_queue).get(SHARE_ANNOTATION, ""),
        "borrows": not any(r.get("borrowingLimit") == "0" for r in limits),
        "lends": not any(r.get("lendingLimit") == "0" for r in limits),
        "borrowed": str(int(borrowed)) if borrowed.denominator == 1 else str(float(borrowed)),
    }


def _levels_text(row: Mapping[str, Any]) -> str:
    return " | ".join(",".join(s) for s in row.get("levels") or []) or "-"


def render_nodes(
    rows: list[dict[str, Any]],
    withheld: Mapping[str, list[NodeAvailability]],
    by_worker: Collection[str] = (),
) -> str:
    """Lines under the table: held pools and the nodes a pool does not count, and why;
    the verdicts the worker published (*by_worker*) say so."""
    lines = []
    for row in rows:
        if row["stopPolicy"] in STOPPED:
            lines.append(f"{row['localQueue']}: stopPolicy {row['stopPolicy']}")
        for verdict in withheld.get(row["clusterQueue"], []):
            said = explain_availability(verdict)
            if said is not None:
                whose = " (the worker's verdict)" if verdict.node in by_worker else ""
                line = f"{row['localQueue']}: node {verdict.node} {said[0]}: {said[1]}{whose}"
                lines.append(line)
    return "".join(line + "\n" for line in lines)


def render_declarations(statuses: Mapping[str, DeclarationStatus]) -> str:
    """Lines under the table: the teams and declared pools the worker has in force, and the
    last refusal (docs/worker.md, "Declarations in force"); nothing for a kind with nothing
    declared and nothing refused (a cluster without teams reads as before)."""
    shown = [
        statuses[kind]
        for kind in KINDS
        if kind in statuses and (statuses[kind].source != SOURCE_NONE or statuses[kind].refused)
    ]
    return "".join(f"{status.summary()}\n" for status in shown)


def render_table(rows: list[dict[str, Any]]) -> str:
    keys: tuple[str, ...] = ("localQueue", "unit", "resource", "quota", "reserved", "used")
    columns = list(COLUMNS)
    if any("team" in row for row in rows):  # docs/teams.md, "What plan and queues show"
        keys = (*keys, "team", "share", "borrowed")
        columns.extend(TEAM_COLUMNS)
    table = [columns, *([str(row.get(k, "-")) for k in keys] for row in rows)]
    if any(row.get("levels") for row in rows):  # TAS pools: the levels they offer
        columns.append("LEVELS")
        for line, row in zip(table[1:], rows, strict=True):
            line.append(_levels_text(row))
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in table
    )


Fetched = tuple[list[Any], list[Any], dict[str, list[list[str]]]]
"""Every ClusterQueue, a namespace's LocalQueues and each queue's topology levels."""


async def fetch_queues(args: argparse.Namespace, policy: ChainPolicy) -> Fetched | str:
    """Every ClusterQueue, the namespace's LocalQueues and each queue's topology levels in
    the Kueue version *policy* chooses, or why they cannot be read (one line)."""
    fetched, *_ = await _fetch(args, policy, with_nodes=False)
    return fetched


FetchResult = tuple[Fetched | str, list[Any], dict[str, Any], dict[str, DeclarationStatus]]
"""The queues (or why not), the Nodes, the worker's ConfigMaps by name (its timers, its
per-node verdicts) and its declarations."""


async def fetch_queues_and_nodes(
    args: argparse.Namespace, policy: ChainPolicy
) -> tuple[Fetched | str, list[Any], dict[str, Any] | None]:
    """:func:`fetch_queues`, the cluster's Nodes (to say which a pool does not count now;
    [] if unreadable: the pools are still listed) and the worker's timers ConfigMap (None:
    absent or unreadable; docs/node-lifecycle.md, "Timers"), over one connection."""
    fetched, nodes, published, _ = await _fetch(args, policy, with_nodes=True)
    return fetched, nodes, published.get(TIMERS_CONFIGMAP)


async def fetch_everything(args: argparse.Namespace, policy: ChainPolicy) -> FetchResult:
    """:func:`fetch_queues_and_nodes` and the declarations the worker has in force (none
    when its status ConfigMap cannot be read), over one connection."""
    return await _fetch(args, policy, with_nodes=True, with_declarations=True)


async def _fetch(
    args: argparse.Namespace,
    policy: ChainPolicy,
    *,
    with_nodes: bool,
    with_declarations: bool = False,
) -> FetchResult:
    try:
        api = await connect_kr8s(args.kubeconfig, args.context)
    except KubeconfigError as exc:  # one line naming the file and the fix
        return f"cannot connect to the cluster: {exc}", [], {}, {}
    try:
        fetched = await _read_queues(api, args.namespace, policy)
        if isinstance(fetched, str) or not with_nodes:
            return fetched, [], {}, {}
        try:
            nodes = await list_objects(api, NODES)
        except Exception:  # kr8s's ServerError (a role without nodes), transport errors
            nodes = []
        try:
            found = await list_objects(api, CONFIGMAPS, policy.system_namespace)
        except Exception:  # a role without configmaps: the flags' timers stay
            found = []
        published = {
            name_of(c): c for c in found if name_of(c) in (TIMERS_CONFIGMAP, VERDICTS_CONFIGMAP)
        }
        statuses = (
            await _read_declarations(api, policy.system_namespace) if with_declarations else {}
        )
        return fetched, nodes, published, statuses
    finally:
        await close_kr8s(api)


def timers_in_force(
    policy: ChainPolicy, configmap: dict[str, Any] | None
) -> tuple[ChainPolicy, str]:
    """*policy* with the timers the worker published, and a note when they cannot be read
    (docs/node-lifecycle.md, "Timers"); without the ConfigMap, the flags' timers."""
    timers = timers_from_configmap(configmap)
    if timers is None:
        return policy, ""
    if isinstance(timers, str):
        return policy, f"{timers}: the nodes are judged with this command's timer flags"
    return replace(policy, lifecycle=timers), ""


async def _read_declarations(api: Any, namespace: str) -> dict[str, DeclarationStatus]:
    """The worker's ``gpustack-declarations`` ConfigMap, read back; none when it is absent
    or the caller may not read it."""
    try:
        async with api.call_api(
            "GET", version="v1", url=f"namespaces/{namespace}/configmaps/{STATUS_CONFIGMAP}"
        ) as response:
            return statuses_of(response.json())
    except Exception:  # kr8s's ServerError (404, 403), transport errors
        return {}


async def _read_queues(api: Any, namespace: str, policy: ChainPolicy) -> Fetched | str:
    try:
        served = await served_versions(api, KUEUE_GROUP)
        version = policy.kueue_version_among(served)
        if version is None:
            if served:
                return (
                    f"Kueue serves {', '.join(served)}, not the --kueue-version asked for: "
                    "pass the worker's --kueue-version, or auto"
                )
            return "Kueue is not installed in this cluster: install Kueue, then the worker"
        kueue = kueue_resources(version)
        cluster_queues = await list_objects(api, kueue.cluster_queues)
        local_queues = await list_objects(api, kueue.local_queues, namespace)
        if not local_queues and not await _namespace_exists(api, namespace):
            return (
                f"namespace {namespace} does not exist: pass an existing one with -n "
                "(kubectl get namespaces)"
            )
        levels: dict[str, list[list[str]]] = {}
        if kueue.topologies is not None and policy.topology.enabled:
            topologies = await _list_if_served(api, kueue.topologies)
            if topologies:
                flavors = await list_objects(api, kueue.resource_flavors)
                levels = queue_levels(cluster_queues, flavors, topologies)
        return cluster_queues, local_queues, levels
    except Exception as exc:  # kr8s's ServerError, httpx's transport errors
        return f"cannot read the queues: {exc}"


async def _namespace_exists(api: Any, namespace: str) -> bool:
    """False only when the API server says the namespace is not there; a caller who may
    not read Namespaces (a namespaced role) gets the benefit of the doubt."""
    from kr8s import ServerError

    try:
        async with api.call_api("GET", version="v1", url=f"namespaces/{namespace}"):
            pass
    except ServerError as exc:
        return exc.response is None or exc.response.status_code != 404
    return True


async def _list_if_served(api: Any, res: Any) -> list[dict[str, Any]]:
    """Every object of *res*, or none where the server does not serve the kind (a Kueue
    without topologies has no TAS pool)."""
    from kr8s import ServerError

    try:
        return await list_objects(api, res)
    except ServerError as exc:
        if exc.response is not None and exc.response.status_code == 404:
            return []
        raise


def run_queues(args: argparse.Namespace) -> int:
    try:
        policy = policy_from_args(args)
    except ValueError as exc:
        sys.stderr.write(f"gpustack-operator queues: error: {exc}\n")
        return 2
    fetched, nodes, published, declarations = asyncio.run(fetch_everything(args, policy))
    if isinstance(fetched, str):
        sys.stderr.write(f"gpustack-operator queues: error: {fetched}\n")
        return 1
    policy, note = timers_in_force(policy, published.get(TIMERS_CONFIGMAP))
    if note:
        sys.stderr.write(f"gpustack-operator queues: warning: {note}\n")
    verdicts, omitted = verdicts_from_configmap(published.get(VERDICTS_CONFIGMAP))
    if omitted:
        sys.stderr.write(
            f"gpustack-operator queues: warning: the worker published the verdicts of some "
            f'nodes only ({omitted} left out, docs/node-lifecycle.md "Seeing why"): those are '
            "judged here without its memory\n"
        )
    cluster_queues, local_queues, levels = fetched
    now = time.time()
    by_worker: set[str] = set()

    def judge(node: object) -> NodeAvailability:
        """The worker's verdict while it holds, else this command's own look."""
        verdict = in_force(verdicts, name_of(node), uid_of(node), now)
        if verdict is None:
            return node_availability(node, policy.lifecycle, now)
        by_worker.add(verdict.node)
        return verdict

    withheld = withheld_by_queue(nodes, policy.manufacturers, judge)
    rows = pool_rows(
        cluster_queues,
        local_queues,
        levels,
        manufacturers=policy.manufacturers if args.manufacturer else None,
        withheld=withheld,
    )
    for row in rows:
        for shown in row.get("nodes") or []:
            if shown.get("node") in by_worker:
                shown["judgedBy"] = "worker"
    if args.output == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    elif rows:
        sys.stdout.write(
            render_table(rows)
            + "\n"
            + render_nodes(rows, withheld, by_worker)
            + render_declarations(declarations)
        )
    elif args.namespace in policy.namespaces_without_queues:
        sys.stderr.write(
            f"no pools in namespace {args.namespace}: it is the system namespace or an "
            "excluded one (--system-namespace, --excluded-namespaces), which get no "
            "LocalQueues; submit from another namespace\n"
        )
    else:
        sys.stderr.write(
            f"no pools in namespace {args.namespace}: the worker gives every namespace but "
            "the system and excluded ones a LocalQueue per pool; is it running?\n"
        )
    return 0
