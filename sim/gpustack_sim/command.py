"""``gpustack-operator sim``: a simulated Kubernetes cluster, for demos, people and kubectl.

The product's entry (``gpustack_operator/commands/sim.py``) hands the subcommand to this
module where the simulator is installed.

The simulator is a test double and a demo: an in-process stand-in for kube-apiserver (plus
NFD-master and kubelet stand-ins) that keeps everything in memory. It is never a production
cluster.

- ``--cluster FILE``: seed it with Node manifests (the format ``plan`` reads), run the
  device-manager agents and the worker against it, wait (bounded) until it holds the chain
  ``plan`` computes for the same file, and print the chain read back from the API.
- ``--serve``: keep running afterwards (or, without ``--cluster``, serve an empty cluster)
  and write a kubeconfig for kubectl, until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import tempfile
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import yaml

from gpustack_operator.commands.argtypes import comma_list, duration
from gpustack_operator.commands.helptext import env_epilog
from gpustack_operator.commands.plan import DEFAULT_NAMESPACES as PLAN_DEFAULT_NAMESPACES
from gpustack_operator.commands.plan import PlanInputError, read_cluster_input
from gpustack_operator.commands.policy_flags import add_policy_flags, policy_from_args
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.environment import load_group_id_with_memory
from gpustack_operator.render import FORMATS, render

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer
    from gpustack_sim.cluster.cluster import SimCluster

log = structlog.get_logger(__name__)

DEFAULT_NAMESPACES = ("default", "kube-system", "gpustack-system")
SYSTEM_NAMESPACE = "gpustack-system"
DEFAULT_TIMEOUT = 60.0
DEFAULT_JOB_RUN_TIME = 10.0
"""How long a served Job's simulated containers run (sim.jobrunner)."""
EXIT_NOT_CONVERGED = 1
EXIT_BAD_INPUT = 2
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
BANNER = (
    "Simulated Kubernetes cluster (gpustack-operator sim: a test double and a demo, "
    "not a production cluster)\n"
)


