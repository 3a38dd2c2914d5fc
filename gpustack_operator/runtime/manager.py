"""The manager: runs shared informers, controllers, leader election, probes and metrics.

Start-up, in order:

1. serve ``/healthz`` + ``/readyz`` and ``/metrics`` (each on its own address; ``"0"``
   disables one);
2. start the Events recorder and every shared informer (informers warm up before the Lease
   is held, so a new leader starts with full caches);
3. wait for the caches to sync (bounded by ``cache_sync_timeout``) — ``/readyz`` reports
   ready from then on, leader or not, so standby replicas count as available;
4. start runnables that do not need leadership;
5. campaign for the Lease when leader election is configured;
6. once leading (at once without election), start the controllers and leader-only runnables.

A controller added while the manager runs (one whose kinds were discovered later) starts at
once when this manager leads, else when it is elected. Controllers attach their event
handlers only when they start, so a standby's leader-only queues stay empty.

:meth:`Manager.run` is driven by cancellation: cancel it and it shuts down in order — stop
taking work and let in-flight reconciles finish within ``graceful_shutdown_timeout``, then
release the Lease (so a standby takes over at once), then stop informers and servers.
It raises when something fatal happens: :class:`LeaderElectionLost`, a cache that never
syncs, a bind failure, or a runnable that fails. :meth:`Manager.run_until_signal` is the
process entry: SIGTERM/SIGINT start the graceful shutdown (a second signal exits at once) and
it returns an exit code. :func:`run_async` runs a coroutine on uvloop when installed.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import structlog
from anyio.abc import TaskGroup

from gpustack_operator.runtime import metrics
from gpustack_operator.runtime.churn import KeyChurn
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.controller import (
    CacheSyncTimeoutError,
    Controller,
    ControllerBuilder,
    EventSource,
)
from gpustack_operator.runtime.events import EventRecorder
from gpustack_operator.runtime.fence import WriteFence
from gpustack_operator.runtime.informer import Informer, InformerFactory, ReflectorSettings
from gpustack_operator.runtime.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionLost,
    LeaderElector,
)
from gpustack_operator.runtime.probes import (
    Check,
    HealthChecks,
    HttpServer,
    metrics_app,
    parse_bind_address,
    probes_app,
)
from gpustack_operator.runtime.resources import Resource

__all__ = ["Manager", "ManagerOptions", "RunnableFailed", "run_async"]

log = structlog.get_logger(__name__)

T = TypeVar("T")
Runnable = Callable[[], Awaitable[None]]


@dataclass
class ManagerOptions:
    """How a manager runs; defaults follow controller-runtime's."""

    component: str = "gpustack-operator"
    """``source.component`` of recorded Events and the prefix of log lines."""
    health_probe_bind_address: str = ":8081"
    metrics_bind_address: str = ":8080"
    leader_election: LeaderElectionConfig | None = None
    """None runs without election (every replica runs the controllers)."""
    cache_sync_timeout: float = 120.0
    graceful_shutdown_timeout: float = 30.0
    """How long in-flight reconciles may run after shutdown starts."""
    resync_period: float | None = None
    """Periodic ``on_update(obj, obj)`` of every cached object; None disables."""
    reflector: ReflectorSettings | None = None
    event_queue_size: int = 1000
    informer_failure_threshold: float | None = 60.0
    """``/readyz`` fails (check ``informers-healthy``) while an informer has been unable to
    list or watch for longer than this many seconds; None disables the check."""
    churn_limit: int = 600
    churn_window: float = 60.0
    """A key reconciled ``churn_limit`` times within ``churn_window`` seconds never settles:
    its controller lists its kinds again and ``/readyz`` fails (check
    ``reconciles-settling``) until a whole window passes below the limit (docs/runtime.md,
    "Keys that never settle")."""


class RunnableFailed(RuntimeError):
    """A runnable added with :meth:`Manager.add_runnable` raised; the manager stopped."""


@dataclass
class _Task:
    """A child of the manager, run in its own shielded scope so shutdown can order stops."""

    name: str
    scope: anyio.CancelScope = field(default_factory=lambda: anyio.CancelScope(shield=True))
    done: anyio.Event = field(default_factory=anyio.Event)


