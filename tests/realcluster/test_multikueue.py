"""Scenario h on real Kueue: MultiKueue dispatch over three real control planes.

A manager and two members, each a whole control plane with Kueue v0.19.2; the members run
the operator (its worker and device managers, as the tier runs them) on the Nodes of
examples/multikueue/ (east: H100 and CPU nodes; west: MI300X and CPU nodes of the same CPU
shape, so both serve that CPU pool under one LocalQueue name) and hold the shipped
deploy/components/multikueue-member. The product's ``worker-gateway --multikueue-manager``
runs against the three and writes the manager's objects; the module waits for that chain
(one ClusterQueue per distinct pool, the summed quota, the right members in its check), then
submits Jobs. A Job submitted once to the manager runs (its Pod bound by the member's
kube-scheduler and Succeeded) in the member that has its hardware, and no other member keeps a
copy (docs/multikueue.md, "Dispatch")."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal

from gpustack_operator.domain.node.simdevices import SIM_DEVICES_ANNOTATION
from gpustack_operator.domain.profiles import local_queue_name
from gpustack_operator.domain.quantities import parse_quantity, sum_quantities
from gpustack_operator.environment import load_manufacturers
from gpustack_sim.cluster.multikueue import queued_job
from tests.multikueue_dispatch import (
    DispatchView,
    finished_problems,
    manager_view,
    member_view,
    running_problems,
)
from tests.realcluster.cluster import Operator, get_all, load_nodes, wait_converged
from tests.realcluster.controlplane import (
    DEFAULT_KUEUE_CONFIGURATION,
    REPO,
    Binaries,
    ControlPlane,
    Process,
    RealClusterError,
    port_in_use,
    shared_dir,
    wait_until,
)
from tests.realcluster.multicluster import (
    MANAGER_KUEUE_CONFIGURATION,
    member_kubeconfig,
    member_pools,
    multikueue_gateway,
    namespaces,
    running_planes,
)
from tests.realcluster.nodes import RUN_SECONDS_ANNOTATION, NodeAgents

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(900)]

MEMBERS = {
    "east": REPO / "examples" / "multikueue" / "member-h100.yaml",
    "west": REPO / "examples" / "multikueue" / "member-mi300x.yaml",
}
NAMESPACE = "ml"


@dataclass
class Clusters:
    manager: ControlPlane
    members: dict[str, ControlPlane]
    pools: dict[str, list[dict[str, Any]]]
    agents: dict[str, NodeAgents]
    gateway: Process


RUN_30S = {RUN_SECONDS_ANNOTATION: "30"}
"""The node stand-in runs each Pod for 30 s before it succeeds."""


@pytest.fixture(scope="module")
def clusters(binaries: Binaries) -> Iterator[Clusters]:
    shared = shared_dir()
    assert shared is not None
    workdir = Path(tempfile.mkdtemp(prefix="gpustack-realcluster-multikueue-"))
    configurations = {
        "manager": MANAGER_KUEUE_CONFIGURATION,
        **dict.fromkeys(MEMBERS, DEFAULT_KUEUE_CONFIGURATION),
    }
    for name in configurations:
        (workdir / name).mkdir(parents=True)
    operators: list[Operator] = []
    all_ports: set[int] = set()
    with (
        running_planes(binaries, workdir, shared, configurations) as planes,
        start_blocking_portal() as portal,
    ):
        for plane in planes.values():
            all_ports |= plane.all_ports
        agents: dict[str, NodeAgents] = {}
        gateway: Process | None = None
        futures = []
        try:
            members = {name: planes[name] for name in MEMBERS}
            for plane in planes.values():
                plane.apply(namespaces([NAMESPACE]))
            for name, plane in members.items():
                nodes = load_nodes(MEMBERS[name])
                node_agents = NodeAgents(plane.server, plane.admin_tls(), load_manufacturers())
                agents[name] = node_agents
                futures.append(portal.start_task_soon(node_agents.run))
                portal.call(node_agents.register, nodes)
                operator = Operator(plane)
                operators.append(operator)
                operator.start_device_managers(
                    n["metadata"]["name"]
                    for n in nodes
                    if SIM_DEVICES_ANNOTATION in (n["metadata"].get("annotations") or {})
                )
                operator.start_worker()
            for operator in operators:
                wait_converged(operator.plane, operator)
            pools = {name: member_pools(plane, name) for name, plane in members.items()}
            manager = planes["manager"]
            tokens = {}
            for name, plane in members.items():
                tokens[name] = workdir / f"{name}-multikueue.kubeconfig"
                tokens[name].write_text(member_kubeconfig(plane))
            gateway = multikueue_gateway(
                manager, members, tokens, workdir / "manager" / "worker-gateway.log"
            )
            problems: list[str] = []

            def manager_chain() -> bool:
                problems[:] = _manager_chain_problems(manager, pools)
                return not problems

            try:
                wait_until(
                    manager_chain,
                    timeout=120,
                    what="the manager chain worker-gateway writes",
                    process=gateway,
                )
            except RealClusterError as exc:
                raise AssertionError(f"{exc}\nthe manager lacks: {problems}") from None
            yield Clusters(manager, members, pools, agents, gateway)
        finally:
            if gateway is not None:
                gateway.stop()
            for operator in operators:
                operator.stop_worker()
                for agent in list(operator.agents):
                    operator.agents.pop(agent).stop()
            for future in futures:
                future.cancel()
            for node_agents in agents.values():
                portal.call(node_agents.aclose)
    shutil.rmtree(workdir / "manager" / "etcd", ignore_errors=True)
    for name in MEMBERS:
        shutil.rmtree(workdir / name / "etcd", ignore_errors=True)
    left = [p for p in all_ports if port_in_use(p)]
    assert left == [], f"ports still open after the control planes stopped: {left}"


def _quota(queue: Mapping[str, Any]) -> dict[str, object]:
    return {
        r["name"]: parse_quantity(r["nominalQuota"])
        for group in queue["spec"]["resourceGroups"]
        for flavor in group["flavors"]
        for r in flavor["resources"]
    }


def _manager_chain_problems(
    manager: ControlPlane, pools: Mapping[str, list[dict[str, Any]]]
) -> list[str]:
    """What the manager's chain lacks: per distinct pool of the members a ClusterQueue with
    their quota summed and a check whose MultiKueueConfig lists exactly the members holding
    it, and its LocalQueue in the Jobs' namespace."""
    queues = {q["metadata"]["name"]: q for q in get_all(manager, "clusterqueues.kueue.x-k8s.io")}
    checks = {c["metadata"]["name"]: c for c in get_all(manager, "admissionchecks.kueue.x-k8s.io")}
    configs = {
        c["metadata"]["name"]: c for c in get_all(manager, "multikueueconfigs.kueue.x-k8s.io")
    }
    local = {
        q["metadata"]["name"]
        for q in get_all(manager, "localqueues.kueue.x-k8s.io", namespaced=True)
        if q["metadata"]["namespace"] == NAMESPACE
    }
    holders: dict[str, list[str]] = {}
    quotas: dict[str, list[tuple[str, object]]] = {}
    for member, entries in pools.items():
        for pool in entries:
            holders.setdefault(pool["name"], []).append(member)
            quotas.setdefault(pool["name"], []).extend(pool["nominalQuota"].items())
    problems = []
    if sorted(queues) != sorted(holders):
        problems.append(f"ClusterQueues {sorted(queues)}, wanted {sorted(holders)}")
    for name in sorted(set(holders) & set(queues)):
        wanted = {r: parse_quantity(q) for r, q in sum_quantities(quotas[name]).items()}
        if _quota(queues[name]) != wanted:
            problems.append(f"{name}: quota {_quota(queues[name])}, wanted {wanted}")
        strategy = queues[name]["spec"].get("admissionChecksStrategy") or {}
        names = [c["name"] for c in strategy.get("admissionChecks") or []]
        clusters = [
            configs.get(checks.get(c, {}).get("spec", {}).get("parameters", {}).get("name"), {})
            .get("spec", {})
            .get("clusters")
            for c in names
        ]
        if clusters != [sorted(holders[name])]:
            problems.append(f"{name}: check members {clusters}, wanted {sorted(holders[name])}")
        if local_queue_name(name) not in local:
            problems.append(f"{name}: no LocalQueue {local_queue_name(name)} in {NAMESPACE}")
    return problems


