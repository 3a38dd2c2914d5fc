"""The loop shared by the cluster's own stand-ins (nfd-master, kubelet, Kueue admission,
ServiceAccounts, Pod lifecycle).

They are part of the simulated cluster, not API clients: a store subscription marks keys
(Nodes, namespaces, Pods) dirty from inside each write (where nothing may be awaited), and one
asyncio task reconciles the dirty keys through the store, yielding to the server between
keys. Subclasses say which keys start dirty, which events mark which keys, and how one key is
reconciled.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

import structlog

from gpustack_sim.apiserver.errors import ApiError

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

log = structlog.get_logger(__name__)

K = TypeVar("K", str, tuple[str, str])


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

    async def start(self) -> None:
        """Subscribe to the store and start the loop; idempotent. A stand-in that reads
        something once first does it in :meth:`_before_start`."""
        if self._task is not None:
            return
        self._before_start()
        self._subscribe()
        self._launch()

    def _before_start(self) -> None:  # noqa: B027 - a hook; most stand-ins need none
        """What the stand-in reads once before it subscribes (nothing by default)."""

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


class KeyedStandIn(StoreLoop, Generic[K]):
    """Reconciles dirty keys (Node names, namespaces, Pods) of a running :class:`SimServer`
    in one background task, yielding to the server between keys."""

    noun = "object"
    """What a key names, for the log."""

    def __init__(self, sim: SimServer) -> None:
        super().__init__(sim)
        self._dirty: set[K] = set()

    @abstractmethod
    def initial_keys(self) -> Iterable[K]:
        """Keys to reconcile once at start (called after subscribing)."""

    @abstractmethod
    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        """Store callback: runs inside the write, so it may only :meth:`mark` keys."""

    @abstractmethod
    def reconcile(self, key: K) -> object:
        """Bring one key in line (synchronous, so no other write interleaves)."""

    async def start(self) -> None:
        """Subscribe to the store and start the loop; idempotent."""
        if self._task is not None:
            return
        self._subscribe()
        for key in self.initial_keys():
            self.mark(key)
        self._launch()

    def idle(self) -> bool:
        """True when no key waits to be reconciled (tests poll this with a deadline)."""
        return not self._dirty

    def mark(self, key: K | None) -> None:
        """Queue *key* for reconciling; ``None`` and empty keys are ignored."""
        if key:
            self._dirty.add(key)
            self._wake.set()

    def forget(self, key: K) -> None:
        """Drop *key* from the queue (its object was deleted)."""
        self._dirty.discard(key)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                key = self._dirty.pop()
                try:
                    self.reconcile(key)
                except ApiError as exc:  # deleted or changed meanwhile: the next event retries
                    log.warning(f"{self.name} could not write", **{self.noun: key}, error=str(exc))
                except Exception:  # a bug must not stop the stand-in for every other key
                    log.exception(f"{self.name} failed", **{self.noun: key})
                await asyncio.sleep(0)  # let the server answer requests between keys


class NodeStandIn(KeyedStandIn[str]):
    """A stand-in keyed by Node name (the NFD-master and kubelet stand-ins)."""

    noun = "node"

    @abstractmethod
    def initial_nodes(self) -> Iterable[str]:
        """Nodes to reconcile once at start (called after subscribing)."""

    def initial_keys(self) -> Iterable[str]:
        return self.initial_nodes()
