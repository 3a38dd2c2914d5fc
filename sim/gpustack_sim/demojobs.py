"""``sim --demo-jobs``: three Jobs derived from the converged chain, and where each landed.

docs/simulator.md, "Demo jobs": one Job that fits (1 card in a device pool), one too big
(more cards than that pool's quota), one in the wrong queue (a card asked of a CPU-only
pool's LocalQueue). The sim's Kueue stand-in admits or holds each; this reads the outcome.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpustack_operator.apis import KUEUE_GROUP
from gpustack_operator.commands.queues import pool_rows
from gpustack_operator.domain.chain.topology import topology_levels
from gpustack_operator.domain.labels import note
from gpustack_operator.domain.nodeview import annotations_of, labels_of, name_of
from gpustack_operator.domain.quantities import parse_quantity
from gpustack_operator.domain.selectors import labels_match
from gpustack_operator.gateway.pools import pool_entry
from gpustack_sim.standins.kueuetas import assignment_placement

if TYPE_CHECKING:
    from gpustack_sim.cluster.cluster import SimCluster

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
_HOST = frozenset({"cpu", "memory", "ephemeral-storage"})
"""Resources a Pod may request without a limit; every other (extended) one needs limit =
request (Kubernetes' Pod validation, "Limit must be set for non overcommitable resources")."""
_POLL = 0.05


@dataclass(frozen=True)
class DemoJob:
    """One Job to submit: its name, LocalQueue, namespace and requests."""

    name: str
    queue: str
    namespace: str
    requests: dict[str, str]
    pods: int = 1
    annotations: dict[str, str] = field(default_factory=dict)
    """On the pod template: a TAS Job's topology request (docs/workloads.md)."""


def _unit_requests(cluster_queue: Mapping[str, Any]) -> dict[str, str]:
    """cpu and memory of one unit of the pool (docs/workloads.md, "What to request")."""
    unit = pool_entry("", cluster_queue)["unit"]
    return {"cpu": str(unit.get("cpu") or "1"), "memory": str(unit.get("memory") or "1Gi")}


def _whole(quantity: object) -> int:
    """A quota quantity as a whole count (0 when it does not parse)."""
    parsed = parse_quantity(str(quantity))
    return int(parsed) if parsed is not None else 0


def _cohort_quota(
    cluster_queues: list[dict[str, Any]], pool: Mapping[str, Any], resource: str
) -> int:
    """The nominal quota of *resource* over *pool* and every ClusterQueue of its Cohort."""
    cohort = pool_entry("", pool)["cohort"]
    members: list[Mapping[str, Any]] = [
        cq for cq in cluster_queues if cohort and pool_entry("", cq)["cohort"] == cohort
    ]
    return sum(
        _whole(pool_entry("", cq)["nominalQuota"].get(resource, "0")) for cq in members or [pool]
    )


def pick_demo_jobs(
    cluster_queues: list[dict[str, Any]], local_queues: list[dict[str, Any]]
) -> list[DemoJob]:
    """The demo Jobs for this chain, as `queues` sees its pools (docs/simulator.md, "Demo
    jobs"): one that fits and one too big in the whole-card device pool with the most
    devices, one asking for that device in a CPU-only pool's LocalQueue. A chain without a
    device pool gets none; one without a CPU-only pool gets no wrong-queue Job."""
    queues = {cq["metadata"]["name"]: cq for cq in cluster_queues}
    rows = sorted(
        pool_rows(cluster_queues, local_queues), key=lambda r: (r["namespace"], r["localQueue"])
    )
    devices = [
        r
        for r in rows
        if r["acceleratable"]
        and r["resource"] != "cpu"
        and not pool_entry("", queues[r["clusterQueue"]])["unit"].get("slices")
    ]
    if not devices:
        return []
    pool = max(devices, key=lambda r: (_whole(r["quota"]), -rows.index(r)))
    device = str(pool["resource"])
    unit = _unit_requests(queues[pool["clusterQueue"]])
    queue, namespace = str(pool["localQueue"]), str(pool["namespace"])
    # More than the pool could reach by borrowing too: every device its Cohort holds, plus one.
    too_many = str(_cohort_quota(cluster_queues, queues[pool["clusterQueue"]], device) + 1)
    jobs = [
        DemoJob("demo-fits", queue, namespace, {**unit, device: "1"}),
        DemoJob("demo-too-big", queue, namespace, {**unit, device: too_many}),
    ]
    cpu_only = [r for r in rows if not r["acceleratable"] and r["resource"] == "cpu"]
    if cpu_only:
        lq = cpu_only[0]
        cpu_unit = _unit_requests(queues[lq["clusterQueue"]])
        jobs.append(
            DemoJob(
                "demo-wrong-queue",
                str(lq["localQueue"]),
                str(lq["namespace"]),
                {**cpu_unit, device: "1"},
            )
        )
    return jobs


def pick_tas_demo_jobs(
    cluster_queues: list[dict[str, Any]],
    local_queues: list[dict[str, Any]],
    flavors: list[dict[str, Any]],
    topologies: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
) -> list[DemoJob]:
    """Two Jobs for the TAS device flavor with the most nodes (docs/simulator.md, "Demo
    jobs"): whole-node pods that must share one domain of the finest level (hostname aside)
    whose domains hold several nodes. One fills the largest such domain and is admitted into
    one; the other asks for one node more, though the pool's quota covers it, and waits with
    Kueue's TAS message. None without such a flavor."""
    levels = {name_of(t): topology_levels(t) for t in topologies}
    by_name = {name_of(f): f for f in flavors}
    best: tuple[int, str, DemoJob, DemoJob] | None = None
    for row in pool_rows(cluster_queues, local_queues):
        if not row["acceleratable"] or row["resource"] == "cpu":
            continue
        queue = next(q for q in cluster_queues if name_of(q) == row["clusterQueue"])
        for group in queue["spec"].get("resourceGroups") or []:
            for entry in group.get("flavors") or []:
                flavor = by_name.get(entry["name"]) or {}
                keys = levels.get(str((flavor.get("spec") or {}).get("topologyName") or ""))
                per_node = _whole(annotations_of(flavor).get(note("accelerator"), "0"))
                if not keys or per_node <= 0:
                    continue
                members = _selected(flavor, nodes)
                level, largest = _domain_level(keys, members)
                if level is None or largest >= len(members):
                    continue
                unit = _unit_requests(queue)
                requests = {
                    "cpu": str(_whole(unit["cpu"]) * per_node),
                    "memory": _times(unit["memory"], per_node),
                    str(row["resource"]): str(per_node),
                }
                asks = {REQUIRED_TOPOLOGY: level}
                lq, ns = str(row["localQueue"]), str(row["namespace"])
                fits = DemoJob("demo-tas-one-domain", lq, ns, requests, largest, asks)
                held = DemoJob("demo-tas-no-domain", lq, ns, requests, largest + 1, asks)
                key = (len(members), name_of(flavor))
                if best is None or key[0] > best[0] or (key[0] == best[0] and key[1] < best[1]):
                    best = (key[0], key[1], fits, held)
    return [best[2], best[3]] if best is not None else []


REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"


def _selected(flavor: Mapping[str, Any], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    wanted = (flavor.get("spec") or {}).get("nodeLabels") or {}
    return [n for n in nodes if labels_match(wanted, labels_of(n))]


def _domain_level(keys: tuple[str, ...], members: list[dict[str, Any]]) -> tuple[str | None, int]:
    """The finest level (hostname aside) whose largest domain holds several of *members*,
    and that domain's node count."""
    for depth in range(len(keys) - 2, -1, -1):
        domains: dict[tuple[str, ...], int] = {}
        for node in members:
            path = tuple(labels_of(node).get(k, "") for k in keys[: depth + 1])
            domains[path] = domains.get(path, 0) + 1
        largest = max(domains.values(), default=0)
        if largest >= 2:
            return keys[depth], largest
    return None, 0


def _times(memory: str, factor: int) -> str:
    quantity = parse_quantity(memory)
    if quantity is None:
        return memory
    total = int(quantity * factor)
    return f"{total // 2**30}Gi" if total % 2**30 == 0 else f"{total // 2**20}Mi"


def job_manifest(job: DemoJob) -> dict[str, Any]:
    """A suspended Job for *job* (docs/workloads.md's Job shape)."""
    template_meta = {"annotations": dict(job.annotations)} if job.annotations else {}
    parallel = {"parallelism": job.pods, "completions": job.pods} if job.pods != 1 else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": {QUEUE_NAME_LABEL: job.queue},
        },
        "spec": {
            "suspend": True,
            **parallel,
            "template": {
                **({"metadata": template_meta} if template_meta else {}),
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "command": ["sleep", "60"],
                            "resources": {
                                "requests": dict(job.requests),
                                # A device can't be overcommitted: Kubernetes requires its
                                # limit, equal to the request.
                                "limits": {k: v for k, v in job.requests.items() if k not in _HOST},
                            },
                        }
                    ],
                },
            },
        },
    }


