"""The console examples of the README and docs/ that need no real cluster, run as written
(paths under /tmp and fixed ports swapped for private ones) and compared with what the pages
show: the demo's output, the ``sim --serve`` banner, kubectl against the simulator and the
worker-gateway walkthrough (docs/worker-gateway.md, "Trying it against simulated clusters")."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CONSOLE = re.compile(r"^```console\n(.*?)^```", re.MULTILINE | re.DOTALL)
PLAIN = re.compile(r"^```\n(.*?)^```", re.MULTILINE | re.DOTALL)


def section(page: str, heading: str) -> str:
    text = (REPO / page).read_text()
    start = text.index(heading)
    following = text.find("\n#", start + len(heading))
    return text[start : following if following != -1 else len(text)]


def commands(block: str) -> list[str]:
    """The ``$ `` commands of a console block; continuation lines and heredocs joined."""
    out: list[str] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.startswith("$ "):
            continue
        command = line[2:]
        while command.endswith("\\") and i < len(lines):
            command = command[:-1] + lines[i].strip()
            i += 1
        heredoc = re.search(r"<<'?(\w+)'?", command)
        if heredoc:
            body = []
            while i < len(lines) and lines[i] != heredoc.group(1):
                body.append(lines[i])
                i += 1
            i += 1
            command += "\n" + "\n".join(body) + "\n" + heredoc.group(1)
        out.append(command)
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


STARTUP_DEADLINE = 300
"""Seconds a poll may wait: a deadline, not a wait. Each documented command starts a Python
interpreter, and on two busy cores one took 45 s to print its ``--help``; a walkthrough
starts three at once. A background command that exits fails the poll at once."""


def poll(
    check: Callable[[], Any],
    what: str,
    timeout: float = STARTUP_DEADLINE,
    shell: Shell | None = None,
) -> Any:
    """Poll *check* until it returns something true; with *shell*, fail as soon as one of
    its background commands has exited."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if shell is not None:
            shell.check_running(what)
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