class Manager:
    """Owns the client, the shared informers, controllers and the process-level services."""

    def __init__(
        self,
        client: Client,
        options: ManagerOptions | None = None,
        *,
        informers: InformerFactory | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """*clock*: the monotonic clock of leader election and its write fence (tests
        inject a fake one; default ``time.monotonic``)."""
        self.client = client
        self.options = opts = options or ManagerOptions()
        # Fail on a bad address now, not after the caches have been filled.
        self._health_address = parse_bind_address(opts.health_probe_bind_address)
        self._metrics_address = parse_bind_address(opts.metrics_bind_address)
        self.informers = informers or InformerFactory(
            client, resync_period=opts.resync_period, settings=opts.reflector
        )
        self.event_recorder = EventRecorder(
            client, opts.component, queue_size=opts.event_queue_size
        )
        self.controllers: list[Controller] = []
        self.healthz = HealthChecks()
        self.readyz = HealthChecks()
        self.healthz.add("ping", lambda: True)
        self.readyz.add("informers-synced", self._caches_synced)
        if opts.informer_failure_threshold is not None:
            self.readyz.add("informers-healthy", self._informers_healthy)
        self.readyz.add("reconciles-settling", self._reconciles_settling)
        self.health_server: HttpServer | None = None
        self.metrics_server: HttpServer | None = None
        self.elector: LeaderElector | None = None
        self.fence = WriteFence()
        """What leader-only writes pass first (docs/runtime.md, "Write fence"): the elector's
        Lease fence with leader election, else always open."""
        if opts.leader_election is not None:
            self.elector = LeaderElector(
                client, opts.leader_election, clock=clock or time.monotonic
            )
            self.fence = self.elector.fence
        self.event_recorder.fence = self.fence
        self.serving = anyio.Event()
        """Set once the HTTP servers are bound (their ports are known)."""
        self.synced = anyio.Event()
        """Set once the caches synced."""
        self.elected = anyio.Event()
        """Set once this manager runs its leader-only work (at once without election)."""
        self.stopping = anyio.Event()
        """Set when shutdown begins (cancellation, a signal or a fatal error)."""
        self._runnables: list[tuple[str, Runnable, bool]] = []
        self._tasks: dict[str, list[_Task]] = {"leader": [], "elector": [], "infra": []}
        self._errors: list[BaseException] = []
        self._stop = anyio.Event()
        self._ran = False
        self._task_group: TaskGroup | None = None
        self._log = log.bind(component=opts.component)

    # --- building ------------------------------------------------------------------------------

    def controller(self, name: str) -> ControllerBuilder:
        """Start declaring a controller: ``manager.controller("x").for_(...).complete(fn)``."""
        return ControllerBuilder(self, name)

    def source_for(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> EventSource:
        """The shared informer of *resource* with this scope, as controllers watch it."""
        return self.informer(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )

    def informer(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Informer:
        """The shared informer for this scope (controllers read their caches from it)."""
        return self.informers.informer(
            resource,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
        )

    def add_controller(self, controller: Controller) -> None:
        """Run *controller* while this manager leads; names must be unique (metrics, logs).

        Added while the manager runs, it starts at once if this manager leads (else with the
        others once elected).
        """
        if self.stopping.is_set():
            raise RuntimeError(
                f"cannot add controller {controller.name!r}: the manager is shutting down"
            )
        if any(c.name == controller.name for c in self.controllers):
            raise ValueError(
                f"a controller named {controller.name!r} is already registered: names label "
                "logs and metrics and must be unique"
            )
        if controller.drain_timeout > self.options.graceful_shutdown_timeout:
            controller.drain_timeout = self.options.graceful_shutdown_timeout
        controller.churn = KeyChurn(self.options.churn_limit, self.options.churn_window)
        self.controllers.append(controller)
        if self._task_group is not None and self.elected.is_set():
            self._log.info("starting controller", controller=controller.name)
            self._spawn(self._task_group, "leader", f"controller {controller.name}", controller.run)

    @property
    def recorder(self) -> EventRecorder:
        """The manager's Kubernetes Event recorder (alias of :attr:`event_recorder`)."""
        return self.event_recorder

    def add_runnable(self, fn: Runnable, *, name: str, needs_leader: bool = True) -> None:
        """Run ``fn()`` with the manager (after cache sync; after election if *needs_leader*).

        It is cancelled at shutdown; if it raises, the manager stops and re-raises.
        """
        if self._ran:
            raise RuntimeError("add runnables before Manager.run()")
        self._runnables.append((name, fn, needs_leader))

    def add_healthz_check(self, name: str, check: Check) -> None:
        """Add a liveness check served at ``/healthz``."""
        self.healthz.add(name, check)

    def add_readyz_check(self, name: str, check: Check) -> None:
        """Add a readiness check served at ``/readyz``."""
        self.readyz.add(name, check)

    @property
    def is_leader(self) -> bool:
        """Whether this manager runs the leader-only work now."""
        if self.elector is None:
            return self.elected.is_set()
        return self.elector.is_leader

    def _informers_healthy(self) -> bool:
        threshold = self.options.informer_failure_threshold
        if threshold is None:
            return True
        failing = [i for i in self.informers.informers if i.failing_for() > threshold]
        for informer in failing:
            self._log.warning(
                "informer cannot list or watch; not ready",
                informer=informer.scope,
                failing_seconds=round(informer.failing_for(), 1),
                fix="check the API server's reachability and the RBAC rules (list/watch)",
            )
        return not failing

    def _reconciles_settling(self) -> bool:
        churning = {c.name: c.churn.churning() for c in self.controllers}
        for name, keys in churning.items():
            for key, count in sorted(keys.items())[:5]:
                self._log.warning(
                    "a key never settles; not ready",
                    controller=name,
                    churning_key=key,
                    reconciles=count,
                    window_seconds=self.options.churn_window,
                    fix="the cache may disagree with the API server, or the key's reconcile "
                    "undoes itself: see the controller's log for that key; a restart lists "
                    "everything again",
                )
        return not any(churning.values())

    def _caches_synced(self) -> bool:
        return self.synced.is_set() and all(i.has_synced for i in self.informers.informers)

    # --- running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled (then shut down gracefully) or until something fatal happens.

        Raises :class:`LeaderElectionLost`, :class:`CacheSyncTimeoutError`,
        :class:`RunnableFailed` or :class:`OSError` (bind) after shutting down.
        """
        if self._ran:
            raise RuntimeError("a Manager runs once; create a new one")
        self._ran = True
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            try:
                await self._start(tg)
                await self._stop.wait()
            except Exception as err:  # start-up failures: stop what started, then raise
                self._errors.append(err)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._shutdown()
                self._task_group = None
        if self._errors:
            raise self._errors[0]

    async def _start(self, tg: TaskGroup) -> None:
        opts = self.options
        await self._serve()
        self.serving.set()
        self._spawn(tg, "infra", "events", self.event_recorder.run)
        self._spawn(tg, "infra", "informers", self.informers.run)
        self._log.info("waiting for caches to sync", informers=len(self.informers.informers))
        synced = False

        async def sync() -> None:
            nonlocal synced
            synced = await self.informers.wait_for_sync(opts.cache_sync_timeout)

        if not await self._unless_stopped(sync):
            return
        if not synced:
            pending = [str(i.resource) for i in self.informers.informers if not i.has_synced]
            raise CacheSyncTimeoutError(
                f"caches of {', '.join(pending)} did not sync within "
                f"{opts.cache_sync_timeout:g}s; check the API server and the RBAC rules "
                "(list/watch) for these kinds"
            )
        self.synced.set()
        self._log.info("caches synced")
        for name, fn, needs_leader in self._runnables:
            if not needs_leader:
                self._spawn(tg, "infra", name, fn, wrap=RunnableFailed)
        if self.elector is not None:
            self._spawn(tg, "elector", "leader-election", self.elector.run)
            if not await self._unless_stopped(self.elector.elected.wait):
                return
        self.elected.set()
        self._log.info("starting controllers", controllers=[c.name for c in self.controllers])
        for controller in self.controllers:
            self._spawn(tg, "leader", f"controller {controller.name}", controller.run)
        for name, fn, needs_leader in self._runnables:
            if needs_leader:
                self._spawn(tg, "leader", name, fn, wrap=RunnableFailed)

    async def _unless_stopped(self, fn: Callable[[], Awaitable[Any]]) -> bool:
        """Await ``fn()`` unless the manager is asked to stop first; True when it finished."""
        finished = False
        async with anyio.create_task_group() as tg:

            async def stop_waiting() -> None:
                await self._stop.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(stop_waiting)
            await fn()
            finished = True
            tg.cancel_scope.cancel()
        return finished

    async def _serve(self) -> None:
        if self._health_address is not None:
            host, port = self._health_address
            self.health_server = HttpServer(
                probes_app(self.healthz, self.readyz), host, port, name="health probes"
            )
            await self.health_server.start()
        if self._metrics_address is not None:
            host, port = self._metrics_address
            self.metrics_server = HttpServer(
                metrics_app(metrics.REGISTRY), host, port, name="metrics"
            )
            await self.metrics_server.start()

    def _spawn(
        self,
        tg: TaskGroup,
        group: str,
        name: str,
        fn: Runnable,
        *,
        wrap: type[Exception] | None = None,
    ) -> None:
        task = _Task(name)
        self._tasks[group].append(task)

        async def run() -> None:
            try:
                with task.scope:
                    await fn()
            except Exception as err:
                error: Exception = err
                if wrap is not None:
                    error = wrap(f"runnable {name!r} failed: {err}")
                    error.__cause__ = err
                self._log.error("stopping the manager", failed=name, error=str(error))
                self._errors.append(error)
                self._stop.set()
            finally:
                task.done.set()

        tg.start_soon(run, name=name)

    async def _stop_group(self, group: str) -> None:
        """Cancel a group's tasks and wait for them (controllers bound their own drain)."""
        tasks = self._tasks[group]
        for task in tasks:
            task.scope.cancel()
        for task in tasks:
            await task.done.wait()

    async def _shutdown(self) -> None:
        self.stopping.set()
        lost = any(isinstance(e, LeaderElectionLost) for e in self._errors)
        self._log.info("shutting down", leadership_lost=lost or None)
        if lost:
            # Another replica may already lead: stop writing now, do not drain.
            for controller in self.controllers:
                controller.drain_timeout = 0
        # Controllers drain within their drain_timeout (<= graceful_shutdown_timeout).
        await self._stop_group("leader")
        # Only now give up the Lease: nothing of ours writes any more.
        await self._stop_group("elector")
        # The last failures' Events are worth a moment; the recorder never blocks for long.
        if any(t.name == "events" and not t.done.is_set() for t in self._tasks["infra"]):
            await self.event_recorder.flush(min(2.0, self.options.graceful_shutdown_timeout))
        await self._stop_group("infra")
        for server in (self.health_server, self.metrics_server):
            if server is not None:
                await server.stop()
        self._log.info("stopped")

    async def run_until_signal(self) -> int:
        """Run until SIGTERM or SIGINT, then shut down gracefully; return an exit code.

        0 after a clean shutdown; 1 when the manager stopped on its own (lost leadership,
        caches never synced, a failed runnable). A second signal exits the process at once.
        """
        code = 0
        async with anyio.create_task_group() as tg:

            async def on_signals() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    received = 0
                    async for signum in signals:
                        received += 1
                        if received > 1:
                            self._log.error("second signal: exiting without cleanup")
                            os._exit(1)
                        self._log.info(
                            "signal received; shutting down gracefully",
                            signal=signal.Signals(signum).name,
                            grace_seconds=self.options.graceful_shutdown_timeout,
                        )
                        run_scope.cancel()

            run_scope = anyio.CancelScope()
            tg.start_soon(on_signals)
            try:
                with run_scope:
                    await self.run()
            except LeaderElectionLost as err:
                self._log.error("leader election lost; exiting", error=str(err))
                code = 1
            except Exception as err:
                self._log.error("manager stopped", error=str(err), exc_info=err)
                code = 1
            tg.cancel_scope.cancel()
        return code


def run_async(main: Callable[[], Awaitable[T]]) -> T:
    """Run *main* on asyncio, with uvloop's event loop when it is installed."""
    use_uvloop = importlib.util.find_spec("uvloop") is not None
    return anyio.run(main, backend="asyncio", backend_options={"use_uvloop": use_uvloop})
