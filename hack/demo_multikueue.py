"""MultiKueue on simulated clusters: Jobs submitted once to a manager, each run in the member
that has its hardware (``make demo-multikueue``; docs/multikueue.md, "The demo").

Two members run the operator on examples/multikueue/ (east: H100 and CPU nodes; west: MI300X
and CPU nodes) and hold the member component; the product's worker-gateway MultiKueue mode
writes the manager's objects for them, and the manager runs the simulator's Kueue and
MultiKueue stand-ins. One Job per manager queue is submitted to the manager; the
demo prints where each was admitted, which node of which member ran its Pod, and that no
other member kept a copy. Exit 0 when every Job ran where its hardware is, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import structlog
import yaml

from gpustack_sim.cluster.multikueue import MultiKueueFleet, queued_job

REPO = Path(__file__).resolve().parents[1]
MEMBERS = {
    "east": REPO / "examples" / "multikueue" / "member-h100.yaml",
    "west": REPO / "examples" / "multikueue" / "member-mi300x.yaml",
}
NAMESPACE = "ml"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def _nodes(path: Path) -> list[dict[str, Any]]:
    return [i for i in yaml.safe_load(path.read_text())["items"] if i["kind"] == "Node"]


def _jobs(fleet: MultiKueueFleet) -> list[tuple[dict[str, Any], set[str]]]:
    """One Job per manager ClusterQueue: one device of the pool's, else one CPU; with the
    members that hold that pool (where it may run)."""
    holders: dict[str, set[str]] = {}
    for member in fleet.inputs:
        for pool in member.pools:
            holders.setdefault(str(pool["name"]), set()).add(member.name)
    jobs = []
    local = {
        q["spec"]["clusterQueue"]: q["metadata"]["name"]
        for q in fleet.manager.store.list(KUEUE_API, "LocalQueue", namespace=NAMESPACE)
    }
    for index, queue in enumerate(fleet.manager.store.list(KUEUE_API, "ClusterQueue")):
        quota = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        devices = [r["name"] for r in quota if "/" in r["name"]]
        requests = {"cpu": "1", "memory": "1Gi", **dict.fromkeys(devices[:1], "1")}
        kind = devices[0].split("/")[0].split(".")[0] if devices else "cpu"
        name = f"demo-{kind}-{index}"
        jobs.append(
            (
                queued_job(name, NAMESPACE, local[queue["metadata"]["name"]], requests),
                holders[queue["metadata"]["name"]],
            )
        )
    return jobs


def _where(fleet: MultiKueueFleet, job: str) -> dict[str, list[tuple[str, str]]]:
    """Per member, the (Pod, node) of the Job's Pods it holds."""
    return {
        name: [
            (p["metadata"]["name"], str(p["spec"].get("nodeName") or "-"))
            for p in cluster.sim.store.list("v1", "Pod", namespace=NAMESPACE)
            if (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == job
        ]
        for name, cluster in fleet.members.items()
    }


def _condition(obj: dict[str, Any] | None, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
    )


async def _run(per_job: float) -> int:
    members = {name: _nodes(path) for name, path in MEMBERS.items()}
    async with MultiKueueFleet(members, [NAMESPACE], run_seconds=2.0) as fleet:
        print("Members (pools as the gateway reads them):")
        for member in fleet.inputs:
            for pool in member.pools:
                quota = ", ".join(f"{k}={v}" for k, v in pool["nominalQuota"].items())
                print(f"  {member.name:5} {pool['name']}  {quota}")
        print("Manager (MultiKueue):")
        for queue in fleet.manager.store.list(KUEUE_API, "ClusterQueue"):
            check = queue["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["name"]
            config = fleet.manager.store.get(KUEUE_API, "MultiKueueConfig", check) or {}
            clusters = ", ".join(config.get("spec", {}).get("clusters", []))
            print(f"  ClusterQueue {queue['metadata']['name']}  -> members: {clusters}")
        jobs = _jobs(fleet)
        for job, _ in jobs:
            fleet.manager.store.create(job)
        failed = 0
        for job, allowed in jobs:
            name = job["metadata"]["name"]
            ran: dict[str, list[tuple[str, str]]] = {}
            deadline = time.monotonic() + per_job
            manager_job: dict[str, Any] | None = None
            while time.monotonic() < deadline:
                for member, pods in _where(fleet, name).items():
                    if pods:
                        ran.setdefault(member, pods)
                manager_job = fleet.manager.store.get("batch/v1", "Job", name, NAMESPACE)
                if _condition(manager_job, "Complete"):
                    break
                await anyio.sleep(0.1)
            workloads = fleet.manager.store.list(KUEUE_API, "Workload", namespace=NAMESPACE)
            workload = next(
                (w for w in workloads if w["metadata"]["ownerReferences"][0]["name"] == name), {}
            )
            check = ((workload.get("status") or {}).get("admissionChecks") or [{}])[0]
            requests = job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
            asked = ", ".join(f"{k}={v}" for k, v in requests.items())
            print(f"\nJob {name} ({asked}), submitted once to the manager")
            print(f"  manager: check {check.get('state')}: {check.get('message')}")
            for member, pods in sorted(ran.items()):
                for pod, node in pods:
                    print(f"  {member}: Pod {pod} on node {node}")
            done = _condition(manager_job, "Complete")
            status = (manager_job or {}).get("status") or {}
            print(
                f"  manager's Job: {'Complete' if done else 'not complete'}, "
                f"succeeded={status.get('succeeded', 0)} (the member's Job status)"
            )
            good = done and len(ran) == 1 and set(ran) <= allowed
            if not good:
                failed += 1
                print(f"  UNEXPECTED: ran in {sorted(ran)}, expected one of {sorted(allowed)}")
        print(
            "\n"
            + (
                "every Job ran in a member that has its hardware"
                if not failed
                else f"{failed} Job(s) did not"
            )
        )
        return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per Job")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    return anyio.run(_run, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