class Shell:
    """Runs documented commands with bash in the repository, the venv first on PATH."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(tmp),
        }
        self.background: list[subprocess.Popen[bytes]] = []
        self.outputs: list[Path] = []

    def run(self, command: str, timeout: float = 120) -> str:
        result = subprocess.run(
            ["bash", "-c", command],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        output = result.stdout.decode() + result.stderr.decode()
        assert result.returncode == 0, f"{command}\n{output}"
        return result.stdout.decode()

    def answers(self, command: str) -> bool:
        """Whether *command* exits 0 (a server it talks to is up)."""
        done = subprocess.run(
            ["bash", "-c", command], cwd=REPO, env=self.env, capture_output=True, check=False
        )
        return done.returncode == 0

    def start(self, command: str, output: Path) -> subprocess.Popen[bytes]:
        with output.open("wb") as sink:
            process = subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                cwd=REPO,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.background.append(process)
        self.outputs.append(output)
        return process

    def check_running(self, what: str) -> None:
        """Fail, with its output, if a background command has exited."""
        for process, output in zip(self.background, self.outputs, strict=True):
            if process.poll() is not None:
                raise AssertionError(
                    f"while waiting for {what}: {process.args[-1]} exited with "
                    f"{process.returncode}:\n{output.read_text(errors='replace')}"
                )

    def stop(self) -> None:
        for process in reversed(self.background):
            if process.poll() is None:
                process.terminate()
        for process in self.background:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    running = Shell(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def test_the_demo_output_in_the_readme_is_what_the_demo_prints(shell: Shell) -> None:
    shown = PLAIN.findall(section("README.md", "### The demo"))[0].splitlines()
    printed = shell.run(  # what `make demo` runs, its log lines included
        "gpustack-operator --log-level warning sim --cluster examples/cluster.yaml -o table "
        "--demo-jobs 2>&1"
    )
    # Every device of the example ends up pooled: no false alarm while the agents' labels
    # land (docs/devices.md, "Why a device gets no pool").
    assert "devices feed no pool" not in printed and "DeviceNotPooled" not in printed
    missing = [line for line in shown if line.rstrip() not in printed.splitlines()]
    assert not missing, printed
    assert "(one of its eleven Cohorts)" in section("README.md", "### The demo")
    assert sum(line.startswith("Cohort ") for line in printed.splitlines()) == 11
    # The jobs section after the chain (docs/simulator.md, "Demo jobs"): as the README shows
    # it, and each of the three outcomes.
    jobs = printed.split("\nJobs (3 submitted by --demo-jobs):\n", 1)[1]
    shown_jobs = PLAIN.findall(section("README.md", "### The demo"))[1].splitlines()
    assert [line for line in shown_jobs if line.rstrip() not in printed.splitlines()] == []
    fits, too_big, wrong_queue = _outcomes(jobs)
    assert fits.startswith("admitted to ClusterQueue gpustack--"), jobs
    assert ", flavor gpustack--" in fits and "pinned to nodeSelector " in fits, jobs
    assert "gpustack.ai/managed=true" in fits, jobs
    assert too_big.startswith("waiting: couldn't assign flavors"), jobs
    assert re.search(r"insufficient quota for \S+ in flavor gpustack--", too_big), jobs
    assert re.fullmatch(
        r"waiting: couldn't assign flavors to pod set main: "
        r"resource \S+ unavailable in ClusterQueue",
        wrong_queue,
    ), jobs


def test_the_tas_demo_in_the_readme_is_what_the_demo_prints(shell: Shell) -> None:
    """`make demo`'s second cluster (docs/topology.md): the two TAS Jobs as the README
    shows them, one admitted into one sub-block, one waiting with Kueue's TAS message."""
    printed = shell.run(  # what `make demo` runs second
        "gpustack-operator --log-level warning sim --cluster examples/topology-gke-a3-ultra.yaml "
        "-o table --demo-jobs"
    )
    shown = PLAIN.findall(section("README.md", "### The demo"))[2].splitlines()
    assert [line for line in shown if line.rstrip() not in printed.splitlines()] == [], printed
    lines = printed.splitlines()
    placed = lines[lines.index(shown[0].rstrip()) + 1]
    assert placed.strip().startswith("admitted to ClusterQueue gpustack--"), printed
    assert re.search(r"TAS placed it on gke-a3u-\d \(1 pod\), gke-a3u-\d \(1 pod\)$", placed)


def _outcomes(jobs: str) -> tuple[str, str, str]:
    """The outcome line under each of demo-fits, demo-too-big and demo-wrong-queue."""
    lines = jobs.splitlines()
    found = {
        name: lines[i + 1].strip()
        for i, line in enumerate(lines)
        for name in ("demo-fits", "demo-too-big", "demo-wrong-queue")
        if line.strip().startswith(name + " ")
    }
    return found["demo-fits"], found["demo-too-big"], found["demo-wrong-queue"]


def _banner_shape(text: str) -> list[str]:
    """Lines with the server's port and the kubeconfig path made generic."""
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)
    return [re.sub(r"/\S*kubeconfig\S*", "KUBECONFIG", line) for line in text.splitlines()]


def test_sim_serve_banner_and_kubectl_examples_as_documented(shell: Shell) -> None:
    documented = CONSOLE.findall(section("docs/simulator.md", "## Using it with kubectl"))[0]
    (command, *shown) = documented.splitlines()
    kubeconfig = shell.tmp / "sim.kubeconfig"
    log = shell.tmp / "sim.out"
    quiet = command[2:].replace("gpustack-operator ", "gpustack-operator --log-level warning ", 1)
    sim = shell.start(f"{quiet} --kubeconfig-out {kubeconfig}", log)
    poll(lambda: "Stop with Ctrl-C" in log.read_text() or sim.poll() is not None, "the sim banner")
    assert _banner_shape(log.read_text()) == _banner_shape("\n".join(shown))

    readme = CONSOLE.findall(section("README.md", "### Look around with kubectl"))[0]
    for documented_command in commands(readme)[1:]:
        line = documented_command.split("#")[0].strip()
        line = line.replace("/tmp/sim.kubeconfig", str(kubeconfig))
        if line.startswith("export "):
            name, value = line.removeprefix("export ").split("=", 1)
            shell.env[name] = value
            continue
        out = shell.run(line)
        if line.startswith("kubectl get nodes"):
            assert out.splitlines()[0].split()[:2] == ["NAME", "STATUS"]
            assert len(out.splitlines()) == 10  # the header and examples/cluster.yaml's 9
        if line.startswith("kubectl explain"):
            assert "FIELD: spec <Object>" in out

    # The README's plan block, against the same cluster: its Nodes through kubectl, then read
    # live through ~/.kube/config.
    (shell.tmp / ".kube").mkdir(exist_ok=True)
    (shell.tmp / ".kube" / "config").write_bytes(kubeconfig.read_bytes())
    demo = PLAIN.findall(section("README.md", "### The demo"))[0].splitlines()
    plan_block = CONSOLE.findall(section("README.md", "### Preview the chain"))[0]
    for documented_command in commands(plan_block):
        line = documented_command.split("#")[0].strip()
        out = shell.run(f"cd {shell.tmp} && {line}" if "nodes.yaml" in line else line)
        if "-o table" in line:
            assert [d for d in demo if d.rstrip() not in out.splitlines()] == [], out
        if line.startswith("gpustack-operator plan --kubeconfig"):
            assert "kind: ClusterQueue" in out


