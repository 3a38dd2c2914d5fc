"""``gpustack-operator worker``: the operator's controllers against a cluster.

Runs the capacity profiler (NodeFeatures) and the Kueue chain reconcilers (ResourceFlavors,
Cohorts, ClusterQueues, LocalQueues) under leader election, with ``/healthz`` + ``/readyz``
and ``/metrics``. Kueue must be installed; while its CRDs are missing the worker says so,
stays not ready and keeps checking. Every flag also comes from ``GPUSTACK_WORKER_<FLAG>``
(docs/configuration.md); a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import sys

import structlog

from gpustack_operator.commands.argtypes import duration, positive_int, positive_number
from gpustack_operator.commands.bootstrap_flags import (
    add_bootstrap_flags,
    bootstrap_config,
    start_bootstrap,
)
from gpustack_operator.commands.cluster_flags import (
    add_connection_flags,
    add_serving_flags,
    check_serving_flags,
    connect,
)
from gpustack_operator.commands.helptext import env_epilog
from gpustack_operator.commands.policy_flags import add_policy_flags, policy_from_args
from gpustack_operator.controllers.bootstrap import BootstrapConfig
from gpustack_operator.domain.chain.kueueconfig import (
    DEFAULT_KUEUE_CONFIGMAP,
    DEFAULT_KUEUE_NAMESPACE,
)
from gpustack_operator.runtime.leaderelection import LeaderElectionConfig
from gpustack_operator.runtime.manager import ManagerOptions, run_async
from gpustack_operator.wiring import (
    WorkerConfig,
    WorkerTiming,
    detect_tenancy_at_start,
    detect_topology_at_start,
    new_worker_manager,
    serves_dra,
    setup_worker,
)

log = structlog.get_logger(__name__)

COMMAND = "worker"
DEFAULT_LEADER_ELECTION_ID = "worker.gpustack.ai"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``worker``; its flags are grouped as ``--help`` shows them."""
    parser = subparsers.add_parser(
        COMMAND,
        help="run the controllers: node capacity profiles and the Kueue queue chain",
        description="Profiles node capacity into NFD NodeFeatures and keeps Kueue "
        "ResourceFlavors, Cohorts, ClusterQueues and LocalQueues in step with the nodes. "
        "Needs Kueue (kueue.x-k8s.io v1beta2 or v1beta1) and NFD installed.",
        epilog=env_epilog([COMMAND], "--kube-api-qps", "20"),
    )
    _add_cluster_flags(parser.add_argument_group("cluster"))
    _add_policy_flags(parser.add_argument_group("the chain (docs/configuration.md)"))
    add_serving_flags(parser.add_argument_group("probes and metrics"))
    _add_leader_election_flags(parser.add_argument_group("leader election"))
    _add_controller_flags(parser.add_argument_group("controllers"))
    _add_workload_flags(parser.add_argument_group("what workloads meet (docs/workloads.md)"))
    add_bootstrap_flags(parser.add_argument_group("installation of NFD and the device managers"))
    parser.set_defaults(handler=run_worker)


def _add_policy_flags(group: argparse._ArgumentGroup) -> None:
    add_policy_flags(group)
    group.add_argument(
        "--namespace",
        dest="system_namespace",
        default=argparse.SUPPRESS,
        metavar="NAMESPACE",
        help="the same as --system-namespace (the worker's earlier spelling)",
    )


def _add_cluster_flags(group: argparse._ArgumentGroup) -> None:
    add_connection_flags(group)
    group.add_argument(
        "--kube-api-qps",
        type=positive_number,
        default=50.0,
        metavar="QPS",
        help="client-side limit on API requests per second (default: 50)",
    )
    group.add_argument(
        "--kube-api-burst",
        type=positive_int,
        default=100,
        metavar="N",
        help="burst allowed over --kube-api-qps (default: 100)",
    )


