"""``gpustack-operator worker-gateway``: one read-only API over the queues of many clusters.

Connects to every listed cluster, keeps informers on the managed Kueue objects of each and
serves the aggregated views (docs/worker-gateway.md). Flags also come from the environment as
``GPUSTACK_WORKER_GATEWAY_<FLAG>``; ``--cluster`` takes a comma list there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

from gpustack_operator.commands.argtypes import positive_int, positive_number
from gpustack_operator.commands.helptext import env_epilog
from gpustack_operator.domain.chain.multikueue import (
    DEFAULT_KUEUE_NAMESPACE,
    DEFAULT_UNREACHABLE_AFTER,
    MultiKueuePolicy,
)
from gpustack_operator.gateway.api import ApiOptions
from gpustack_operator.gateway.cluster import RunnerSettings
from gpustack_operator.gateway.config import ConfigError, collect_clusters, parse_cluster_flag
from gpustack_operator.gateway.gateway import Gateway
from gpustack_operator.gateway.guard import ConnectionLimits
from gpustack_operator.gateway.multikueue import (
    DEFAULT_SYNC_INTERVAL,
    ManagerSettings,
    MultiKueueSync,
    member_kubeconfig_specs,
)
from gpustack_operator.gateway.server import (
    GatewayServer,
    ServerOptions,
    load_tokens,
    tls_context,
)
from gpustack_operator.runtime.manager import run_async

COMMAND = "worker-gateway"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``worker-gateway``."""
    parser = subparsers.add_parser(
        COMMAND,
        help="serve one read-only API over the Kueue queues of several clusters",
        description="Watch the Kueue objects gpustack-operator manages in several clusters and "
        "serve them through one HTTP API: clusters, pools (one per ClusterQueue), raw objects, "
        "and ?watch=true streams of their changes. See docs/worker-gateway.md.",
        epilog=env_epilog([COMMAND], "--cluster", "a=/etc/a.kubeconfig,b=/etc/b.kubeconfig"),
    )
    clusters = parser.add_argument_group("clusters")
    clusters.add_argument(
        "--cluster",
        action="append",
        default=[],
        metavar="NAME=KUBECONFIG[:CONTEXT]",
        help="a cluster to serve (repeatable); CONTEXT defaults to the file's current context",
    )
    clusters.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="YAML file 'clusters: [{name, kubeconfig, context}]' (paths relative to it)",
    )
    clusters.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help="serve every context of this kubeconfig as a cluster named after the context",
    )
    clusters.add_argument(
        "--allow-cluster-registration",
        action="store_true",
        help="allow POST/DELETE /apis/v1/clusters/{name} to add and remove clusters at run time",
    )
    clusters.add_argument(
        "--allowed-registration-server",
        action="append",
        default=[],
        metavar="URL",
        help="an API server a registered kubeconfig may name (repeatable); the servers of the "
        "clusters given at start-up are always allowed, no other by default",
    )
    server = parser.add_argument_group("server")
    server.add_argument(
        "--bind-address",
        default="127.0.0.1",
        metavar="ADDR",
        help="address the API listens on (default: 127.0.0.1)",
    )
    server.add_argument(
        "--port",
        type=int,
        default=8090,
        help="port the API listens on; 0 picks a free one (default: 8090)",
    )
    server.add_argument(
        "--tls-cert-file",
        type=Path,
        metavar="FILE",
        help="PEM certificate: serve HTTPS (needs --tls-private-key-file; default: plain HTTP)",
    )
    server.add_argument(
        "--tls-private-key-file", type=Path, metavar="FILE", help="PEM key of --tls-cert-file"
    )
    server.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="bearer tokens, one a line: every path but /healthz and /readyz then needs one",
    )
    server.add_argument(
        "--read-header-timeout",
        type=positive_number,
        default=10.0,
        metavar="SECONDS",
        help="close a connection that takes longer to send a request's headers (default: 10)",
    )
    server.add_argument(
        "--idle-timeout",
        type=positive_number,
        default=120.0,
        metavar="SECONDS",
        help="close a kept-alive connection idle for longer between requests (default: 120)",
    )
    server.add_argument(
        "--max-connections",
        type=positive_int,
        default=1024,
        metavar="N",
        help="open connections at most; more are answered 503 and closed (default: 1024)",
    )
    server.add_argument(
        "--max-watchers-per-token",
        type=positive_int,
        default=64,
        metavar="N",
        help="watch streams one token may hold open; more get 429 (default: 64)",
    )
    tuning = parser.add_argument_group("tuning")
    tuning.add_argument(
        "--probe-interval",
        type=positive_number,
        default=10.0,
        metavar="SECONDS",
        help="seconds between reachability probes of each cluster (default: 10)",
    )
    tuning.add_argument(
        "--watch-buffer",
        type=positive_int,
        default=1024,
        metavar="N",
        help="events a watcher may fall behind before it is disconnected (default: 1024)",
    )
    tuning.add_argument(
        "--heartbeat",
        type=positive_number,
        default=30.0,
        metavar="SECONDS",
        help="seconds of silence after which a watch gets an empty BOOKMARK (default: 30)",
    )
    multikueue = parser.add_argument_group(
        "multikueue",
        "keep a MultiKueue manager cluster in step with the members' pools (docs/multikueue.md)",
    )
    multikueue.add_argument(
        "--multikueue-manager",
        metavar="KUBECONFIG[:CONTEXT]",
        help="the manager cluster: write its MultiKueueClusters, kubeconfig Secrets, "
        "MultiKueueConfigs, AdmissionChecks, ClusterQueues and LocalQueues from the pools of "
        "every served cluster (default: off)",
    )
    multikueue.add_argument(
        "--multikueue-member-kubeconfig",
        action="append",
        default=[],
        metavar="NAME=KUBECONFIG[:CONTEXT]",
        help="the kubeconfig Kueue uses for member NAME (a ServiceAccount token, "
        "deploy/components/multikueue-member; repeatable); default: the one the gateway reads "
        "NAME with",
    )
    multikueue.add_argument(
        "--multikueue-kueue-namespace",
        default=DEFAULT_KUEUE_NAMESPACE,
        metavar="NAMESPACE",
        help=f"Kueue's namespace in the manager, where the kubeconfig Secrets go "
        f"(default: {DEFAULT_KUEUE_NAMESPACE})",
    )
    multikueue.add_argument(
        "--multikueue-unreachable-after",
        type=positive_number,
        default=DEFAULT_UNREACHABLE_AFTER,
        metavar="SECONDS",
        help="seconds a member may stay unreachable before its pools leave the manager's sums "
        f"(default: {DEFAULT_UNREACHABLE_AFTER:g})",
    )
    multikueue.add_argument(
        "--multikueue-sync-interval",
        type=positive_number,
        default=DEFAULT_SYNC_INTERVAL,
        metavar="SECONDS",
        help="seconds between passes over the manager: the bound on how late a member's change "
        f"reaches it (default: {DEFAULT_SYNC_INTERVAL:g})",
    )
    parser.set_defaults(handler=run)