def test_detect_on_a_machine_without_accelerators_exits_zero(shell: Shell) -> None:
    (command,) = commands(CONSOLE.findall(section("README.md", "### Detect this machine"))[0])
    assert shell.run(command).strip()


def _curl_json(shell: Shell, command: str) -> Any:
    return json.loads(shell.run(command))


@pytest.mark.timeout(3 * STARTUP_DEADLINE)  # its polls' deadlines exceed the default bound
def test_the_gateway_walkthrough_runs_as_written(shell: Shell) -> None:
    """docs/worker-gateway.md's three console blocks, in order, checking what the page says
    each step shows."""
    page = section("docs/worker-gateway.md", "## Trying it against simulated clusters")
    start, explore, register = (commands(b) for b in CONSOLE.findall(page))
    port = free_port()
    tmp = str(shell.tmp)

    def local(command: str) -> str:
        command = command.replace("/tmp/", f"{tmp}/").replace("127.0.0.1:8090", f"127.0.0.1:{port}")
        if command.startswith("gpustack-operator worker-gateway"):
            command = command.replace(
                "gpustack-operator worker-gateway",
                f"gpustack-operator worker-gateway --port {port}",
                1,
            )
        return command

    for number, command in enumerate(start):
        command = local(command)
        if command.endswith("&"):
            shell.start(command.removesuffix("&").strip(), shell.tmp / f"start-{number}.out")
        elif re.fullmatch(r"(\w+=\S+;?\s*)+|G=\S+; AUTH=.*", command):
            for name, value in re.findall(r'(\w+)=("[^"]*"|\S+?)(?:;|$)', command):
                shell.env[name] = value.strip('"')
        else:
            shell.run(command)
    assert shell.env["AUTH"] == "Authorization: Bearer s3cret"

    unauthorised, listed, pools, localqueues, watch, apply = (local(c) for c in explore)
    assert "401" in unauthorised
    poll(lambda: shell.answers(unauthorised.split("#")[0]), "the gateway to listen", shell=shell)
    assert '"code": 401' in shell.run(unauthorised.split("#")[0]).replace(
        '"code":401', '"code": 401'
    )

    def both_ready() -> Any:
        found = _curl_json(shell, listed.split("#")[0])
        clusters = {c["name"]: c for c in found["items"]}
        ready = all(c["status"] == "Ready" for c in clusters.values()) and len(clusters) == 2
        counts = clusters.get("east", {}).get("counts", {})
        return clusters if ready and counts and set(counts.values()) == {11} else None

    assert "both Ready; east counts 11 of each kind" in listed
    poll(both_ready, "both clusters Ready with east's 11 objects of each kind", shell=shell)
    assert all(p["cluster"] == "east" for p in _curl_json(shell, pools)["items"])
    assert _curl_json(shell, localqueues)["items"]

    events = shell.tmp / "watch.ndjson"
    shell.start(watch.split("#")[0], events)
    shell.run(apply)

    def watched(kind: str) -> list[dict[str, Any]]:
        return [
            e
            for e in map(json.loads, filter(None, events.read_text().splitlines()))
            if e.get("type") == kind and e.get("cluster") == "west"
        ]

    added = poll(lambda: watched("ADDED"), "the ADDED event of the west pool", shell=shell)
    assert added[0]["object"]["unit"] == {"cpu": "1", "memory": "2Gi"}

    register_again, delete_west = (local(c) for c in register)
    assert '"name": "east-again"' in shell.run(register_again).replace(
        '"name":"east-again"', '"name": "east-again"'
    )
    shell.run(delete_west)
    deleted = poll(lambda: watched("DELETED"), "the DELETED event of the west pool", shell=shell)
    assert len(deleted) == 1
    assert "kill %3 %2 %1" in page


