"""No process or port of the tier is left behind: after a plane stops, and after a test run
that is killed before its teardown (docs/realcluster.md, "No process left behind")."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.realcluster.controlplane import (
    REPO,
    Binaries,
    ControlPlane,
    LoopbackPlane,
    Process,
    RealClusterError,
    port_in_use,
    shared_dir,
    wait_until,
)
from tests.realcluster.multicluster import running_planes
from tests.realcluster.reaper import left_behind

pytestmark = [pytest.mark.realcluster, pytest.mark.timeout(300)]


def _alive(pid: int) -> bool:
    """Whether *pid* runs (a zombie, ended but not yet reaped, counts as gone)."""
    try:
        state = Path("/proc", str(pid), "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _end(pid: int) -> None:
    """End a process this test started (through its driver) if it is still there."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


DRIVER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tests.realcluster.controlplane import shared_dir
    from tests.realcluster.simplane import SimPlane

    workdir = Path(sys.argv[1])
    plane = SimPlane(workdir, shared_dir())
    plane.start()
    sim = plane.processes["sim"]
    (workdir / "started").write_text(f"{sim.popen.pid} {plane.port}")
    sys.stdin.read()  # until this driver is killed: a test run that never tears down
    """
)


@pytest.mark.skipif(shared_dir() is None, reason="needs ../shared (the real Kueue CRDs)")
def test_a_killed_test_run_leaves_no_sim_serve_behind(tmp_path: Path) -> None:
    """A test process killed with its ``sim --serve`` plane up (no teardown runs) leaves no
    ``sim --serve`` process and no listening port: the reaper ends the plane's processes."""
    started = tmp_path / "started"
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "driver.log").open("wb"),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    sim_pid = 0
    try:
        wait_until(
            lambda: started.is_file() and driver.poll() is None,
            timeout=240,
            what=f"the driver's sim --serve up (log: {tmp_path / 'driver.log'})",
        )
        sim_pid, port = (int(v) for v in started.read_text().split())
        assert _alive(sim_pid) and port_in_use(port)
        driver.kill()  # SIGKILL: no finally, no fixture teardown, no atexit
        driver.wait(30)
        wait_until(
            lambda: not _alive(sim_pid) and not port_in_use(port),
            timeout=60,
            what=f"sim --serve (pid {sim_pid}) ended and port {port} released after its "
            "test process was killed",
        )
        assert left_behind(tmp_path / "logs") == []
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)
        if sim_pid:
            _end(sim_pid)


LEAKY = textwrap.dedent(
    """
    import signal, subprocess, sys
    # A child in a session of its own: the plane's stop, which ends this process's group,
    # does not reach it.
    child = subprocess.Popen(
        [sys.executable, "-c", "import signal; signal.pause()"], start_new_session=True
    )
    open(sys.argv[1], "w").write(str(child.pid))
    signal.pause()
    """
)


def test_the_check_finds_a_process_a_stopped_plane_left(tmp_path: Path) -> None:
    """The plane's "no process left" check is not only about the processes it started: a
    child that escaped their process group is found by its log's path and fails the stop."""
    plane = LoopbackPlane()
    plane.workdir = tmp_path
    plane.logs = tmp_path / "logs"
    plane.all_ports = set()
    child_file = tmp_path / "child"
    process = Process(
        "leaky", [sys.executable, "-c", LEAKY, str(child_file)], plane.logs / "leaky.log", ()
    )
    plane.processes = {"leaky": process}
    process.start()
    child = 0
    try:
        wait_until(child_file.is_file, timeout=60, what="the leaky process's child started")
        wait_until(lambda: child_file.read_text() != "", timeout=10, what="its pid written")
        child = int(child_file.read_text())
        with pytest.raises(RealClusterError, match="still run after stop") as raised:
            plane.stop()
        assert f"{child} " in str(raised.value)
        assert process.exited() is not None
    finally:
        process.stop()
        if child:
            _end(child)
    wait_until(lambda: not _alive(child), timeout=30, what="the escaped child ended")
    assert left_behind(plane.logs) == []


def test_a_plane_that_fails_to_start_reports_why_even_when_its_stop_fails_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start that fails stops the plane; when that stop fails as well (a port another
    process took meanwhile), the start's own failure is still the one raised, and the
    MultiKueue planes' message names both."""
    shared = shared_dir() or tmp_path
    binaries = Binaries(tmp_path / "bin", {})

    def etcd_fails(self: ControlPlane) -> None:
        raise RealClusterError("etcd did not become ready")

    def stop_fails(self: LoopbackPlane) -> None:
        raise RealClusterError("timed out waiting for every port released")

    monkeypatch.setattr(ControlPlane, "_start_etcd", etcd_fails)
    monkeypatch.setattr(ControlPlane, "stop", stop_fails)
    plane = ControlPlane(binaries, tmp_path / "one", shared)
    with pytest.raises(RealClusterError, match="etcd did not become ready") as raised:
        plane.start()
    assert raised.value.__notes__ == [
        "stopping the plane after this failed too: timed out waiting for every port released"
    ]

    with (
        pytest.raises(RuntimeError) as together,
        running_planes(binaries, tmp_path / "planes", shared, {"west": {}}),
    ):
        pass
    assert str(together.value) == (
        "a control plane did not start: west: etcd did not become ready (stopping the plane "
        "after this failed too: timed out waiting for every port released)"
    )
    assert together.value.__notes__ == [
        "stopping the control planes: west: timed out waiting for every port released"
    ]
