"""Flags and the API connection shared by the long-running in-cluster commands.

``worker`` and ``device-manager serve`` both connect to one cluster and serve probes and
metrics; they take the same flags for that and report a failed connection the same way, so an
operator who has learnt one command's flags knows the other's.
"""

from __future__ import annotations

import argparse

import structlog

from gpustack_operator.kubeconfig import KubeconfigError
from gpustack_operator.kubeconfig import connect as connect_checked
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.probes import parse_bind_address

log = structlog.get_logger(__name__)


def add_connection_flags(parser: argparse._ActionsContainer) -> None:
    """``--kubeconfig`` and ``--context``."""
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster "
        "service account)",
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")


def add_serving_flags(parser: argparse._ActionsContainer) -> None:
    """``--health-probe-bind-address`` and ``--metrics-bind-address``, as controller-runtime."""
    parser.add_argument(
        "--health-probe-bind-address",
        default=":8081",
        metavar="ADDR",
        help="where /healthz and /readyz are served; 0 disables (default: :8081)",
    )
    parser.add_argument(
        "--metrics-bind-address",
        default=":8080",
        metavar="ADDR",
        help="where /metrics is served; 0 disables (default: :8080)",
    )


def check_serving_flags(args: argparse.Namespace) -> None:
    """Parse both bind addresses up front, so a typo exits 2 before any connection is made.

    Raises ``ValueError`` naming the bad address.
    """
    parse_bind_address(args.health_probe_bind_address)
    parse_bind_address(args.metrics_bind_address)


async def connect(
    args: argparse.Namespace, *, qps: float | None = None, burst: int | None = None
) -> Client | None:
    """A client for ``--kubeconfig``/``--context``; ``None`` after logging why it failed.

    *qps* and *burst* limit the client's request rate (see :meth:`Client.connect`).
    """
    try:
        return await connect_checked(args.kubeconfig, args.context, qps=qps, burst=burst)
    except KubeconfigError as exc:  # one line naming the file and the fix
        log.error("cannot connect to the API server", error=str(exc))
    return None