def _fail(message: str) -> int:
    sys.stderr.write(f"gpustack-operator {COMMAND}: error: {message}\n")
    return 2


def _multikueue_settings(args: argparse.Namespace) -> ManagerSettings | None:
    """The MultiKueue mode's settings, or None when ``--multikueue-manager`` is not given."""
    members = member_kubeconfig_specs(args.multikueue_member_kubeconfig)
    if args.multikueue_manager is None:
        if members:
            raise ConfigError("--multikueue-member-kubeconfig needs --multikueue-manager")
        return None
    manager = parse_cluster_flag(f"manager={args.multikueue_manager}")
    return ManagerSettings(
        manager=manager,
        policy=MultiKueuePolicy(
            kueue_namespace=args.multikueue_kueue_namespace,
            unreachable_after=args.multikueue_unreachable_after,
        ),
        member_kubeconfigs=members,
        sync_interval=args.multikueue_sync_interval,
    )


def run(args: argparse.Namespace) -> int:
    """Validate the flags, then serve until SIGTERM/SIGINT."""
    try:
        specs = collect_clusters(args.cluster, args.config, args.kubeconfig)
    except ConfigError as exc:
        return _fail(str(exc))
    if not specs and not args.allow_cluster_registration:
        return _fail(
            "no clusters: pass --cluster NAME=KUBECONFIG[:CONTEXT], --config FILE or "
            "--kubeconfig FILE, or --allow-cluster-registration to add them through the API"
        )
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        return _fail("--tls-cert-file and --tls-private-key-file go together")
    if not 0 <= args.port <= 65535:
        return _fail(f"--port {args.port} is outside 0..65535")
    try:
        tls = (
            tls_context(args.tls_cert_file, args.tls_private_key_file)
            if args.tls_cert_file
            else None
        )
        tokens = load_tokens(args.token_file) if args.token_file else []
        api = ApiOptions(
            tokens=tokens,
            allow_registration=args.allow_cluster_registration,
            heartbeat=args.heartbeat,
            allowed_servers=args.allowed_registration_server,
            max_watchers_per_token=args.max_watchers_per_token,
        )
    except ValueError as exc:
        return _fail(str(exc))
    try:
        multikueue = _multikueue_settings(args)
    except ConfigError as exc:
        return _fail(str(exc))
    options = ServerOptions(
        bind_address=args.bind_address,
        port=args.port,
        tls=tls,
        api=api,
        limits=ConnectionLimits(
            header_timeout=args.read_header_timeout,
            idle_timeout=args.idle_timeout,
            max_connections=args.max_connections,
        ),
        tls_files=(args.tls_cert_file, args.tls_private_key_file) if tls else None,
        token_file=args.token_file,
    )

    async def main() -> int:
        gateway = Gateway(
            RunnerSettings(probe_interval=args.probe_interval), watch_buffer=args.watch_buffer
        )
        server = GatewayServer(gateway, specs, options)
        if multikueue is None:
            return await server.run_until_signal()
        async with anyio.create_task_group() as tg:
            tg.start_soon(MultiKueueSync(gateway, multikueue).run, name="multikueue")
            code = await server.run_until_signal()
            tg.cancel_scope.cancel()
        return code

    return run_async(main)
