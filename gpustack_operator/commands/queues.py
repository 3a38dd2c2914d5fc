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
from collections.abc import Iterable, Mapping
from typing import Any

from gpustack_operator.apis import KUEUE_GROUP, kueue_resources
from gpustack_operator.commands.cluster_flags import add_connection_flags
from gpustack_operator.commands.policy_flags import (
    READING_FLAGS,
    add_policy_flags,
    policy_from_args,
)
from gpustack_operator.domain.nodeview import name_of
from gpustack_operator.domain.policy import ChainPolicy
from gpustack_operator.domain.poolinfo import unit_text
from gpustack_operator.domain.queues import is_owned
from gpustack_operator.gateway.pools import pool_entry
from gpustack_operator.kr8sobjects import list_objects, served_versions
from gpustack_operator.kubeconfig import KubeconfigError, close_kr8s, connect_kr8s

HOST_RESOURCES = ("cpu", "memory", "ephemeral-storage")
COLUMNS = ("LOCALQUEUE", "UNIT", "RESOURCE", "QUOTA", "RESERVED", "USED")


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


def pool_rows(
    cluster_queues: Iterable[Mapping[str, Any]],
    local_queues: Iterable[Mapping[str, Any]],
    manufacturers: Iterable[str] | None = None,
) -> list[dict[str, Any]]:
    """One row per LocalQueue of the worker's whose ClusterQueue is known, by name; with
    *manufacturers*, device pools of other manufacturers are left out (CPU pools stay)."""
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
                "quota": entry["nominalQuota"].get(resource, "0"),
                "reserved": reservation.get(resource, "0"),
                "used": usage.get(resource, "0"),
                "nominalQuota": entry["nominalQuota"],
                "reservation": entry["reservation"],
                "usage": entry["usage"],
            }
        )
    return rows


def render_table(rows: list[dict[str, Any]]) -> str:
    keys = ("localQueue", "unit", "resource", "quota", "reserved", "used")
    table = [list(COLUMNS), *([str(row[k]) for k in keys] for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in table
    )


async def fetch_queues(
    args: argparse.Namespace, policy: ChainPolicy
) -> tuple[list[Any], list[Any]] | str:
    """Every ClusterQueue and the namespace's LocalQueues in the Kueue version *policy*
    chooses, or why they cannot be read (one line)."""
    try:
        api = await connect_kr8s(args.kubeconfig, args.context)
    except KubeconfigError as exc:  # one line naming the file and the fix
        return f"cannot connect to the cluster: {exc}"
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
        local_queues = await list_objects(api, kueue.local_queues, args.namespace)
        if not local_queues and not await _namespace_exists(api, args.namespace):
            return (
                f"namespace {args.namespace} does not exist: pass an existing one with -n "
                "(kubectl get namespaces)"
            )
        return cluster_queues, local_queues
    except Exception as exc:  # kr8s's ServerError, httpx's transport errors
        return f"cannot read the queues: {exc}"
    finally:
        await close_kr8s(api)


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


def run_queues(args: argparse.Namespace) -> int:
    try:
        policy = policy_from_args(args)
    except ValueError as exc:
        sys.stderr.write(f"gpustack-operator queues: error: {exc}\n")
        return 2
    fetched = asyncio.run(fetch_queues(args, policy))
    if isinstance(fetched, str):
        sys.stderr.write(f"gpustack-operator queues: error: {fetched}\n")
        return 1
    rows = pool_rows(*fetched, manufacturers=policy.manufacturers if args.manufacturer else None)
    if args.output == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    elif rows:
        sys.stdout.write(render_table(rows) + "\n")
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
