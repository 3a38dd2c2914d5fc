"""One upstream cluster: its connection, its informers (one runtime Manager) and its health.

A :class:`ClusterRunner` connects with backoff, discovers the Kueue version the cluster serves
(v1beta2 preferred, v1beta1 accepted), then runs a :class:`~gpustack_operator.runtime.manager.
Manager` with one informer per watched kind, restricted to objects the operator manages. The
informers retry forever on their own; a probe (``GET /apis/kueue.x-k8s.io`` every
``probe_interval`` seconds) turns what they cannot report into a status: ``Unreachable`` with
the last error, ``Ready`` with the time the data was last confirmed current. While a cluster is
unreachable its last known objects stay served. Nothing here affects other clusters.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import anyio
import structlog

from gpustack_operator.domain.chain.kueue import KUEUE_GROUP, KueueVersion
from gpustack_operator.gateway.hub import Event, EventType, Hub
from gpustack_operator.gateway.kinds import (
    KIND_NAMES,
    MANAGED_SELECTOR,
    pick_version,
    watched_resources,
)
from gpustack_operator.gateway.metrics import CLUSTERS
from gpustack_operator.gateway.pools import pool_entry
from gpustack_operator.gateway.sharing import host_nodes
from gpustack_operator.kubeconfig import connect as connect_checked
from gpustack_operator.runtime.backoff import Backoff, BackoffPolicy
from gpustack_operator.runtime.cache import object_key
from gpustack_operator.runtime.client import ApiError, Client
from gpustack_operator.runtime.informer import HandlerFuncs, Informer, ReflectorSettings
from gpustack_operator.runtime.manager import Manager, ManagerOptions

__all__ = ["ClusterRunner", "ClusterSpec", "ClusterStatus", "RunnerSettings"]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]


class ClusterStatus(StrEnum):
    CONNECTING = "Connecting"
    """Not connected yet and no attempt failed."""
    SYNCING = "Syncing"
    """Reachable; the first LIST of some kind has not completed."""
    READY = "Ready"
    """Reachable and every cache synced."""
    UNREACHABLE = "Unreachable"
    """The last connection attempt or probe failed (``lastError`` says why)."""


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster: its kubeconfig (None: KUBECONFIG, ~/.kube/config, in-cluster) and context."""

    name: str
    kubeconfig: Path | None = None
    context: str | None = None


@dataclass(frozen=True)
class RunnerSettings:
    """Timings of the per-cluster loops; tests shrink them."""

    probe_interval: float = 10.0
    request_timeout: float = 15.0
    connect_backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    reflector: ReflectorSettings | None = None


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KueueNotServed(ApiError):
    """The cluster serves neither kueue.x-k8s.io/v1beta2 nor v1beta1."""


