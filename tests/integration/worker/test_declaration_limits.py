"""Declarations that never hurt (docs/teams.md, "Limits of a declaration"; docs/autoscaling.md,
"Pools declared by a person"; docs/worker.md, "Declarations in force"): whatever a person
writes into the teams ConfigMap or the declared-pools ConfigMap (a 1 MiB text, an alias bomb,
10,000-deep nesting, NUL bytes, a value of the wrong shape, a text only under binaryData, the
key missing), the worker process answers ``/healthz`` within a second while it reads it,
refuses it with a Warning Event, keeps the chain of the last good declaration, and stops on
SIGTERM within its grace period; a worker started again while the ConfigMap is bad keeps the
chain of the last good one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gpustack_operator.domain.chain.declaredpools import (
    DECLARED_POOLS_CONFIGMAP,
    DECLARED_POOLS_KEY,
    validate_declared_pools,
)
from gpustack_operator.domain.chain.teams import TEAMS_CONFIGMAP, TEAMS_KEY, parse_teams
from gpustack_operator.domain.declarationstatus import STATUS_CONFIGMAP
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_sim.apiserver.server import SimServer
from tests.integration.bootstrap.support import NS, WORKER_TOKEN
from tests.integration.worker.support import (
    KUEUE,
    chain_diff,
    converged,
    eventually,
    fast_config,
    nfd_master,
    node,
    put_node,
    started_and_idle,
    worker_running,
)

pytestmark = pytest.mark.anyio

GOOD = """
teams:
  - name: research
    namespaces: [research]
    shares: [{pools: {manufacturer: nvidia}, share: 50%}]
"""
TEAM_QUEUE_SUFFIX = "-research"
QUEUE_CONTROLLERS = ("teams", "cohort", "clusterqueue", "localqueue")
GRACE = 30.0
"""The worker's default graceful shutdown, and the Pod's default termination grace."""


def _bomb() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        prev, this = chr(96 + i), chr(97 + i)
        lines.append(f"{this}: &{this} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("1 MiB", {"data": {TEAMS_KEY: "teams: []\n#" + "x" * (1024 * 1024 - 16)}}, "KiB allowed"),
    (
        "240 KiB of teams",
        {
            "data": {
                TEAMS_KEY: "teams:\n"
                + "".join(
                    f"  - {{name: t{i}, namespaces: [n{i}], shares: [{{pools: {{pool: p}}, "
                    "weight: 1}]}\n"
                    for i in range(3000)
                )
            }
        },
        "values",
    ),
    ("alias bomb", {"data": {TEAMS_KEY: _bomb()}}, "aliases expanded"),
    ("deep nesting", {"data": {TEAMS_KEY: "teams: " + "[" * 10_000 + "]" * 10_000}}, "deeper"),
    ("NUL bytes", {"data": {TEAMS_KEY: GOOD + "\x00\x00"}}, "not valid YAML"),
    (
        "selector as a list",
        {"data": {TEAMS_KEY: GOOD.replace("namespaces: [research]", "namespaceSelector: [a]")}},
        "not a label selector",
    ),
    (
        "selector as a string",
        {"data": {TEAMS_KEY: GOOD.replace("namespaces: [research]", "namespaceSelector: a=b")}},
        "not a label selector",
    ),
    (
        "unknown operator",
        {
            "data": {
                TEAMS_KEY: GOOD.replace(
                    "namespaces: [research]",
                    "namespaceSelector: {matchExpressions: [{key: a, operator: Like}]}",
                )
            }
        },
        "operator 'Like' is not one of",
    ),
    ("binaryData", {"binaryData": {TEAMS_KEY: "//79"}}, "under binaryData"),
    ("key missing", {"data": {"team.yaml": GOOD}}, "has no key teams.yaml"),
]


POOLS = """
pools:
  - name: l4
    nodeSelector: {cloud.google.com/gke-nodepool: l4}
    accelerator: {product: NVIDIA L4, resource: nvidia.com/gpu, perNode: 2}
    cpu: "8"
    memory: 32Gi
    maxNodes: 4