def default_kubeconfig_path() -> Path:
    """Where ``--serve`` writes its kubeconfig unless told: the temp dir, never the cwd."""
    return Path(tempfile.gettempdir()) / "gpustack-operator-sim-kubeconfig.yaml"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``sim``."""
    parser = subparsers.add_parser(
        "sim",
        help="run a simulated Kubernetes cluster with the operator (a test double and a demo)",
        description=(
            "Run the project's simulated Kubernetes cluster: an in-memory test double and "
            "demo, never a production cluster. With --cluster FILE it is seeded with the Nodes "
            "in FILE (a List, multi-document YAML or `kubectl get nodes -o yaml` output; "
            "Nodes annotated sim.gpustack.ai/devices get simulated accelerators), runs the "
            "device-manager agents and the worker against it, waits until the cluster holds "
            "the chain `plan` computes for the same file (exit 1 with the reason if it does "
            "not within --timeout), and prints the chain read back from the API. With --serve "
            "it then keeps running, with a kubeconfig for kubectl, until interrupted "
            "(SIGINT/SIGTERM); --serve alone serves an empty cluster "
            f"(namespaces {', '.join(DEFAULT_NAMESPACES)}) with NFD-master and Kueue "
            "admission stand-ins."
        ),
        epilog=env_epilog(["sim"], "--timeout", "120"),
    )
    parser.add_argument(
        "--cluster",
        type=Path,
        metavar="FILE",
        help="seed the cluster with the Nodes (and Namespaces) in FILE and run the operator",
    )
    parser.add_argument(
        "--namespaces",
        metavar="A,B",
        help="namespaces to create, which get LocalQueues (default: the Namespace objects in "
        "FILE, else 'default'; as plan)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="table",
        help="how to print the chain: a tree (table) or one v1 List (yaml, json) (default: table)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait for convergence (default: %(default)gs)",
    )
    parser.add_argument(
        "--job-run-time",
        type=duration,
        default=DEFAULT_JOB_RUN_TIME,
        metavar="DURATION",
        help="with --serve: how long the containers of a started Job's Pods run before they "
        "exit 0 and the Job completes (default: 10s; a Pod annotated "
        "sim.gpustack.ai/run-seconds runs that long instead)",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="keep serving until SIGINT/SIGTERM and write a kubeconfig for kubectl",
    )
    parser.add_argument(
        "--kubeconfig-out",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"where to write the kubeconfig (default: {default_kubeconfig_path()})",
    )
    parser.add_argument(
        "--crds",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="load every CustomResourceDefinition in DIR/*.yaml and *.yml (repeatable); with "
        "--cluster, NodeFeature and any Kueue kind no DIR defines get schema-less stand-ins",
    )
    parser.add_argument(
        "--bind-address",
        default="127.0.0.1",
        metavar="ADDR",
        help="address to listen on (default: 127.0.0.1)",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port to listen on (default: 0, a free port)"
    )
    parser.add_argument(
        "--plain-http",
        action="store_true",
        help="serve plain HTTP without authentication instead of HTTPS with the simulator's own "
        "CA, authentication and RBAC (kubectl sends no credentials over plain HTTP)",
    )
    parser.add_argument(
        "--demo-jobs",
        action="store_true",
        help="after convergence submit three Jobs derived from the chain (one that fits, one "
        "too big, one in the wrong queue) and print where each landed or why it waits",
    )
    parser.add_argument(
        "--provision-delay",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="the provisioning stand-in adds nodes to a pool whose pods have been "
        "unschedulable this long (docs/autoscaling.md; default: 2)",
    )
    parser.add_argument(
        "--consolidation-delay",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="and removes a node it added once no pod has used it this long (default: 30)",
    )
    add_policy_flags(
        parser.add_argument_group("the chain, as the worker's flags (docs/configuration.md)")
    )
    parser.set_defaults(handler=run)


def load_crd_documents(dirs: Iterable[Path]) -> list[dict[str, Any]]:
    """Every ``CustomResourceDefinition`` in the YAML files of *dirs* (other kinds skipped).

    Raises ``ValueError`` naming the file when a directory is missing or a file is not YAML.
    """
    crds: list[dict[str, Any]] = []
    for directory in dirs:
        if not directory.is_dir():
            raise ValueError(f"--crds {directory}: not a directory")
        files = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml"))
        for path in files:
            try:
                docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
            except (OSError, yaml.YAMLError) as exc:
                raise ValueError(f"{path}: cannot read YAML: {exc}") from exc
            for doc in docs:
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    crds.append(doc)
    return crds


def _error(message: str, code: int) -> int:
    sys.stderr.write(f"gpustack-operator sim: error: {' '.join(message.split())}\n")
    return code


def run(args: argparse.Namespace) -> int:
    """``sim``: check the flags (exit 2), then run the cluster and/or serve it."""
    if args.cluster is None and not args.serve:
        return _error(
            "give --cluster FILE (run the operator on simulated nodes), --serve (an empty "
            "cluster for kubectl), or both",
            EXIT_BAD_INPUT,
        )
    if args.timeout <= 0:
        return _error(f"--timeout must be positive, got {args.timeout:g}", EXIT_BAD_INPUT)
    try:
        crds = load_crd_documents(args.crds)
    except ValueError as exc:
        return _error(str(exc), EXIT_BAD_INPUT)
    kubeconfig = args.kubeconfig_out or default_kubeconfig_path()
    if args.cluster is None:
        served = with_stand_ins(crds)
        return _run_loop(
            lambda: serve_empty(
                served,
                kubeconfig,
                args.bind_address,
                args.port,
                tls=not args.plain_http,
                job_run_time=args.job_run_time,
            )
        )
    try:
        cluster = build_cluster(args, crds)
    except (PlanInputError, ValueError) as exc:
        return _error(str(exc), EXIT_BAD_INPUT)
    return _run_loop(lambda: run_cluster(cluster, args, kubeconfig if args.serve else None))


def with_stand_ins(crds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """*crds* plus a stand-in for each Kueue/NFD CRD they do not bring (docs/simulator.md,
    "Stand-in CRDs"): ``sim`` serves the operator's kinds from a fresh clone."""
    from gpustack_sim.standins.crds import stand_in_crds

    given = {crd["metadata"]["name"] for crd in crds if isinstance(crd.get("metadata"), dict)}
    return [*crds, *(c for c in stand_in_crds() if c["metadata"]["name"] not in given)]


