"""Declarations that never hurt (docs/teams.md, "Limits of a declaration"; docs/worker.md,
"Declarations in force"): whatever a person writes into the teams ConfigMap (a 1 MiB text, an
alias bomb, 10,000-deep nesting, NUL bytes, a selector of the wrong shape, a text only under
binaryData, the key missing), the worker process answers ``/healthz`` within a second while
it reads it, refuses it with a Warning Event, keeps the chain of the last good declaration,
and stops on SIGTERM within its grace period; a worker started again while the ConfigMap is
bad keeps the team queues."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gpustack_operator.domain.declarationstatus import STATUS_CONFIGMAP
from gpustack_operator.domain.policy import ChainPolicy
from gpustack_operator.domain.teams import TEAMS_CONFIGMAP, TEAMS_KEY, parse_teams
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


def _policy() -> ChainPolicy:
    policy = ChainPolicy(load_manufacturers())
    return replace(policy, teams=parse_teams(GOOD, policy.manufacturers))


def _seed(sim: SimServer) -> None:
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
            "metadata": {"name": TEAMS_CONFIGMAP, "namespace": NS},
            "data": {TEAMS_KEY: GOOD},
        }
    )


def _edit(sim: SimServer, fields: dict[str, Any]) -> None:
    stored = sim.store.get("v1", "ConfigMap", TEAMS_CONFIGMAP, NS)
    assert stored is not None
    stored.pop("data", None)
    stored.pop("binaryData", None)
    stored.update(fields)
    sim.store.update(stored)


def _refusals(sim: SimServer) -> list[str]:
    """The refusals' messages, one per refusal (repeats of one message are one Event with a
    count, as client-go aggregates them)."""
    return [
        str(e.get("message") or e.get("note") or "")
        for e in sim.store.list("v1", "Event", NS)
        if e.get("reason") == "TeamsDeclarationRefused"
        for _ in range(int(e.get("count") or 1))
    ]


def _team_queues(sim: SimServer) -> list[str]:
    return sorted(
        q["metadata"]["name"]
        for q in sim.store.list(KUEUE, "ClusterQueue")
        if q["metadata"]["name"].endswith(TEAM_QUEUE_SUFFIX)
    )


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


async def test_no_declaration_stalls_the_worker_or_changes_the_chain(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    _seed(sim)
    config = fast_config(policy=_policy())
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
            await converged(sim, config, timeout=30)
            assert _team_queues(sim), "the good declaration's team queue"
            await eventually(lambda: port, "the health port")
            url = f"http://127.0.0.1:{port[0]}/healthz"
            for number, (what, fields, expected) in enumerate(BAD, start=1):
                _edit(sim, fields)
                await _healthy_until(
                    url, lambda n=number: len(_refusals(sim)) >= n, f"the refusal of {what}"
                )
                messages = set(_refusals(sim))
                assert any(expected in m for m in messages), (what, messages)
                assert all("stays in force" in m and len(m) < 1000 for m in messages), what
                assert chain_diff(sim, config) == [], what  # nothing in force changed
            status = sim.store.get("v1", "ConfigMap", STATUS_CONFIGMAP, NS)
            assert status is not None and status["data"]["teams.inForce"] == "research"
            assert "has no key teams.yaml" in status["data"]["teams.refused"]
            assert longest[0] < 64 * 1024  # no log line repeats a declaration
            # SIGTERM while the largest text is being read: stopped within the grace period.
            _edit(sim, BAD[0][1])
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


async def test_a_worker_started_again_while_the_configmap_is_bad_keeps_the_teams(
    sim: SimServer, tmp_path: Path
) -> None:
    _seed(sim)
    config = fast_config(policy=_policy())  # what plan shows with the good declaration
    worker = fast_config()  # the worker has teams from the ConfigMap alone (no --teams)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kc", token=WORKER_TOKEN)
    async with nfd_master(sim):
        async with worker_running(kubeconfig, worker):
            await converged(sim, config, timeout=30)
            before = _team_queues(sim)
            assert before
            _edit(sim, BAD[4][1])  # NUL bytes
            await eventually(lambda: _refusals(sim), "the refusal")
            await eventually(
                lambda: "not valid YAML" in _status(sim).get("teams.refused", ""),
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
            assert _team_queues(sim) == before
            assert chain_diff(sim, config) == []
            assert len(_refusals(sim)) == 1  # the verdict on the revision stands, said once


def _status(sim: SimServer) -> dict[str, str]:
    found = sim.store.get("v1", "ConfigMap", STATUS_CONFIGMAP, NS)
    return dict((found or {}).get("data") or {})
