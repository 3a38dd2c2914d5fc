"""``python -m tests.realcluster up``: a real control plane to explore (``make real-cluster-up``).

Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and Kueue (built by
``make real-cluster``) on loopback, with the node agents of the tier keeping the Nodes of
``--cluster FILE`` alive, prints the admin kubeconfig and runs until Ctrl-C, then stops every
process it started.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

import anyio

from gpustack_operator.environment import load_manufacturers
from tests.realcluster.cluster import load_nodes
from tests.realcluster.controlplane import (
    ControlPlane,
    RealClusterError,
    build_binaries,
    shared_dir,
)
from tests.realcluster.nodes import NodeAgents


async def _serve(plane: ControlPlane, cluster: Path | None) -> None:
    agents = NodeAgents(plane.server, plane.admin_tls(), load_manufacturers())
    try:
        if cluster is not None:
            await agents.register(load_nodes(cluster))
        async with anyio.create_task_group() as tg:
            tg.start_soon(agents.run)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    tg.cancel_scope.cancel()
                    break
    finally:
        await agents.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.realcluster")
    parser.add_argument("command", choices=["up"])
    parser.add_argument("--cluster", type=Path, help="register the Nodes of this file (examples/)")
    parser.add_argument("--workdir", type=Path, help="where certificates, data and logs go")
    args = parser.parse_args(argv)
    shared = shared_dir()
    if shared is None:
        sys.stderr.write("real cluster: needs ../shared (the real Kueue CRDs and webhooks)\n")
        return 2
    try:
        binaries = build_binaries()
    except RealClusterError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gpustack-realcluster-"))
    plane = ControlPlane(binaries, workdir, shared)
    try:
        plane.start(extra_crds=[shared / "crds" / "cluster-autoscaler-1.36.1"])
    except RealClusterError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    versions = ", ".join(f"{k} {v}" for k, v in binaries.versions.items())
    sys.stdout.write(
        f"real cluster up ({versions}); logs in {plane.logs}\n"
        f"export KUBECONFIG={plane.admin_kubeconfig}\nStop with Ctrl-C.\n"
    )
    sys.stdout.flush()
    try:
        anyio.run(_serve, plane, args.cluster)
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