def _rows(text: str) -> list[list[str]]:
    """A table's lines as cells (column widths aside)."""
    return [line.split() for line in text.splitlines() if line.strip()]


def _console_steps(block: str) -> list[tuple[str, list[str]]]:
    """(command, the output lines shown under it) for each ``$ `` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and line.strip():
            steps[-1][1].append(line)
    return steps


@pytest.mark.timeout(3 * STARTUP_DEADLINE)  # its polls' deadlines exceed the default bound
def test_the_workloads_job_runs_to_completion_as_documented(shell: Shell) -> None:
    """docs/workloads.md end to end on ``sim --serve --cluster``: the pools ``queues`` lists
    (and the README's rows of them), then the page's Job, applied with kubectl, Running on a
    T4 node with its card counted, then complete (docs/simulator.md, "Job runner stand-in")."""
    kubeconfig = shell.tmp / "sim.kubeconfig"
    log = shell.tmp / "sim.out"
    sim = shell.start(
        "gpustack-operator --log-level warning sim --serve --cluster examples/cluster.yaml "
        f"--namespaces default,team-a --kubeconfig-out {kubeconfig} --job-run-time 45s",
        log,
    )
    poll(lambda: "Stop with Ctrl-C" in log.read_text() or sim.poll() is not None, "the sim")
    assert sim.poll() is None, log.read_text()
    shell.env["KUBECONFIG"] = str(kubeconfig)

    finding = CONSOLE.findall(section("docs/workloads.md", "## Finding a pool"))[0]
    ((command, shown),) = _console_steps(finding)
    assert _rows(shell.run(command)) == _rows("\n".join(shown))

    page = section("docs/workloads.md", "## A complete Job")
    job = re.search(r"^```yaml\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    assert job is not None
    (shell.tmp / "t4-smoke.yaml").write_text(job.group(1))
    steps = _console_steps(CONSOLE.findall(page)[0])
    assert len(steps) == 5, steps
    for command, shown in steps:
        out = shell.run(f"cd {shell.tmp} && {command}")
        if command.startswith("gpustack-operator queues"):
            assert _rows(out) == _rows("\n".join(shown)), out
            # The README's rows are those of the same cluster while the Job runs (it runs 45 s,
            # long enough for two listings on a loaded machine, where each took over 10 s;
            # the step's rows show it is running).
            readme = CONSOLE.findall(section("README.md", "## What it does"))[0]
            (_, readme_rows), *_ = _console_steps(readme)
            every = _rows(shell.run("gpustack-operator queues -n team-a"))
            assert [r for r in _rows("\n".join(shown)) if r not in every] == [], every
            assert [r for r in _rows("\n".join(readme_rows)) if r not in every] == []
        elif shown:
            assert _rows(out) == _rows("\n".join(shown)), out
    node = shell.run(
        "kubectl -n team-a get pods -l batch.kubernetes.io/job-name=t4-smoke "
        "-o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase}{end}'"
    )
    # named as the Job controller names a NonIndexed Job's Pod: <job>-<5 random characters>
    assert re.fullmatch(r"t4-smoke-[a-z0-9]{5} gpu-t4-[12] Succeeded", node), node
    rows = _rows(shell.run("gpustack-operator queues -n team-a"))
    (t4,) = [r for r in rows if r[0] == "gpustack-fnv64-6e2ada8e7ab9ade3"]
    assert t4[-2:] == ["0", "0"]  # the finished Workload no longer holds its card