def _pool(clusters: Clusters, member: str, resource: str | None) -> str:
    """The ClusterQueue name of *member*'s pool serving *resource* (None: the CPU pool every
    member has)."""
    for pool in clusters.pools[member]:
        if resource is None:
            shared = all(
                any(p["name"] == pool["name"] for p in others) for others in clusters.pools.values()
            )
            if shared and not pool["acceleratable"]:
                return str(pool["name"])
        elif resource in pool["nominalQuota"]:
            return str(pool["name"])
    raise AssertionError(f"{member} has no pool for {resource or 'CPU in every member'}")


def _active(plane: ControlPlane, resource: str) -> list[str]:
    return sorted(
        o["metadata"]["name"]
        for o in get_all(plane, resource)
        if any(
            c["type"] == "Active" and c["status"] == "True"
            for c in (o.get("status") or {}).get("conditions") or []
        )
    )


def test_the_manager_connects_to_every_member(clusters: Clusters) -> None:
    wait_until(
        lambda: _active(clusters.manager, "multikueueclusters.kueue.x-k8s.io") == sorted(MEMBERS),
        timeout=120,
        what="every MultiKueueCluster Active",
    )
    checks = [
        c["metadata"]["name"] for c in get_all(clusters.manager, "admissionchecks.kueue.x-k8s.io")
    ]
    wait_until(
        lambda: _active(clusters.manager, "admissionchecks.kueue.x-k8s.io") == sorted(checks),
        timeout=120,
        what="every MultiKueue AdmissionCheck Active",
    )


