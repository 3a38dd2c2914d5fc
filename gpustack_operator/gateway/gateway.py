"""The set of upstream clusters, and the aggregated views the API serves.

Clusters are added at start-up (flags, config file) and, when registration is allowed, at run
time once they pass the registration checks (:mod:`.registration`). Each runs in its own cancel
scope inside the gateway's task group, so removing one (or one failing) leaves the others
alone. Removal is atomic for watchers: the cluster stops publishing, a DELETED is published
for each of its objects, pools and itself, and only then are its informers stopped.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from gpustack_operator.gateway.cluster import ClusterRunner, ClusterSpec, RunnerSettings
from gpustack_operator.gateway.hub import Event, Hub
from gpustack_operator.gateway.kinds import KIND_NAMES
from gpustack_operator.gateway.registration import MemberFacts, check_member

__all__ = ["ClusterExists", "Gateway", "UnknownCluster"]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
TOPICS = ("clusters", "pools", *KIND_NAMES)


class ClusterExists(ValueError):
    """A cluster of that name is already served."""


class UnknownCluster(KeyError):
    """No cluster of that name is served."""


class Gateway:
    """Holds the :class:`ClusterRunner` of every cluster; see the module docstring."""

    def __init__(self, settings: RunnerSettings | None = None, *, watch_buffer: int = 1024) -> None:
        self.settings = settings or RunnerSettings()
        self.hub = Hub(watch_buffer)
        self.clusters: dict[str, ClusterRunner] = {}
        self._task_group: TaskGroup | None = None
        self._pending: list[ClusterRunner] = []
        self._tmpdir: Path | None = None
        self.started = anyio.Event()

    # --- running ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Run every cluster until cancelled; then end all watch streams."""
        try:
            async with anyio.create_task_group() as tg:
                self._task_group = tg
                for runner in self._pending:
                    tg.start_soon(runner.run, name=f"cluster {runner.name}")
                self._pending.clear()
                self.started.set()
                await anyio.sleep_forever()
        finally:
            self._task_group = None
            self.hub.close()
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None

    def add(self, spec: ClusterSpec, *, owned_kubeconfig: Path | None = None) -> ClusterRunner:
        """Serve one more cluster; *owned_kubeconfig* (a file :meth:`register` wrote) is
        deleted with it."""
        if spec.name in self.clusters:
            raise ClusterExists(f"cluster {spec.name!r} is already registered")
        runner = ClusterRunner(spec, self.hub, self.settings, owned_kubeconfig=owned_kubeconfig)
        self.clusters[spec.name] = runner
        self.hub.publish(Event("ADDED", "clusters", spec.name, runner.entry()))
        if self._task_group is None:
            self._pending.append(runner)
        else:
            self._task_group.start_soon(runner.run, name=f"cluster {spec.name}")
        log.info("cluster_added", cluster=spec.name, context=spec.context)
        return runner

    async def register(
        self, name: str, context: str | None, kubeconfig_text: str
    ) -> tuple[ClusterRunner, MemberFacts]:
        """Serve a cluster posted at run time, once it passed the registration checks
        (:func:`~.registration.check_member`, through kr8s): its kubeconfig goes to a private
        file, deleted if the checks fail. Raises :class:`ClusterExists` or
        :class:`~.registration.MemberRefused`."""
        if name in self.clusters:
            raise ClusterExists(f"cluster {name!r} is already registered")
        path = self._write_kubeconfig(name, kubeconfig_text)
        try:
            facts = await check_member(path, context, within=self.settings.request_timeout)
            # Checked again: another registration of the name may have finished meanwhile.
            runner = self.add(ClusterSpec(name, path, context), owned_kubeconfig=path)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        runner.server = facts.server
        runner.kueue_version = facts.kueue_version
        log.info(
            "cluster_registered",
            cluster=name,
            server=facts.server,
            server_version=facts.server_version,
            kueue=facts.kueue_version.value,
        )
        return runner, facts

    async def remove(self, name: str) -> None:
        """Stop serving *name*: watchers get a DELETED for everything it had."""
        runner = self.clusters.get(name)
        if runner is None:
            raise UnknownCluster(name)
        # No await until the cluster is gone from every view: watchers see one atomic removal.
        runner.removed = True
        for event in runner.removal_events():
            self.hub.publish(event)
        self.hub.close_cluster(name)
        del self.clusters[name]
        if runner in self._pending:
            self._pending.remove(runner)
        else:
            runner.scope.cancel()
            await runner.done.wait()
        if runner.owned_kubeconfig is not None:
            try:
                runner.owned_kubeconfig.unlink(missing_ok=True)
            except OSError as exc:  # the whole directory is removed when the gateway stops
                log.warning(
                    "cannot delete a removed cluster's kubeconfig",
                    path=str(runner.owned_kubeconfig),
                    error=str(exc),
                )
        log.info("cluster_removed", cluster=name)

    def _write_kubeconfig(self, name: str, text: str) -> Path:
        """A 0600 file in a 0700 directory the gateway owns and deletes on exit."""
        if self._tmpdir is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="gpustack-worker-gateway-"))
        fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=".kubeconfig", dir=self._tmpdir)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return Path(path)

    # --- views ------------------------------------------------------------------------------

    def runner(self, name: str) -> ClusterRunner:
        """The runner of cluster *name*; :class:`UnknownCluster` if none is served."""
        runner = self.clusters.get(name)
        if runner is None:
            raise UnknownCluster(name)
        return runner

    def cluster_entries(self) -> list[JSON]:
        """Every cluster's status entry, by name."""
        return [self.clusters[name].entry() for name in sorted(self.clusters)]

    def pools(self, cluster: str | None = None) -> list[JSON]:
        """The pools (one per ClusterQueue) of *cluster*, or of every cluster."""
        names = [cluster] if cluster is not None else sorted(self.clusters)
        return [pool for name in names for pool in self.runner(name).pools()]

    def snapshot(self, topic: str, cluster: str | None = None) -> list[Event]:
        """ADDED events for everything *topic* holds now (a watch's initial state)."""
        if topic == "clusters":
            entries = self.cluster_entries()
            if cluster is not None:
                entries = [e for e in entries if e["name"] == cluster]
            return [Event("ADDED", topic, e["name"], e) for e in entries]
        if topic == "pools":
            return [Event("ADDED", topic, p["cluster"], p) for p in self.pools(cluster)]
        names = [cluster] if cluster is not None else sorted(self.clusters)
        return [
            Event("ADDED", topic, name, obj)
            for name in names
            for obj in self.runner(name).objects(topic)
        ]

    def settled(self) -> bool:
        """Every cluster synced once or failed at least once (readiness: nothing pending)."""
        return all(r.settled.is_set() for r in self.clusters.values())