def _add_leader_election_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--leader-elect",
        dest="leader_elect",
        action="store_true",
        default=True,
        help="elect a leader so only one replica writes (default)",
    )
    group.add_argument(
        "--no-leader-elect",
        dest="leader_elect",
        action="store_false",
        help="run the controllers without leader election (one replica only)",
    )
    group.add_argument(
        "--leader-election-id",
        default=DEFAULT_LEADER_ELECTION_ID,
        metavar="NAME",
        help=f"name of the Lease (default: {DEFAULT_LEADER_ELECTION_ID})",
    )
    group.add_argument(
        "--leader-election-namespace",
        metavar="NAMESPACE",
        help="namespace of the Lease (default: --namespace)",
    )
    _add_durations(
        group,
        ("leader-election-lease-duration", 15.0, "how long a Lease is valid without renewal"),
        (
            "leader-election-renew-deadline",
            10.0,
            "how long the leader keeps trying to renew before giving up",
        ),
        ("leader-election-retry-period", 2.0, "time between Lease attempts"),
    )


def _add_durations(group: argparse._ArgumentGroup, *flags: tuple[str, float, str]) -> None:
    """One ``--<name> DURATION`` flag per ``(name, default seconds, help)``."""
    for name, default, text in flags:
        group.add_argument(
            f"--{name}",
            type=duration,
            default=default,
            metavar="DURATION",
            help=f"{text} (default: {default:g}s)",
        )


def _add_controller_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--max-concurrent-reconciles",
        type=positive_int,
        default=2,
        metavar="N",
        help="reconcile workers per controller (default: 2)",
    )
    _add_durations(
        group,
        ("kueue-discovery-interval", 10.0, "time between checks for Kueue while it is missing"),
        (
            "capacity-coalescing-window",
            1.0,
            "per node, at most one NodeFeature write per window while its labels keep changing",
        ),
        ("cache-sync-timeout", 120.0, "how long start-up waits for the caches to fill"),
        ("graceful-shutdown-timeout", 30.0, "how long in-flight reconciles may finish at shutdown"),
    )


def _add_workload_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--kueue-namespace",
        default=DEFAULT_KUEUE_NAMESPACE,
        metavar="NAMESPACE",
        help=f"Kueue's namespace, where its configuration is read (default: "
        f"{DEFAULT_KUEUE_NAMESPACE})",
    )
    group.add_argument(
        "--kueue-configmap",
        default=DEFAULT_KUEUE_CONFIGMAP,
        metavar="NAME",
        help="the ConfigMap holding Kueue's configuration; read, never written "
        f"(default: {DEFAULT_KUEUE_CONFIGMAP})",
    )


def build_config(args: argparse.Namespace) -> WorkerConfig:
    """The worker configuration the flags describe; ``ValueError`` for bad values."""
    return WorkerConfig(
        policy=policy_from_args(args),
        max_concurrent_reconciles=args.max_concurrent_reconciles,
        timing=WorkerTiming(
            kueue_discovery_interval=args.kueue_discovery_interval,
            capacity_window=args.capacity_coalescing_window,
        ),
        kueue_namespace=args.kueue_namespace,
        kueue_configmap=args.kueue_configmap,
    )


def build_options(args: argparse.Namespace) -> ManagerOptions:
    """The runtime manager's options (probes, metrics, leader election) of the flags."""
    election = None
    if args.leader_elect:
        election = LeaderElectionConfig(
            lease_name=args.leader_election_id,
            lease_namespace=args.leader_election_namespace or args.system_namespace,
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
    """``worker``: check the flags (exit 2), then run until SIGTERM/SIGINT."""
    try:
        if args.kube_api_burst < args.kube_api_qps:
            raise ValueError("--kube-api-burst must be at least --kube-api-qps")
        check_serving_flags(args)
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
    client = await connect(args, qps=args.kube_api_qps, burst=args.kube_api_burst)
    if client is None:
        return 1
    try:
        manager = new_worker_manager(client, options)
        config.dra = await serves_dra(client)
        config.policy = await detect_tenancy_at_start(client, config.policy)
        config.policy = await detect_topology_at_start(client, config.policy)
        setup_worker(manager, config)
        # Stage 1 (docs/worker.md): NFD and the device managers; never in a vCluster tenant,
        # where the host runs them (docs/tenants.md, "Shared host nodes")
        if bootstrap is not None and not config.tenant.is_tenant:
            await start_bootstrap(client, manager, bootstrap)
        log.info(
            "worker starting",
            system_namespace=config.policy.system_namespace,
            manufacturers=list(config.policy.manufacturers),
            kueue_version=config.policy.kueue_version or "auto",
            leader_election=options.leader_election is not None,
        )
        return await manager.run_until_signal()
    finally:
        await client.close()
