"""Teams switched on and off under running Jobs (docs/teams.md, "Moving a pool to teams, and
back"): ``sim --serve`` with kubectl, one node of 8 cards, teams declared and removed twice.
While the retiring queues hold work the new ones get only the rest, so Kueue (the
simulator's stand-in) never admits more cards than exist; once the old Jobs end, the chain
is ``plan``'s for the declaration in force."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from gpustack_operator.domain.node.availability import format_time
from tests.e2e.conftest import Kubectl
from tests.integration.worker.support import node

pytestmark = pytest.mark.anyio

GPU = "nvidia.com/gpu"
CARDS = 8
SYSTEM = "gpustack-system"
NAMESPACES = "research,serving"
TEAMS = """\
teams:
  - name: research
    namespaces: [research]
    shares:
      - pools: {manufacturer: nvidia}
        share: 50%
  - name: serving
    namespaces: [serving]
    shares:
      - pools: {manufacturer: nvidia}
        share: 30%
"""
DEADLINE = 60.0


def gpu_node() -> dict[str, Any]:
    obj = node("gpu-8", cpu="64", memory="512Gi", cards=("Tesla T4", CARDS))
    obj["status"]["capacity"][GPU] = str(CARDS)
    obj["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": format_time(time.time() - 60)}
    ]
    return obj


def job(name: str, queue: str, cards: int) -> str:
    requests = {"cpu": "1", "memory": "1Gi", GPU: str(cards)}
    return json.dumps(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox",
                                "resources": {"requests": requests},
                            }
                        ],
                    }
                },
            },
        }
    )


async def items(kubectl: Kubectl, *what: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(await kubectl.out("get", *what, "-o", "json"))["items"]
    return found


def reserved_cards(queues: list[dict[str, Any]]) -> int:
    """Cards Kueue reports reserved over every ClusterQueue."""
    return sum(
        int(r.get("total") or 0)
        for q in queues
        for f in (q.get("status") or {}).get("flavorsReservation") or []
        for r in f["resources"]
        if r["name"] == GPU
    )


def chain_facts(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """What must equal ``plan``: each queue's cohort and quotas (and lending/borrowing
    limits), each Cohort's own quota, each LocalQueue's ClusterQueue."""

    def groups(obj: dict[str, Any]) -> list[Any]:
        return [
            (
                f["name"],
                sorted(
                    (r["name"], r["nominalQuota"], r.get("borrowingLimit"), r.get("lendingLimit"))
                    for r in f["resources"]
                ),
            )
            for g in obj["spec"].get("resourceGroups") or []
            for f in g["flavors"]
        ]

    facts: dict[str, Any] = {}
    for obj in objects:
        kind, meta = obj["kind"], obj["metadata"]
        if kind == "ClusterQueue":
            facts[f"ClusterQueue/{meta['name']}"] = (
                obj["spec"].get("cohortName"),
                obj["spec"].get("stopPolicy") in (None, "None"),
                groups(obj),
            )
        elif kind == "Cohort":
            facts[f"Cohort/{meta['name']}"] = groups(obj)
        elif kind == "LocalQueue":
            facts[f"LocalQueue/{meta['namespace']}/{meta['name']}"] = obj["spec"]["clusterQueue"]
    return facts


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not await check():
        assert time.monotonic() < deadline, what
        await anyio.sleep(0.25)


async def test_teams_on_off_on_off_under_running_jobs_never_over_admit(
    kubectl_bin: Path, tmp_path: Path
) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [gpu_node()]}))
    teams = tmp_path / "teams.yaml"
    teams.write_text(TEAMS)
    kubeconfig = tmp_path / "sim-kubeconfig.yaml"
    argv = [sys.executable, "-m", "gpustack_operator", "--log-level", "error", "sim"]
    argv += ["--serve", "--plain-http", "--cluster", str(nodes), "--namespaces", NAMESPACES]
    argv += ["--kubeconfig-out", str(kubeconfig), "--job-run-time", "3600"]  # ended by hand
    said = tmp_path / "sim-stderr.log"
    with said.open("wb") as stderr:
        process = await anyio.open_process(argv, stderr=stderr)
    most = 0

    async def plan(with_teams: bool) -> dict[str, Any]:
        args = [sys.executable, "-m", "gpustack_operator", "--log-level", "error", "plan"]
        args += ["--nodes", str(nodes), "--namespaces", NAMESPACES, "-o", "json"]
        args += ["--teams", str(teams)] if with_teams else []
        done = await anyio.run_process(args)
        return chain_facts(json.loads(done.stdout)["items"])

    try:
        await eventually(
            lambda: anyio.to_thread.run_sync(lambda: "Stop with Ctrl-C" in said.read_text()),
            "sim --serve started",
        )
        kubectl = Kubectl(kubectl_bin, kubeconfig, tmp_path / "kube-cache")
        plans = {flag: await plan(flag) for flag in (False, True)}

        async def chain() -> dict[str, Any]:
            return chain_facts(await items(kubectl, "clusterqueues,cohorts,localqueues", "-A"))

        async def watch_admissions() -> None:
            nonlocal most
            while True:
                most = max(most, reserved_cards(await items(kubectl, "clusterqueues")))
                await anyio.sleep(0.1)

        async def admitted(namespace: str, name: str) -> bool:
            for wl in await items(kubectl, "workloads", "-n", namespace):
                if any(o["name"] == name for o in wl["metadata"].get("ownerReferences", [])):
                    return any(
                        c["type"] == "QuotaReserved" and c["status"] == "True"
                        for c in (wl.get("status") or {}).get("conditions") or []
                    )
            return False

        async def queue_in(namespace: str) -> str:
            lqs = await items(kubectl, "localqueues", "-n", namespace)
            (name,) = {q["metadata"]["name"] for q in lqs if "nvidia" in q["spec"]["clusterQueue"]}
            return str(name)

        async def queue_switched(namespace: str, with_teams: bool) -> bool:
            lqs = await items(kubectl, "localqueues", "-n", namespace)
            targets = [
                q["spec"]["clusterQueue"] for q in lqs if "nvidia" in q["spec"]["clusterQueue"]
            ]
            return len(targets) == 1 and targets[0].endswith(f"-{namespace}") == with_teams

        async def submit(namespace: str, name: str, cards: int) -> None:
            await kubectl(
                "-n",
                namespace,
                "apply",
                "-f",
                "-",
                stdin=job(name, await queue_in(namespace), cards),
            )

        async def is_plan(with_teams: bool) -> bool:
            return await chain() == plans[with_teams]

        await eventually(lambda: is_plan(False), "converged without teams")
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch_admissions)
            # Without teams a research Job takes every card.
            await submit("research", "old", CARDS)
            await eventually(lambda: admitted("research", "old"), "the first Job admitted")
            running = ("research", "old")
            for step, with_teams in enumerate((True, False, True, False)):
                if with_teams:
                    configmap = ["-n", SYSTEM, "create", "configmap", "gpustack-teams"]
                    await kubectl(*configmap, f"--from-file=teams.yaml={teams}")
                else:
                    await kubectl("-n", SYSTEM, "delete", "configmap", "gpustack-teams")
                # A new Job within what the new queues will own waits while the old runs.
                namespace = "serving" if with_teams else "research"
                new = f"new-{step}"
                cards = 2 if with_teams else CARDS
                await eventually(
                    partial(queue_switched, namespace, with_teams),
                    f"step {step}: the LocalQueue of {namespace}",
                )
                await submit(namespace, new, cards)
                for _ in range(8):  # the stand-in has several chances to over-admit
                    await anyio.sleep(0.25)
                    assert not await admitted(namespace, new), f"step {step}: admitted too soon"
                assert most <= CARDS, f"step {step}: {most} cards admitted on {CARDS}"
                # The old work ends: the new queues reach the whole pool, as plan shows it.
                await kubectl("-n", running[0], "delete", "job", running[1])
                await eventually(partial(admitted, namespace, new), f"step {step}: admitted")
                await eventually(partial(is_plan, with_teams), f"step {step}: the plan")
                assert most <= CARDS, f"step {step}: {most} cards admitted on {CARDS}"
                running = (namespace, new)
            tasks.cancel_scope.cancel()
        assert most == CARDS
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
