"""The simulated plane: the tier's scenarios on ``gpustack-operator sim --serve``.

The same test bodies run on the real control plane (``controlplane.py``) and here, on the
simulated API server with its Kueue, scheduler, Job runner and NFD-master stand-ins, started
as people start it (``sim --serve``, a process of its own, with the real Kueue, NFD and
ProvisioningRequest CRDs). It needs no Go, so ``make test`` runs these everywhere. The operator
runs on it as on the real plane: the worker and the device managers as processes with tokens
of their deploy/ ServiceAccounts (the simulator has TokenRequest, RBAC and admission
policies). ``nodes.py`` registers the Nodes and keeps their heartbeats; the simulator's own
stand-ins bind and run Pods and merge NodeFeature labels.

Where the simulator answers otherwise than the real cluster, a scenario says so once through
:meth:`SimPlane.differs`, naming a row of docs/simulator.md's table "Where the simulator
differs from a real cluster"; a row that is not in the table fails the scenario.
"""

from __future__ import annotations

import base64
import re
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import httpx
import yaml

from tests.realcluster.controlplane import (
    REPO,
    LoopbackPlane,
    Process,
    RealClusterError,
    wait_until,
)
from tests.realcluster.pki import Pair

SIMULATOR_DOC = REPO / "docs" / "simulator.md"
DIFFERENCES_HEADING = "## Where the simulator differs from a real cluster"
JOB_RUN_SECONDS = 3
"""How long a Job's Pod runs unless its template says otherwise: the node agents' default on
the real plane."""


@cache
def difference_rows() -> frozenset[str]:
    """The first cell of each row of docs/simulator.md's differences table."""
    page = SIMULATOR_DOC.read_text()
    section = page.split(DIFFERENCES_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and cells and not re.fullmatch(r"-+|Difference", cells[0]):
            rows.add(cells[0])
    return frozenset(rows)


class SimPlane(LoopbackPlane):
    """``gpustack-operator sim --serve`` on a loopback port, with the real CRDs."""

    kind = "sim"

    def __init__(self, workdir: Path, shared: Path) -> None:
        self.workdir = workdir
        self.shared = shared
        self.logs = workdir / "logs"
        self.processes: dict[str, Process] = {}
        self.all_ports: set[int] = set()
        self.kubectl = Path(sys.executable).parent / "kubectl"
        self.admin_kubeconfig = workdir / "admin.kubeconfig"
        self.port = self._port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.ca_file = workdir / "pki" / "ca.crt"
        self.admin = Pair(workdir / "pki" / "admin.crt", workdir / "pki" / "admin.key")

    def start(self, *, extra_crds: Sequence[Path] = ()) -> None:
        """The simulator with Kueue's, NFD's and *extra_crds*' CRDs, until it answers."""
        crds = self.shared / "crds"
        folders = [crds / "kueue-v0.19.2", crds / "nfd-v0.19.0", *extra_crds]
        argv = [
            sys.executable,
            "-m",
            "gpustack_operator",
            "--log-format=json",
            "sim",
            "--serve",
            f"--port={self.port}",
            f"--kubeconfig-out={self.admin_kubeconfig}",
            f"--job-run-time={JOB_RUN_SECONDS}s",
        ]
        for folder in folders:
            argv.append(f"--crds={folder}")
        process = Process("sim", argv, self.logs / "sim.log", (self.port,), {})
        self.processes["sim"] = process
        try:
            process.start()
            wait_until(
                self.admin_kubeconfig.exists, timeout=120, what="its kubeconfig", process=process
            )
            self._read_kubeconfig()
            wait_until(self._ready, timeout=60, what="ready (/readyz)", process=process)
        except BaseException:
            self.stop()
            raise

    def _read_kubeconfig(self) -> None:
        config = yaml.safe_load(self.admin_kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        if cluster["server"] != self.server:
            raise RealClusterError(f"sim serves {cluster['server']}, not {self.server}")
        self.ca_file.parent.mkdir(parents=True, exist_ok=True)
        self.ca_file.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        self.admin.cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        self.admin.key.write_bytes(base64.b64decode(user["client-key-data"]))

    def _ready(self) -> bool:
        response = httpx.get(f"{self.server}/readyz", verify=self.admin_tls(), timeout=5)
        return response.status_code == 200

    def differs(self, row: str) -> bool:
        assert row in difference_rows(), (
            f"the scenario names a difference docs/simulator.md does not list: {row!r}"
        )
        return True