def with_pool_stand_ins(
    crds: list[dict[str, Any]], provisioning: bool, pools: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """*crds* plus stand-ins of the pool kinds, of the Cluster API infrastructure kinds among
    *pools* (and with *provisioning* of the ProvisioningRequest kinds) they do not bring
    (docs/autoscaling.md)."""
    from gpustack_sim.standins.crds import autoscaling_stand_in_crds, infrastructure_stand_in_crds

    given = {crd["metadata"]["name"] for crd in crds if isinstance(crd.get("metadata"), dict)}
    extra = [*autoscaling_stand_in_crds(provisioning), *infrastructure_stand_in_crds(pools)]
    return [*crds, *(c for c in extra if c["metadata"]["name"] not in given)]


def build_cluster(args: argparse.Namespace, crds: list[dict[str, Any]]) -> SimCluster:
    """The simulated cluster for ``--cluster`` (input read and checked as ``plan`` does).

    Raises ``PlanInputError`` or ``ValueError`` naming what is wrong with the input.
    """
    from gpustack_sim.apiserver.authn import TokenAuthenticator
    from gpustack_sim.cluster.cluster import SimCluster

    dump = read_cluster_input(args.cluster)
    nodes, found, slices, pools = dump.nodes, dump.namespaces, dump.slices, dump.pools
    if args.namespaces is not None:
        namespaces: list[str | Mapping[str, Any]] = list(comma_list(args.namespaces))
    else:
        namespaces = list(found) or list(PLAN_DEFAULT_NAMESPACES)
    policy = dump.with_declarations(policy_from_args(args))
    with_memory = load_group_id_with_memory()
    # The same checks plan makes (invalid sim.gpustack.ai/devices annotations, names, ...).
    plan_state(
        nodes,
        namespaces,
        policy,
        with_memory=with_memory,
        resource_slices=slices,
        pool_objects=pools,
    )
    served = with_stand_ins(crds)
    if pools or policy.declared_pools:  # docs/autoscaling.md: pool kinds, and the checks' on `on`
        served = with_pool_stand_ins(served, bool(policy.provisioning.served), pools)
    return SimCluster(
        nodes,
        namespaces,
        crds=served,
        policy=policy,
        with_memory=with_memory,
        resource_slices=slices,
        pool_objects=pools,
        extra_objects=dump.configmaps,
        provision_delay=args.provision_delay,
        consolidation_delay=args.consolidation_delay,
        host=args.bind_address,
        port=args.port,
        tls=not args.plain_http,
        authenticator=None if args.plain_http else TokenAuthenticator(),
    )


def _run_loop(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run *main* as every long-running command does (uvloop when installed)."""
    from gpustack_operator.runtime.manager import run_async  # kr8s: only once it runs

    return run_async(main)


async def run_cluster(
    cluster: SimCluster, args: argparse.Namespace, kubeconfig: Path | None
) -> int:
    """Start *cluster*, wait for convergence, print the chain; with *kubeconfig*, serve on."""
    from gpustack_sim.cluster.cluster import NotConverged

    with _stop_on_signals() as stop:
        try:
            async with cluster:
                return await _converge_and_print(cluster, args, kubeconfig, stop)
        except OSError as exc:
            return _error(f"cannot start the simulated cluster: {exc}", EXIT_NOT_CONVERGED)
        except NotConverged as exc:
            sys.stderr.write(f"gpustack-operator sim: error: {exc}\n")
            return EXIT_NOT_CONVERGED


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[asyncio.Event]:
    """An event set by SIGINT or SIGTERM while the block runs (the handlers are removed after)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in _STOP_SIGNALS:
            loop.remove_signal_handler(sig)


async def _converge_and_print(
    cluster: SimCluster, args: argparse.Namespace, kubeconfig: Path | None, stop: asyncio.Event
) -> int:
    converging = asyncio.ensure_future(cluster.converge(args.timeout))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({converging, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # whichever lost (or both, when we are cancelled) is cancelled and awaited
        for task in (converging, stopping):
            task.cancel()
        await asyncio.gather(converging, stopping, return_exceptions=True)
    if converging.cancelled():
        return _error("interrupted before the cluster converged", 130)
    took = converging.result()  # raises NotConverged
    # The live nodes explained as plan explains its input (docs/plan.md): the same output.
    chain = await cluster.read_back()
    sys.stdout.write(render(chain, args.output, cluster.manufacturers))
    sys.stdout.flush()
    if getattr(args, "demo_jobs", False):
        from gpustack_sim.demojobs import run_demo_jobs
        from gpustack_sim.teamdemo import run_team_demo

        try:
            # docs/teams.md: a chain with teams shows borrowing and reclaiming instead.
            api = cluster.kueue.version.api_version
            shown = await run_team_demo(cluster, args.timeout, api)
            shown = shown if shown is not None else await run_demo_jobs(cluster, args.timeout)
            sys.stdout.write("\n" + shown)
        except TimeoutError as exc:
            return _error(str(exc), EXIT_NOT_CONVERGED)
        sys.stdout.flush()
    log.info("sim converged", seconds=round(took, 2), nodes=len(cluster.nodes))
    if kubeconfig is None:
        return 0
    path = cluster.sim.write_kubeconfig(kubeconfig, context="sim")
    sys.stderr.write(
        BANNER + f"  API server: {cluster.sim.url}\n"
        f"  kubeconfig: {path}\n"
        "The worker and the device-manager agents keep running. Use it with kubectl:\n"
        f"  export KUBECONFIG={path}\n"
        "  kubectl get clusterqueues\n"
        "Stop with Ctrl-C (SIGINT) or SIGTERM.\n"
    )
    sys.stderr.flush()
    from gpustack_sim.standins.jobrunner import JobRunnerStandIn

    # Served, admitted Jobs run to completion (docs/simulator.md, "Job runner stand-in").
    async with JobRunnerStandIn(cluster.sim, run_seconds=args.job_run_time):
        await stop.wait()
    return 0


def serving_summary(url: str, kubeconfig: Path, crds: list[dict[str, Any]]) -> str:
    """What ``sim --serve`` serves, how to seed it and where the kubeconfig is."""
    from gpustack_sim.standins.crds import is_stand_in

    stand_ins = sorted(c["spec"]["names"]["kind"] for c in crds if is_stand_in(c))
    real = sorted(c["spec"]["names"]["kind"] for c in crds if not is_stand_in(c))
    lines = [
        f"  API server: {url}",
        f"  kubeconfig: {kubeconfig}",
        f"  namespaces: {', '.join(DEFAULT_NAMESPACES)}; no Nodes yet",
    ]
    if real:
        lines.append(f"  CRDs from --crds: {len(real)} ({', '.join(real)})")
    if stand_ins:
        lines.append(
            f"  stand-in CRDs (open schemas; --crds DIR loads real ones): {', '.join(stand_ins)}"
        )
    lines.append(
        "  running: the NFD-master, Kueue admission (Jobs wait for a queue; admitted, their "
        "Pods are created, bound and run for --job-run-time), ServiceAccount (`default` in "
        "every namespace), Pod lifecycle (Pods are bound and start, no containers run) and "
        "Deployment/ReplicaSet (Deployments roll out their Pods) stand-ins"
    )
    return "\n".join(
        [
            *lines,
            "Seed it:",
            "  kubectl apply -f examples/cluster.yaml     (Nodes only; no operator runs)",
            "  or start it as: gpustack-operator sim --serve --cluster examples/cluster.yaml",
            "                                             (runs the operator on those Nodes)",
            "Use it with kubectl:",
            f"  export KUBECONFIG={kubeconfig}",
            "  kubectl get nodes",
            "Stop with Ctrl-C (SIGINT) or SIGTERM.",
            "",
        ]
    )


async def serve_empty(
    crds: list[dict[str, Any]],
    kubeconfig: Path,
    host: str,
    port: int,
    *,
    tls: bool = True,
    job_run_time: float = DEFAULT_JOB_RUN_TIME,
) -> int:
    """``--serve`` alone: an empty cluster (CRDs, NFD and Kueue stand-ins) until
    SIGINT/SIGTERM, over HTTPS with its own CA unless *tls* is off; exit code."""
    from gpustack_sim.apiserver.authn import TokenAuthenticator
    from gpustack_sim.apiserver.server import SimServer

    # Over TLS the kubeconfig carries the administrator's certificate, so authentication and
    # RBAC can be on as in a real cluster (docs/simulator.md, "TLS and client certificates").
    sim = SimServer(
        namespaces=DEFAULT_NAMESPACES,
        host=host,
        port=port,
        tls=tls,
        authenticator=TokenAuthenticator() if tls else None,
    )
    with _stop_on_signals() as stop:
        try:
            try:
                await sim.start()
            except OSError as exc:
                return _error(f"cannot listen on {host}:{port}: {exc}", 1)
            return await _serve_started(sim, crds, kubeconfig, stop, job_run_time)
        finally:
            await sim.stop()


async def _serve_started(
    sim: SimServer,
    crds: list[dict[str, Any]],
    kubeconfig: Path,
    stop: asyncio.Event,
    job_run_time: float,
) -> int:
    """Load the CRDs, run the NFD, Kueue (admission and its provisioning check), Job
    (scheduler and runner), ServiceAccount, Pod lifecycle and Deployment and ReplicaSet
    stand-ins, write the kubeconfig, and wait for *stop*."""
    from gpustack_sim.apiserver.errors import ApiError
    from gpustack_sim.standins.deployments import DeploymentStandIn, ReplicaSetStandIn
    from gpustack_sim.standins.jobrunner import JobRunnerStandIn
    from gpustack_sim.standins.kueue import KueueStandIn
    from gpustack_sim.standins.nfdmaster import NfdMaster
    from gpustack_sim.standins.podlifecycle import PodLifecycleStandIn
    from gpustack_sim.standins.provisioningcheck import ProvisioningCheckStandIn
    from gpustack_sim.standins.scheduler import SchedulerStandIn
    from gpustack_sim.standins.serviceaccounts import ServiceAccountStandIn

    try:
        sim.load_crds(crds)
    except (ValueError, ApiError) as exc:
        sys.stderr.write(f"gpustack-operator sim: a CRD from --crds was refused: {exc}\n")
        return 2
    try:
        path = sim.write_kubeconfig(kubeconfig, context="sim")
    except OSError as exc:
        sys.stderr.write(f"gpustack-operator sim: cannot write the kubeconfig: {exc}\n")
        return 1
    async with (
        NfdMaster(sim, namespace=SYSTEM_NAMESPACE),
        KueueStandIn(sim),
        ProvisioningCheckStandIn(sim),
        SchedulerStandIn(sim),
        JobRunnerStandIn(sim, run_seconds=job_run_time),
        ServiceAccountStandIn(sim),
        PodLifecycleStandIn(sim),
        DeploymentStandIn(sim),
        ReplicaSetStandIn(sim),
    ):
        sys.stdout.write(BANNER + serving_summary(sim.url, path, crds))
        sys.stdout.flush()
        log.info("sim serving", url=sim.url, kubeconfig=str(path), crds=len(crds))
        await stop.wait()
        log.info("sim stopping")
    return 0