"""
BAD_POOLS: list[tuple[str, dict[str, Any], str]] = [
    (
        "1 MiB",
        {"data": {DECLARED_POOLS_KEY: "pools: []\n#" + "x" * (1024 * 1024 - 16)}},
        "KiB allowed",
    ),
    ("alias bomb", {"data": {DECLARED_POOLS_KEY: _bomb()}}, "aliases expanded"),
    (
        "deep nesting",
        {"data": {DECLARED_POOLS_KEY: "pools: " + "[" * 10_000 + "]" * 10_000}},
        "deeper",
    ),
    ("NUL bytes", {"data": {DECLARED_POOLS_KEY: POOLS + "\x00\x00"}}, "not valid YAML"),
    (
        "selector as a list",
        {
            "data": {
                DECLARED_POOLS_KEY: POOLS.replace("{cloud.google.com/gke-nodepool: l4}", "[l4]")
            }
        },
        "give nodeSelector",
    ),
    ("not a list", {"data": {DECLARED_POOLS_KEY: "pools: {not: a list}"}}, "a list 'pools'"),
    ("binaryData", {"binaryData": {DECLARED_POOLS_KEY: "//79"}}, "under binaryData"),
    ("key missing", {"data": {"pool.yaml": POOLS}}, "has no key pools.yaml"),
]
POOL_QUEUE = "pool-declared-l4"


@dataclass(frozen=True)
class Declaration:
    """One kind of declaration: its ConfigMap, good text, bad edits and what shows it."""

    kind: str  # the status ConfigMap's key prefix: teams, pools
    configmap: str
    key: str
    good: str
    bad: list[tuple[str, dict[str, Any], str]]  # what, the ConfigMap's fields, the message
    refused_reason: str
    in_force: str  # what the status says is in force after the good text

    def policy(self) -> ChainPolicy:
        policy = ChainPolicy(load_manufacturers())
        if self.kind == "teams":
            return replace(policy, teams=parse_teams(self.good, policy.manufacturers))
        pools = validate_declared_pools(self.good, policy.manufacturers_by_resource)
        return replace(policy, declared_pools=pools)

    def shown(self, sim: SimServer) -> list[str]:
        """The objects the good declaration makes (the team queues; the pool's queue)."""
        if self.kind == "teams":
            return _team_queues(sim)
        return [q for q in _queues(sim) if q == POOL_QUEUE]


TEAMS_KIND = Declaration(
    "teams",
    TEAMS_CONFIGMAP,
    TEAMS_KEY,
    GOOD,
    BAD,
    "TeamsDeclarationRefused",
    "research",
)
POOLS_KIND = Declaration(
    "pools",
    DECLARED_POOLS_CONFIGMAP,
    DECLARED_POOLS_KEY,
    POOLS,
    BAD_POOLS,
    "DeclaredPoolsRefused",
    "l4",
)
KINDS = [pytest.param(TEAMS_KIND, id="teams"), pytest.param(POOLS_KIND, id="declared-pools")]


def _seed(sim: SimServer, declaration: Declaration) -> None:
    if sim.store.get("v1", "Namespace", NS) is None:
        sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    if sim.store.get("v1", "Namespace", "research") is None:
        sim.store.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research"}}
        )
    put_node(sim, node("one", cards=("Tesla T4", 2)))
    sim.store.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": declaration.configmap, "namespace": NS},
            "data": {declaration.key: declaration.good},
        }
    )


def _edit(sim: SimServer, declaration: Declaration, fields: dict[str, Any]) -> None:
    stored = sim.store.get("v1", "ConfigMap", declaration.configmap, NS)
    assert stored is not None
    stored.pop("data", None)
    stored.pop("binaryData", None)
    stored.update(fields)
    sim.store.update(stored)


def _refusals(sim: SimServer, declaration: Declaration) -> list[str]:
    """The refusals' messages, one per refusal (repeats of one message are one Event with a
    count, as client-go aggregates them)."""
    return [
        str(e.get("message") or e.get("note") or "")
        for e in sim.store.list("v1", "Event", NS)
        if e.get("reason") == declaration.refused_reason
        for _ in range(int(e.get("count") or 1))
    ]


def _queues(sim: SimServer) -> list[str]:
    return sorted(q["metadata"]["name"] for q in sim.store.list(KUEUE, "ClusterQueue"))


def _team_queues(sim: SimServer) -> list[str]:
    return [q for q in _queues(sim) if q.endswith(TEAM_QUEUE_SUFFIX)]


async def _healthy_until(url: str, done: Callable[[], bool], what: str) -> None:
    """Ask /healthz (1 s to answer) until *done()*; fail after 60 s."""
    async with httpx.AsyncClient(timeout=1.0) as http:
        with anyio.move_on_after(60):
            while not done():
                response = await http.get(url)  # a timeout past 1 s fails the test
                assert response.status_code == 200, response.text
                await anyio.sleep(0.05)
            return
    raise AssertionError(f"timed out after 60s waiting for {what}")


