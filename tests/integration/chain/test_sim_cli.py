"""``gpustack-operator sim --cluster`` as people run it: its output and exit codes.

The converging and the non-converging runs are real subprocesses (``python -m
gpustack_operator``); input errors, found before anything starts, run in-process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpustack_operator.cli import main

from .support import EXAMPLE, REPO

BAD_DEVICES = """
apiVersion: v1
kind: Node
metadata:
  name: broken
  annotations:
    sim.gpustack.ai/devices: '[{"manufacturer": "nvidia", "memoryMiB": 1024}]'
status:
  capacity: {cpu: "4", memory: 8Gi, ephemeral-storage: 20Gi}
"""


def gpustack_operator(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpustack_operator", "--log-level", "warning", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def in_process(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["--log-level", "warning", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_sim_prints_the_same_tree_as_plan(capsys: pytest.CaptureFixture[str]) -> None:
    simulated = gpustack_operator("sim", "--cluster", str(EXAMPLE), "-o", "table")
    assert simulated.returncode == 0, simulated.stderr
    code, planned, _ = in_process(capsys, "plan", "--nodes", str(EXAMPLE), "-o", "table")
    assert code == 0
    assert simulated.stdout == planned
    assert "Kueue chain: 11 Cohorts, 11 ClusterQueues, 11 ResourceFlavors, 11 LocalQueues" in (
        simulated.stdout
    )
    assert "Cohort gpustack--intel-xeon-platinum-8358-ln-x64-4c-16g--nvidia-tesla-t4-1d" in (
        simulated.stdout
    )


def test_bad_input_exits_2_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(BAD_DEVICES)
    code, out, err = in_process(capsys, "sim", "--cluster", str(broken))
    assert (code, out) == (2, "")
    assert "node broken" in err and "name: Field required" in err

    code, _, err = in_process(capsys, "sim", "--cluster", str(tmp_path / "missing.yaml"))
    assert code == 2 and "missing.yaml: cannot read" in err

    code, _, err = in_process(capsys, "sim", "--cluster", str(broken), "--timeout", "0")
    assert code == 2 and "--timeout must be positive" in err

    code, _, err = in_process(capsys, "sim")
    assert code == 2 and "give --cluster FILE" in err


def test_a_cluster_that_does_not_converge_in_time_exits_1_with_the_reason() -> None:
    # No cluster converges in a millisecond: the worker has not even listed the Nodes.
    result = gpustack_operator("sim", "--cluster", str(EXAMPLE), "--timeout", "0.001")
    assert result.returncode == 1
    assert result.stdout == ""
    assert "did not converge within 0.001s" in result.stderr
    assert ": missing" in result.stderr
