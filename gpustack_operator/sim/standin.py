"""The loop shared by the cluster's own stand-ins (nfd-master, kubelet, Kueue admission).

They are part of the simulated cluster, not API clients: a store subscription marks Nodes
dirty from inside each write (where nothing may be awaited), and one asyncio task reconciles
the dirty Nodes through the store, yielding to the server between Nodes. Subclasses say which
Nodes start dirty, which events mark which Nodes, and how one Node is reconciled.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Self

import structlog

from gpustack_operator.sim.errors import ApiError

if TYPE_CHECKING:
    from gpustack_operator.sim.server import SimServer

log = structlog.get_logger(__name__)


class StoreLoop(ABC):
    """A background task of a running :class:`SimServer` fed by a store subscription.

    Subclasses start it with :meth:`_launch` (subscribe, then create the task) and implement
    :meth:`on_event` and :meth:`_run`; stopping and the async context manager are shared.
    """

    name = "sim-stand-in"
    """Task name and log prefix."""

    def __init__(self, sim: SimServer) -> None:
        self.sim = sim
        self._wake = asyncio.Event()
        self._unsubscribe: Any = None
        self._task: asyncio.Task[None] | None = None

    @abstractmethod
    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        """Store callback: runs inside the write, so it may only note work and wake the loop."""

    @abstractmethod
    async def _run(self) -> None:
        """The loop: wait for :attr:`_wake`, then do the noted work."""

    @abstractmethod
    async def start(self) -> None:
        """Start the loop (through :meth:`_launch`); idempotent."""

    def _subscribe(self) -> None:
        self._unsubscribe = self.sim.store.subscribe(self.on_event)

    def _launch(self) -> None:
        self._wake.set()
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Unsubscribe and cancel the loop, waiting until it has ended."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class NodeStandIn(StoreLoop):
    """Reconciles dirty Nodes of a running :class:`SimServer` in one background task."""

    def __init__(self, sim: SimServer) -> None:
        super().__init__(sim)
        self._dirty: set[str] = set()

    @abstractmethod
    def initial_nodes(self) -> Iterable[str]:
        """Nodes to reconcile once at start (called after subscribing)."""

    @abstractmethod
    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        """Store callback: runs inside the write, so it may only :meth:`mark` Nodes."""

    @abstractmethod
    def reconcile(self, node_name: str) -> object:
        """Bring one Node in line (synchronous, so no other write interleaves)."""

    async def start(self) -> None:
        """Subscribe to the store and start the loop; idempotent."""
        if self._task is not None:
            return
        self._subscribe()
        for node in self.initial_nodes():
            self.mark(node)
        self._launch()

    def idle(self) -> bool:
        """True when no Node waits to be reconciled (tests poll this with a deadline)."""
        return not self._dirty

    def mark(self, node: str | None) -> None:
        """Queue *node* for reconciling; ``None`` and ``""`` are ignored."""
        if node:
            self._dirty.add(node)
            self._wake.set()

    def forget(self, node: str) -> None:
        """Drop *node* from the queue (it was deleted)."""
        self._dirty.discard(node)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                node = self._dirty.pop()
                try:
                    self.reconcile(node)
                except ApiError as exc:  # deleted or changed meanwhile: the next event retries
                    log.warning(f"{self.name} could not update node", node=node, error=str(exc))
                except Exception:  # a bug must not stop the stand-in for every other Node
                    log.exception(f"{self.name} failed", node=node)
                await asyncio.sleep(0)  # let the server answer requests between nodes
