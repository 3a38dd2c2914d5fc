"""``gpustack-operator worker``: the operator's controllers against a cluster.

Runs the capacity profiler (NodeFeatures) and the Kueue chain reconcilers (ResourceFlavors,
Cohorts, ClusterQueues, LocalQueues) under leader election, with ``/healthz`` + ``/readyz``
and ``/metrics``. Kueue must be installed; while its CRDs are missing the worker says so,
stays not ready and keeps checking. Every flag also comes from ``GPUSTACK_WORKER_<FLAG>``
(SPEC §0.11); a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import structlog

from controllers.bootstrap import BootstrapConfig
from controllers.worker import KUEUE_AUTO, WorkerConfig, new_worker_manager, setup_worker
from gpustack_operator.commands.bootstrap_flags import (
    add_bootstrap_flags,
    bootstrap_config,
    start_bootstrap,
)
from gpustack_operator.domain.kueue import KueueVersion
from gpustack_operator.domain.manufacturers import KNOWN_MANUFACTURERS, load_manufacturers
from gpustack_operator.domain.nodefeature import DEFAULT_SYSTEM_NAMESPACE
from gpustack_operator.domain.queues import DEFAULT_EXCLUDED_NAMESPACES
from gpustack_operator.runtime.client import ApiError, Client
from gpustack_operator.runtime.leaderelection import LeaderElectionConfig
from gpustack_operator.runtime.manager import ManagerOptions, run_async
from gpustack_operator.runtime.probes import parse_bind_address

log = structlog.get_logger(__name__)

COMMAND = "worker"
DEFAULT_LEADER_ELECTION_ID = "worker.gpustack.ai"


_UNITS = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0))


def _seconds(raw: str) -> float:
    """``15``, ``15s``, ``500ms``, ``2m``, ``1h`` -> seconds (> 0)."""
    text = raw.strip()
    scale = 1.0
    for suffix, factor in _UNITS:
        if text.endswith(suffix):
            text, scale = text.removesuffix(suffix), factor
            break
    try:
        value = float(text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration like 15s, got {raw!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive, finite duration, got {raw!r}")
    return value


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {raw!r}")
    return value


def _names(raw: str) -> list[str]:
    return [n.strip() for n in raw.split(",") if n.strip()]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        COMMAND,
        help="run the controllers: node capacity profiles and the Kueue queue chain",
        description="Profiles node capacity into NFD NodeFeatures and keeps Kueue "
        "ResourceFlavors, Cohorts, ClusterQueues and LocalQueues in step with the nodes. "
        "Needs Kueue (kueue.x-k8s.io v1beta2 or v1beta1) and NFD installed.",
    )
    add = parser.add_argument
    add(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig file (default: KUBECONFIG, "
        "~/.kube/config, then the in-cluster service account)",
    )
    add("--context", metavar="NAME", help="kubeconfig context to use")
    default_ns = os.environ.get("KUBERNETES_POD_NAMESPACE") or DEFAULT_SYSTEM_NAMESPACE
    add(
        "--namespace",
        default=default_ns,
        metavar="NAMESPACE",
        help="the system namespace: NodeFeatures go there and it gets no LocalQueues "
        f"(default: $KUBERNETES_POD_NAMESPACE, else {DEFAULT_SYSTEM_NAMESPACE})",
    )
    add(
        "--health-probe-bind-address",
        default=":8081",
        metavar="ADDR",
        help="where /healthz and /readyz are served; 0 disables (default: :8081)",
    )
    add(
        "--metrics-bind-address",
        default=":8080",
        metavar="ADDR",
        help="where /metrics is served; 0 disables (default: :8080)",
    )
    add(
        "--leader-elect",
        dest="leader_elect",
        action="store_true",
        default=True,
        help="elect a leader so only one replica writes (default)",
    )
    add(
        "--no-leader-elect",
        dest="leader_elect",
        action="store_false",
        help="run the controllers without leader election (one replica only)",
    )
    add(
        "--leader-election-id",
        default=DEFAULT_LEADER_ELECTION_ID,
        metavar="NAME",
        help=f"name of the Lease (default: {DEFAULT_LEADER_ELECTION_ID})",
    )
    add(
        "--leader-election-namespace",
        metavar="NAMESPACE",
        help="namespace of the Lease (default: --namespace)",
    )
    add(
        "--leader-election-lease-duration",
        type=_seconds,
        default=15.0,
        metavar="DURATION",
        help="how long a Lease is valid without renewal (default: 15s)",
    )
    add(
        "--leader-election-renew-deadline",
        type=_seconds,
        default=10.0,
        metavar="DURATION",
        help="how long the leader keeps trying to renew before giving up (default: 10s)",
    )
    add(
        "--leader-election-retry-period",
        type=_seconds,
        default=2.0,
        metavar="DURATION",
        help="time between Lease attempts (default: 2s)",
    )
    add(
        "--manufacturer",
        action="append",
        metavar="NAME",
        help=f"accelerator manufacturer to profile (repeatable; default: all of "
        f"{', '.join(KNOWN_MANUFACTURERS)})",
    )
    add(
        "--excluded-namespaces",
        type=_names,
        default=list(DEFAULT_EXCLUDED_NAMESPACES),
        metavar="A,B",
        help="namespaces that get no LocalQueues; the system namespace never "
        f"does (default: {','.join(DEFAULT_EXCLUDED_NAMESPACES)})",
    )
    add(
        "--kube-api-qps",
        type=float,
        default=50.0,
        metavar="QPS",
        help="client-side limit on API requests per second (default: 50)",
    )
    add(
        "--kube-api-burst",
        type=_positive_int,
        default=100,
        metavar="N",
        help="burst allowed over --kube-api-qps (default: 100)",
    )
    add(
        "--max-concurrent-reconciles",
        type=_positive_int,
        default=2,
        metavar="N",
        help="reconcile workers per controller (default: 2)",
    )
    add(
        "--kueue-version",
        choices=(KUEUE_AUTO, *(v.value for v in KueueVersion)),
        default=KUEUE_AUTO,
        help="Kueue API version to write; auto: the newest served "
        "(v1beta2, else v1beta1) (default: auto)",
    )
    add(
        "--kueue-discovery-interval",
        type=_seconds,
        default=10.0,
        metavar="DURATION",
        help="time between checks for Kueue while it is missing (default: 10s)",
    )
    add(
        "--cache-sync-timeout",
        type=_seconds,
        default=120.0,
        metavar="DURATION",
        help="how long start-up waits for the caches to fill (default: 120s)",
    )
    add(
        "--graceful-shutdown-timeout",
        type=_seconds,
        default=30.0,
        metavar="DURATION",
        help="how long in-flight reconciles may finish at shutdown (default: 30s)",
    )
    add_bootstrap_flags(parser)
    parser.set_defaults(handler=run_worker)


def build_config(args: argparse.Namespace) -> WorkerConfig:
    """The worker configuration the flags describe; ``ValueError`` for bad values."""
    manufacturers = load_manufacturers()
    chosen = args.manufacturer or list(manufacturers)
    unknown = sorted(set(chosen) - set(manufacturers))
    if unknown:
        raise ValueError(
            f"unknown manufacturer(s) {', '.join(unknown)}: use {', '.join(KNOWN_MANUFACTURERS)}"
        )
    excluded = tuple(dict.fromkeys(n for n in args.excluded_namespaces if n != args.namespace))
    return WorkerConfig(
        system_namespace=args.namespace,
        manufacturers={name: manufacturers[name] for name in sorted(set(chosen))},
        excluded_namespaces=excluded,
        kueue_version=args.kueue_version,
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        kueue_discovery_interval=args.kueue_discovery_interval,
    )


def build_options(args: argparse.Namespace) -> ManagerOptions:
    election = None
    if args.leader_elect:
        election = LeaderElectionConfig(
            lease_name=args.leader_election_id,
            lease_namespace=args.leader_election_namespace or args.namespace,
            lease_duration=args.leader_election_lease_duration,
            renew_deadline=args.leader_election_renew_deadline,
            retry_period=args.leader_election_retry_period,
        )
    return ManagerOptions(
        component="gpustack-operator-worker",
        health_probe_bind_address=args.health_probe_bind_address,
        metrics_bind_address=args.metrics_bind_address,
        leader_election=election,
        cache_sync_timeout=args.cache_sync_timeout,
        graceful_shutdown_timeout=args.graceful_shutdown_timeout,
    )


def run_worker(args: argparse.Namespace) -> int:
    try:
        if args.kube_api_burst < args.kube_api_qps:
            raise ValueError("--kube-api-burst must be at least --kube-api-qps")
        parse_bind_address(args.health_probe_bind_address)
        parse_bind_address(args.metrics_bind_address)
        config = build_config(args)
        options = build_options(args)
        bootstrap = bootstrap_config(args)
    except ValueError as exc:
        sys.stderr.write(f"worker: {exc}\n")
        return 2
    return run_async(lambda: serve(args, config, options, bootstrap))


async def serve(
    args: argparse.Namespace,
    config: WorkerConfig,
    options: ManagerOptions,
    bootstrap: BootstrapConfig | None = None,
) -> int:
    """Connect, register the reconcilers, run until SIGTERM/SIGINT."""
    try:
        client = await Client.connect(
            args.kubeconfig, args.context, qps=args.kube_api_qps, burst=args.kube_api_burst
        )
    except (ApiError, ValueError) as exc:
        log.error("cannot connect to the API server", error=str(exc))
        return 1
    except Exception as exc:  # kubeconfig problems surface as assorted kr8s/OS errors
        log.error(
            "cannot load the cluster credentials",
            error=repr(exc),
            hint="check --kubeconfig/--context, KUBECONFIG, or the in-cluster service account",
        )
        return 1
    try:
        manager = new_worker_manager(client, options)
        setup_worker(manager, config)
        if bootstrap is not None:  # Stage 1 (SPEC §3): NFD and the device managers
            await start_bootstrap(client, manager, bootstrap)
        log.info(
            "worker starting",
            system_namespace=config.system_namespace,
            manufacturers=list(config.manufacturers),
            kueue_version=config.kueue_version,
            leader_election=options.leader_election is not None,
        )
        return await manager.run_until_signal()
    finally:
        await client.close()