@pytest.mark.parametrize("declaration", KINDS)
async def test_no_declaration_stalls_the_worker_or_changes_the_chain(
    sim: SimServer, sim_kubeconfig: Path, declaration: Declaration
) -> None:
    _seed(sim, declaration)
    config = fast_config(policy=declaration.policy())
    env = {
        **os.environ,
        "GPUSTACK_WORKER_NO_LEADER_ELECT": "true",
        "GPUSTACK_WORKER_METRICS_BIND_ADDRESS": "0",
        "GPUSTACK_WORKER_EXCLUDED_NAMESPACES": "kube-system,kube-public,kube-node-lease",
    }
    argv = [
        sys.executable,
        "-m",
        "gpustack_operator",
        "--log-format=json",
        "worker",
        f"--kubeconfig={sim_kubeconfig}",
        "--health-probe-bind-address=127.0.0.1:0",
        "--disable-applications=*",
    ]
    port: list[int] = []
    longest = [0]

    async def read_logs(stream: Any) -> None:
        buffered = b""
        async for chunk in stream:
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                longest[0] = max(longest[0], len(line))
                if b"serving health" in line:
                    port.append(int(json.loads(line)["port"]))

    async with nfd_master(sim), anyio.create_task_group() as tg:
        process = await anyio.open_process(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            tg.start_soon(read_logs, process.stderr)
            # A process starting on a busy machine: its first convergence gets a minute.
            await converged(sim, config, timeout=60)
            assert declaration.shown(sim), "the good declaration's queues"
            await eventually(lambda: port, "the health port")
            url = f"http://127.0.0.1:{port[0]}/healthz"
            for number, (what, fields, expected) in enumerate(declaration.bad, start=1):
                _edit(sim, declaration, fields)
                await _healthy_until(
                    url,
                    lambda n=number: len(_refusals(sim, declaration)) >= n,
                    f"the refusal of {what}",
                )
                messages = set(_refusals(sim, declaration))
                assert any(expected in m for m in messages), (what, messages)
                assert all("stays in force" in m and len(m) < 1000 for m in messages), what
                assert chain_diff(sim, config) == [], what  # nothing in force changed
            status = sim.store.get("v1", "ConfigMap", STATUS_CONFIGMAP, NS)
            kind, key = declaration.kind, declaration.key
            assert status is not None and status["data"][f"{kind}.inForce"] == declaration.in_force
            assert f"has no key {key}" in status["data"][f"{kind}.refused"]
            assert longest[0] < 64 * 1024  # no log line repeats a declaration
            # SIGTERM while the largest text is being read: stopped within the grace period.
            _edit(sim, declaration, declaration.bad[0][1])
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(GRACE):
                code = await process.wait()
            assert code == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            tg.cancel_scope.cancel()
            await process.aclose()


@pytest.mark.parametrize("declaration", KINDS)
async def test_a_worker_started_again_while_the_configmap_is_bad_keeps_the_chain(
    sim: SimServer, tmp_path: Path, declaration: Declaration
) -> None:
    _seed(sim, declaration)
    config = fast_config(policy=declaration.policy())  # plan's, with the good declaration
    worker = fast_config()  # the worker reads the ConfigMap alone (no --teams, no file)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kc", token=WORKER_TOKEN)
    async with nfd_master(sim):
        async with worker_running(kubeconfig, worker):
            await converged(sim, config, timeout=30)
            before = declaration.shown(sim)
            assert before
            (nul,) = [fields for what, fields, _ in declaration.bad if what == "NUL bytes"]
            _edit(sim, declaration, nul)
            await eventually(lambda: _refusals(sim, declaration), "the refusal")
            await eventually(
                lambda: "not valid YAML" in _status(sim).get(f"{declaration.kind}.refused", ""),
                "the refusal published",
            )
        async with worker_running(kubeconfig, worker) as running:
            await eventually(
                lambda: started_and_idle(
                    running.manager, "teams", "cohort", "clusterqueue", "localqueue"
                ),
                "the worker started again, idle",
                timeout=30,
            )
            assert declaration.shown(sim) == before
            assert chain_diff(sim, config) == []
            assert (
                len(_refusals(sim, declaration)) == 1
            )  # the verdict on the revision stands, said once


def _status(sim: SimServer) -> dict[str, str]:
    found = sim.store.get("v1", "ConfigMap", STATUS_CONFIGMAP, NS)
    return dict((found or {}).get("data") or {})
