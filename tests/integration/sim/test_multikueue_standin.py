"""MultiKueue end to end in the simulator, on the scenario the real tier runs on real Kueue
(tests/realcluster/test_multikueue.py): a manager and two members, east with H100 and CPU
nodes, west with MI300X and CPU nodes of the same CPU shape (examples/multikueue/), each
holding the product's deploy/components/multikueue-member with RBAC enforced. The product's
worker-gateway MultiKueue mode writes the manager's objects; the manager holds one
ClusterQueue per distinct pool with the members' quota summed and the right members in its
check. A Job submitted once to the manager runs in the member that has its hardware; one for
the CPU pool both members serve runs in one of them, not both. Each step is checked by
tests/multikueue_dispatch.py, the same checks the real tier makes against Kueue v0.19.2."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from gpustack_operator.domain.chain.multikueue import secret_name
from gpustack_operator.domain.profiles import local_queue_name
from gpustack_operator.domain.quantities import parse_quantity, sum_quantities
from gpustack_sim.cluster.multikueue import MultiKueueFleet, queued_job
from gpustack_sim.standins.multikueue import kubeconfig_problem
from tests.multikueue_dispatch import (
    DispatchView,
    finished_problems,
    manager_view,
    member_view,
    running_problems,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "multikueue"
MEMBERS = {"east": EXAMPLES / "member-h100.yaml", "west": EXAMPLES / "member-mi300x.yaml"}
NAMESPACE = "ml"
KUEUE_API = "kueue.x-k8s.io/v1beta2"


def _nodes(path: Path) -> list[dict[str, Any]]:
    return [i for i in yaml.safe_load(path.read_text())["items"] if i["kind"] == "Node"]


@pytest.fixture
async def fleet() -> AsyncIterator[MultiKueueFleet]:
    members = {name: _nodes(path) for name, path in MEMBERS.items()}
    async with MultiKueueFleet(members, [NAMESPACE], run_seconds=1.0) as running:
        yield running


def _lister(sim: Any) -> Any:
    apis = {
        "jobs": ("batch/v1", "Job"),
        "workloads": (KUEUE_API, "Workload"),
        "pods": ("v1", "Pod"),
    }
    return lambda resource: sim.store.list(*apis[resource], namespace=NAMESPACE)


def _views(fleet: MultiKueueFleet, job: str) -> tuple[DispatchView, dict[str, DispatchView]]:
    manager = manager_view(_lister(fleet.manager), job)
    workload = (manager.workload or {}).get("metadata", {}).get("name")
    return manager, {
        name: member_view(_lister(cluster.sim), job, workload)
        for name, cluster in fleet.members.items()
    }


async def _until(check: Any, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {seconds:.0f} s")
        await anyio.sleep(0.05)


async def _run_once(fleet: MultiKueueFleet, job: dict[str, Any], expected: set[str]) -> str:
    """Submit *job* to the manager; it must run in one member of *expected* with no copy
    elsewhere, then finish there and on the manager (the real tier's checks)."""
    fleet.manager.store.create(job)
    name = job["metadata"]["name"]
    nodes = {member: {n["metadata"]["name"] for n in _nodes(p)} for member, p in MEMBERS.items()}
    found: dict[str, Any] = {"problems": [], "winner": ""}
    seen: list[list[str]] = []  # each distinct set of problems, in order: the failure's trace

    def note(problems: list[str]) -> bool:
        found["problems"] = problems
        if not seen or seen[-1] != problems:
            seen.append(problems)
        return not problems

    def running() -> bool:
        problems, found["winner"] = running_problems(*_views(fleet, name), expected, nodes)
        return note(problems)

    def finished() -> bool:
        return note(finished_problems(*_views(fleet, name)))

    for check, what in ((running, "running in one member"), (finished, "finished")):
        try:
            await _until(check, f"Job {name} {what}")
        except AssertionError:
            problems = "\n".join(found["problems"])
            trace = "\n".join(f"  {i}: {p}" for i, p in enumerate(seen))
            raise AssertionError(f"Job {name} not {what}:\n{problems}\nseen:\n{trace}") from None
    return str(found["winner"])


async def test_the_manager_connects_to_every_member(fleet: MultiKueueFleet) -> None:
    def active(kind: str) -> list[str]:
        return sorted(
            o["metadata"]["name"]
            for o in fleet.manager.store.list(KUEUE_API, kind)
            if any(
                c["type"] == "Active" and c["status"] == "True"
                for c in (o.get("status") or {}).get("conditions") or []
            )
        )

    await _until(lambda: active("MultiKueueCluster") == sorted(MEMBERS), "members Active")
    checks = sorted(
        c["metadata"]["name"] for c in fleet.manager.store.list(KUEUE_API, "AdmissionCheck")
    )
    await _until(lambda: active("AdmissionCheck") == checks, "checks Active")


async def test_the_manager_holds_one_queue_per_distinct_pool_with_the_summed_quota(
    fleet: MultiKueueFleet,
) -> None:
    store = fleet.manager.store
    holders: dict[str, list[str]] = {}
    quotas: dict[str, list[tuple[str, object]]] = {}
    for member in MEMBERS:
        for pool in fleet.pools(member):
            holders.setdefault(pool["name"], []).append(member)
            quotas.setdefault(pool["name"], []).extend(pool["nominalQuota"].items())
    assert sorted(holders[_pool(fleet, "nvidia.com/gpu")]) == ["east"]
    assert sorted(holders[_pool(fleet, None)]) == ["east", "west"]
    queues = {q["metadata"]["name"]: q for q in store.list(KUEUE_API, "ClusterQueue")}
    assert sorted(queues) == sorted(holders)
    for name, queue in queues.items():
        (group,) = queue["spec"]["resourceGroups"]
        (flavor,) = group["flavors"]
        quota = {r["name"]: parse_quantity(r["nominalQuota"]) for r in flavor["resources"]}
        summed = {r: parse_quantity(q) for r, q in sum_quantities(quotas[name]).items()}
        assert quota == summed, name
        (check,) = queue["spec"]["admissionChecksStrategy"]["admissionChecks"]
        admission = store.get(KUEUE_API, "AdmissionCheck", check["name"]) or {}
        config = store.get(KUEUE_API, "MultiKueueConfig", admission["spec"]["parameters"]["name"])
        assert config is not None and config["spec"]["clusters"] == sorted(holders[name]), name
    # The CPU pool both members serve: the manager's quota is the two members' together.
    cpu = _pool(fleet, None)
    one = {p["name"]: p for p in fleet.pools("east")}[cpu]["nominalQuota"]["cpu"]
    (resources,) = [
        f["resources"] for g in queues[cpu]["spec"]["resourceGroups"] for f in g["flavors"]
    ]
    manager_cpu = next(r["nominalQuota"] for r in resources if r["name"] == "cpu")
    summed_cpu, one_cpu = parse_quantity(manager_cpu), parse_quantity(one)
    assert summed_cpu is not None and one_cpu is not None and summed_cpu > one_cpu


def _pool(fleet: MultiKueueFleet, resource: str | None) -> str:
    east = {p["name"]: p for p in fleet.pools("east")}
    west = {p["name"] for p in fleet.pools("west")}
    for name, pool in east.items():
        if resource is None and name in west and not pool["acceleratable"]:
            return name
        if resource is not None and resource in pool["nominalQuota"]:
            return name
    raise AssertionError(f"no pool for {resource}")


async def test_an_h100_job_runs_only_in_the_member_with_h100s(fleet: MultiKueueFleet) -> None:
    queue = local_queue_name(_pool(fleet, "nvidia.com/gpu"))
    job = queued_job(
        "h100-once", NAMESPACE, queue, {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    )
    assert await _run_once(fleet, job, {"east"}) == "east"


async def test_a_cpu_job_runs_in_one_member_not_both(fleet: MultiKueueFleet) -> None:
    queue = local_queue_name(_pool(fleet, None))
    job = queued_job("cpu-once", NAMESPACE, queue, {"cpu": "1", "memory": "1Gi"})
    assert await _run_once(fleet, job, set(MEMBERS)) in MEMBERS


async def test_a_kubeconfig_kueue_refuses_leaves_the_member_inactive(
    fleet: MultiKueueFleet,
) -> None:
    store = fleet.manager.store

    def west() -> dict[str, Any]:
        cluster = store.get(KUEUE_API, "MultiKueueCluster", "west") or {}
        conditions = (cluster.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Active"), {})

    await _until(lambda: west().get("status") == "True", "west Active")
    secret = store.get("v1", "Secret", secret_name("west"), "kueue-system")
    assert secret is not None
    config = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    secret["data"]["kubeconfig"] = base64.b64encode(yaml.safe_dump(config).encode()).decode()
    store.update(secret)

    await _until(lambda: west()["status"] == "False", "west inactive")
    assert west()["reason"] == "InsecureKubeConfig"
    assert "insecure TLS verification is not allowed" in west()["message"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": "https://h", "certificate-authority": "/ca"},
                    }
                ]
            },
            "certificate-authority file paths are not allowed",
        ),
        ({"users": [{"name": "u", "user": {"tokenFile": "/t"}}]}, "tokenFile is not allowed"),
        (
            {"users": [{"name": "u", "user": {"exec": {"command": "x"}}}]},
            "exec plugins are not allowed",
        ),
    ],
)
def test_kubeconfigs_kueue_refuses_are_refused(change: dict[str, Any], message: str) -> None:
    problem = kubeconfig_problem(yaml.safe_dump(change))
    assert problem is not None and message in problem[1]
    assert (
        kubeconfig_problem(
            yaml.safe_dump(
                {
                    "clusters": [
                        {
                            "name": "c",
                            "cluster": {
                                "server": "https://h",
                                "certificate-authority-data": "eA==",
                            },
                        }
                    ]
                }
            )
        )
        is None
    )