class ClusterRunner:
    """Runs one cluster until cancelled and publishes its changes to the hub."""

    def __init__(
        self,
        spec: ClusterSpec,
        hub: Hub,
        settings: RunnerSettings | None = None,
        *,
        owned_kubeconfig: Path | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.hub = hub
        self.settings = settings or RunnerSettings()
        self.owned_kubeconfig = owned_kubeconfig
        """A kubeconfig file the gateway wrote for this cluster (registration); deleted with it."""
        self.status = ClusterStatus.CONNECTING
        self.last_error = ""
        self.last_sync_time: str | None = None
        self.server = ""
        self.kueue_version: KueueVersion | None = None
        self.settled = anyio.Event()
        """Set once the caches synced or an attempt failed: nothing is pending (readiness)."""
        self.removed = False
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()
        self._informers: dict[str, Informer] = {}
        self._published: JSON | None = None
        self._publish_pending = False
        self._log = log.bind(cluster=spec.name)

    # --- views ------------------------------------------------------------------------------

    def objects(self, plural: str) -> list[JSON]:
        """Cached objects of one kind, by namespace and name ([] before the first sync)."""
        informer = self._informers.get(plural)
        if informer is None:
            return []
        return sorted(informer.indexer.list(), key=object_key)

    def pools(self) -> list[JSON]:
        return [self._pool(cq) for cq in self.objects("clusterqueues")]

    def _pool(self, cluster_queue: JSON) -> JSON:
        """The pool of a ClusterQueue, with the host nodes its flavors cover in a vCluster
        tenant (docs/worker-gateway.md, "Tenants")."""
        entry = pool_entry(self.name, cluster_queue)
        informer = self._informers.get("resourceflavors")
        flavors = [informer.indexer.get(name) for name in entry["flavors"]] if informer else []
        covered = host_nodes(f for f in flavors if f is not None)
        if covered:
            entry["hostNodes"] = covered
        return entry

    def counts(self) -> dict[str, int]:
        return {plural: len(self.objects(plural)) for plural in KIND_NAMES}

    def synced(self) -> bool:
        return bool(self._informers) and all(i.has_synced for i in self._informers.values())

    def entry(self) -> JSON:
        """What ``GET /apis/v1/clusters`` shows for this cluster."""
        return {
            "name": self.name,
            "status": self.status.value,
            "server": self.server,
            "context": self.spec.context,
            "kueueVersion": self.kueue_version.value if self.kueue_version else None,
            "lastError": self.last_error or None,
            "lastSyncTime": self.last_sync_time,
            "counts": self.counts(),
        }

    # --- running ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect (with backoff), then watch until cancelled; :attr:`done` is set at the end.

        The informers retry on their own; should the watch still fail unexpectedly, the
        cluster is reported unreachable, its objects are withdrawn (DELETED events) and it is
        connected afresh after a backoff, never taking the gateway down.
        """
        CLUSTERS.labels(status=self.status.value).inc()
        backoff = Backoff(self.settings.connect_backoff)
        try:
            with self.scope:
                while True:
                    client = await self._connect(backoff)
                    try:
                        await self._watch(client)
                    except Exception as exc:
                        self._log.exception("cluster_watch_failed", error=str(exc))
                        self._unreachable(exc)
                        self._forget_objects()
                    finally:
                        with anyio.CancelScope(shield=True):
                            await client.close()
                    await anyio.sleep(backoff.next())
        finally:
            CLUSTERS.labels(status=self.status.value).dec()
            self.done.set()

    async def _connect(self, backoff: Backoff) -> Client:
        while True:
            client: Client | None = None
            try:
                client = await connect_checked(
                    self.spec.kubeconfig,
                    self.spec.context,
                    timeout=self.settings.request_timeout,
                )
                self.server = client.host
                self.kueue_version = await self._discover(client)
                backoff.reset()
                return client
            except Exception as exc:  # bad kubeconfig, refused, no Kueue, ...: all retried
                if client is not None:
                    with anyio.CancelScope(shield=True):
                        await client.close()
                delay = backoff.next()
                self._unreachable(exc)
                self._log.warning("cluster_connect_failed", error=str(exc), delay=round(delay, 3))
            await anyio.sleep(delay)

    async def _discover(self, client: Client) -> KueueVersion:
        with anyio.fail_after(self.settings.request_timeout):
            served = await client.served_versions(KUEUE_GROUP)
        version = pick_version(served)
        if version is None:
            raise KueueNotServed(
                f"the cluster serves no Kueue API ({KUEUE_GROUP} v1beta2 or v1beta1; served: "
                f"{', '.join(served) or 'none'}): install Kueue there",
                reason="KueueNotServed",
            )
        return version

    async def _watch(self, client: Client) -> None:
        assert self.kueue_version is not None
        manager = Manager(
            client,
            ManagerOptions(
                component=f"worker-gateway/{self.name}",
                health_probe_bind_address="0",
                metrics_bind_address="0",
                # An unreachable cluster must never stop the gateway: wait for sync forever.
                cache_sync_timeout=math.inf,
                reflector=self.settings.reflector,
            ),
        )
        for plural, resource in watched_resources(self.kueue_version).items():
            informer = manager.informer(resource, label_selector=MANAGED_SELECTOR)
            informer.add_event_handler(self._handler(plural))
            self._informers[plural] = informer
        self._set_status(ClusterStatus.SYNCING)
        self._log.info("cluster_connected", server=self.server, kueue=self.kueue_version.value)
        async with anyio.create_task_group() as tg:
            tg.start_soon(manager.run, name=f"manager {self.name}")
            tg.start_soon(self._probe_loop, client)
            await manager.synced.wait()
            self._reachable()

    async def _probe_loop(self, client: Client) -> None:
        while True:
            await anyio.sleep(self.settings.probe_interval)
            try:
                await self._discover(client)
            except (ApiError, TimeoutError) as exc:
                self._unreachable(exc)
            except Exception as exc:
                self._log.exception("cluster_probe_failed")
                self._unreachable(exc)
            else:
                self._reachable()

    # --- status -----------------------------------------------------------------------------

    def _reachable(self) -> None:
        if self.synced():
            self.settled.set()
            self.last_sync_time = _now()
            self.last_error = ""
            self._set_status(ClusterStatus.READY)
        else:
            self._set_status(ClusterStatus.SYNCING)

    def _unreachable(self, exc: BaseException) -> None:
        message = str(exc) or type(exc).__name__
        if self.status is not ClusterStatus.UNREACHABLE or message != self.last_error:
            self._log.warning("cluster_unreachable", error=message)
        self.last_error = message
        self.settled.set()
        self._set_status(ClusterStatus.UNREACHABLE)

    def _set_status(self, status: ClusterStatus) -> None:
        if status is not self.status:
            CLUSTERS.labels(status=self.status.value).dec()
            CLUSTERS.labels(status=status.value).inc()
            self.status = status
        self._changed()

    def _changed(self) -> None:
        """Publish the cluster entry once per loop turn, however many changes came in it."""
        if self._publish_pending or self.removed:
            return
        self._publish_pending = True
        asyncio.get_running_loop().call_soon(self._publish_entry)

    def _publish_entry(self) -> None:
        self._publish_pending = False
        if self.removed:
            return
        entry = self.entry()
        # lastSyncTime moves on every probe; a change of it alone is not worth an event.
        comparable = {**entry, "lastSyncTime": None}
        if comparable == self._published:
            return
        self._published = comparable
        self.hub.publish(Event("MODIFIED", "clusters", self.name, entry))

    # --- object events ----------------------------------------------------------------------

    def _handler(self, plural: str) -> HandlerFuncs:
        def publish(kind: EventType, obj: JSON) -> None:
            if not self.removed:
                self.hub.publish(Event(kind, plural, self.name, obj))

        def pools(kind: EventType, old: JSON | None, new: JSON) -> None:
            if plural != "clusterqueues" or self.removed:
                return
            entry = self._pool(new)
            if old is not None and self._pool(old) == entry:
                return
            self.hub.publish(Event(kind, "pools", self.name, entry))

        def on_add(obj: JSON) -> None:
            publish("ADDED", obj)
            pools("ADDED", None, obj)
            self._changed()

        def on_update(old: JSON, new: JSON) -> None:
            if old == new:  # a re-LIST or resync delivering what we had
                return
            publish("MODIFIED", new)
            pools("MODIFIED", old, new)

        def on_delete(obj: JSON) -> None:
            publish("DELETED", obj)
            pools("DELETED", None, obj)
            self._changed()

        return HandlerFuncs(add=on_add, update=on_update, delete=on_delete)

    def _forget_objects(self) -> None:
        """Withdraw every cached object (the caches are about to be rebuilt from scratch)."""
        for event in self.removal_events()[:-1]:
            self.hub.publish(event)
        self._informers.clear()
        self._changed()

    def removal_events(self) -> list[Event]:
        """A DELETED for every object of this cluster, then for its pools and itself."""
        events = [
            Event("DELETED", plural, self.name, obj)
            for plural in KIND_NAMES
            for obj in self.objects(plural)
        ]
        events += [Event("DELETED", "pools", self.name, pool) for pool in self.pools()]
        events.append(Event("DELETED", "clusters", self.name, self.entry()))
        return events