def _quota_reserved(wl: Mapping[str, Any]) -> dict[str, Any] | None:
    for cond in (wl.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "QuotaReserved":
            return dict(cond)
    return None


def _workload_of(workloads: list[dict[str, Any]], job: DemoJob) -> dict[str, Any] | None:
    for wl in workloads:
        if wl["metadata"].get("namespace") == job.namespace and any(
            o.get("kind") == "Job" and o.get("name") == job.name
            for o in wl["metadata"].get("ownerReferences") or []
        ):
            return wl
    return None


def outcome(wl: Mapping[str, Any] | None, job: Mapping[str, Any] | None) -> str | None:
    """Where the Job landed, or why it waits; None while Kueue has not decided."""
    cond = _quota_reserved(wl or {})
    if wl is None or cond is None:
        return None
    if cond.get("status") != "True":
        return f"waiting: {cond.get('message') or cond.get('reason')}"
    admission = (wl.get("status") or {}).get("admission") or {}
    flavors = sorted(
        {
            f
            for ps in admission.get("podSetAssignments") or []
            for f in (ps.get("flavors") or {}).values()
        }
    )
    pod = (((job or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    if (job or {}).get("spec", {}).get("suspend", True):
        return None  # admitted, the Job not yet unsuspended
    selector = ", ".join(f"{k}={v}" for k, v in sorted((pod.get("nodeSelector") or {}).items()))
    placed = [
        f"{node} ({pods} pod{'s' if pods != 1 else ''})"
        for ps in admission.get("podSetAssignments") or []
        for node, pods in assignment_placement(ps.get("topologyAssignment") or {})
    ]
    where = f"; TAS placed it on {', '.join(placed)}" if placed else ""
    return (
        f"admitted to ClusterQueue {admission.get('clusterQueue')}, flavor "
        f"{', '.join(flavors)}, pinned to nodeSelector {selector or '(none)'}{where}"
    )


async def run_demo_jobs(cluster: SimCluster, seconds: float) -> str:
    """Submit the demo Jobs, wait (bounded) for Kueue's decision on each, and describe them.

    Raises ``TimeoutError`` naming the Jobs still undecided after *seconds*.
    """
    store = cluster.sim.store
    api = f"{KUEUE_GROUP}/{cluster.kueue.version.value}"
    cluster_queues, local_queues = store.list(api, "ClusterQueue"), store.list(api, "LocalQueue")
    jobs = pick_demo_jobs(cluster_queues, local_queues)
    jobs += pick_tas_demo_jobs(  # docs/simulator.md, "Demo jobs"
        cluster_queues,
        local_queues,
        store.list(api, "ResourceFlavor"),
        store.list(api, "Topology") if cluster.kueue.topologies is not None else [],
        store.list("v1", "Node"),
    )
    for job in jobs:
        store.create(job_manifest(job))
    deadline = time.monotonic() + seconds
    results: dict[str, str] = {}
    while True:
        workloads = store.list(api, "Workload")
        for job in jobs:
            live = store.get("batch/v1", "Job", job.name, job.namespace)
            found = outcome(_workload_of(workloads, job), live)
            if found is not None:
                results[job.name] = found
        if len(results) == len(jobs):
            break
        if time.monotonic() > deadline:
            undecided = [j.name for j in jobs if j.name not in results]
            raise TimeoutError(
                f"Kueue did not decide on {', '.join(undecided)} in {seconds:g}s: raise --timeout"
            )
        await asyncio.sleep(_POLL)
    lines = [f"Jobs ({len(jobs)} submitted by --demo-jobs):"]
    for job in jobs:
        asks = " ".join(f"{k}={v}" for k, v in sorted(job.requests.items()))
        if job.pods != 1:
            asks = f"{job.pods} pods x {asks}"
        asks += "".join(f" {k.rpartition('/')[2]}={v}" for k, v in job.annotations.items())
        lines.append(f"  {job.name}  queue {job.queue} in {job.namespace}  asks {asks}")
        lines.append(f"    {results[job.name]}")
        scaling = cluster.provisioning is not None and bool(cluster.provisioning.pools())
        if scaling and results[job.name].startswith("admitted"):
            lines.extend(await _scaled_up(cluster, job, deadline))
    return "\n".join(lines) + "\n"


async def _scaled_up(cluster: SimCluster, job: DemoJob, deadline: float) -> list[str]:
    """For a pool that scales from zero (docs/autoscaling.md): the Job's pod Pending, the
    node the provisioning stand-in added, the pod Running on it."""
    from gpustack_sim.standins.provisioning import PROVISIONED_ANNOTATION
    from gpustack_sim.standins.scheduler import JOB_NAME_LABEL

    store = cluster.sim.store
    name = f"{job.name}-..."  # the Job controller's names end in 5 random characters
    seen_pending = False
    while time.monotonic() <= deadline:
        pods = [
            p
            for p in store.list("v1", "Pod", job.namespace)
            if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == job.name
        ]
        pod = min(pods, key=lambda p: str(p["metadata"]["name"])) if pods else None
        if pod is not None:
            name = str(pod["metadata"]["name"])
        node_name = ((pod or {}).get("spec") or {}).get("nodeName")
        if pod is not None and not node_name:
            seen_pending = True
        if node_name:
            node = store.get("v1", "Node", node_name) or {}
            pool = ((node.get("metadata") or {}).get("annotations") or {}).get(
                PROVISIONED_ANNOTATION
            )
            lines = []
            if seen_pending:
                lines.append(f"    pod {name}: Pending (the pool had no node that fits)")
            if pool:
                lines.append(
                    f"    node {node_name} added for pool {pool} by the provisioning stand-in"
                )
            phase = ((pod or {}).get("status") or {}).get("phase", "?")
            lines.append(f"    pod {name}: {phase} on {node_name}")
            return lines
        await asyncio.sleep(_POLL)
    return [f"    pod {name}: still Pending (no node arrived; raise --timeout)"]