def _views(clusters: Clusters, job: str) -> tuple[DispatchView, dict[str, DispatchView]]:
    def lister(plane: ControlPlane) -> Any:
        listed = json.loads(
            plane.kubectl_run(
                "get", "jobs.batch,workloads.kueue.x-k8s.io,pods", "-n", NAMESPACE, "-o", "json"
            )
        )["items"]
        by_kind = {"jobs": "Job", "workloads": "Workload", "pods": "Pod"}
        return lambda resource: [o for o in listed if o["kind"] == by_kind[resource]]

    manager = manager_view(lister(clusters.manager), job)
    workload = (manager.workload or {}).get("metadata", {}).get("name")
    members = {
        name: member_view(lister(plane), job, workload) for name, plane in clusters.members.items()
    }
    return manager, members


def _run_once(clusters: Clusters, job: dict[str, Any], expected: set[str]) -> str:
    """Submit *job* to the manager; wait until one member of *expected* runs it with no copy
    elsewhere, then until it finished there and the manager shows it; return that member."""
    clusters.manager.kubectl_run("apply", "-f", "-", stdin=json.dumps(job))
    name = job["metadata"]["name"]
    nodes = {
        member: {n["metadata"]["name"] for n in load_nodes(path)}
        for member, path in MEMBERS.items()
    }
    last: list[str] = []
    seen: list[list[str]] = []  # each distinct set of problems, in order: the failure's trace
    winner = ""

    def note(problems: list[str]) -> bool:
        nonlocal last
        last = problems
        if not seen or seen[-1] != problems:
            seen.append(problems)
        return not problems

    def running() -> bool:
        nonlocal winner
        problems, winner = running_problems(*_views(clusters, name), expected, nodes)
        return note(problems)

    def finished() -> bool:
        return note(finished_problems(*_views(clusters, name)))

    for check, what in ((running, "running in one member"), (finished, "finished")):
        try:
            wait_until(check, timeout=240, what=f"Job {name} {what}", every=0.2)
        except RealClusterError:
            trace = "\n".join(f"  {i}: {p}" for i, p in enumerate(seen))
            raise AssertionError(
                f"Job {name} not {what}:\n" + "\n".join(last) + f"\nseen:\n{trace}"
            ) from None
    ran = [
        (pod, node)
        for namespace, pod, node in clusters.agents[winner].succeeded
        if namespace == NAMESPACE and pod.startswith(f"{name}-")
    ]
    assert len(ran) == 1, ran
    assert ran[0][1] in nodes[winner], ran
    for member, agents in clusters.agents.items():
        if member != winner:
            assert not [p for ns, p, _ in agents.succeeded if p.startswith(f"{name}-")], member
    return winner


def test_an_h100_job_runs_only_in_the_member_with_h100s(clusters: Clusters) -> None:
    queue = local_queue_name(_pool(clusters, "east", "nvidia.com/gpu"))
    job = queued_job(
        "h100-once", NAMESPACE, queue, {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}, RUN_30S
    )
    assert _run_once(clusters, job, {"east"}) == "east"


def test_a_cpu_job_runs_in_one_member_not_both(clusters: Clusters) -> None:
    queue = local_queue_name(_pool(clusters, "east", None))
    job = queued_job("cpu-once", NAMESPACE, queue, {"cpu": "1", "memory": "1Gi"}, RUN_30S)
    assert _run_once(clusters, job, set(MEMBERS)) in MEMBERS
