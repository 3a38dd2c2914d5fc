"""One device-manager agent per simulated node, as the DaemonSet would run them.

Every Node carrying ``sim.gpustack.ai/devices`` gets a :class:`DeviceManagerAgent` with the
simulated detector, including Nodes created or annotated later. Agents are packed onto shared
runtime managers (each with its own HTTP client): a real agent is a process per node, but
thousands of processes would measure the simulator's host, not the operator. A client keeps at
most ``per_manager`` agents, two watches each (the client's connection pool has no limit,
so a watch never waits for a connection).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio
import structlog

from gpustack_operator.devicemanager.agent import DeviceManagerAgent
from gpustack_operator.devicemanager.detection import DetectionConfig
from gpustack_operator.domain.node.simdevices import SIM_DEVICES_ANNOTATION
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.manager import Manager, ManagerOptions
from gpustack_sim.apiserver.server import SimServer

log = structlog.get_logger(__name__)

DEFAULT_PER_MANAGER = 32


def has_sim_devices(node: dict[str, Any]) -> bool:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return SIM_DEVICES_ANNOTATION in annotations


def _idle(manager: Manager) -> bool:
    return all(
        len(c.queue) == 0 and not c.queue.processing() and c.queue.num_waiting() == 0
        for c in manager.controllers
    )


class AgentFleet:
    """Starts and runs the agents; :meth:`run` until cancelled."""

    def __init__(
        self,
        sim: SimServer,
        kubeconfig: Path,
        config: DetectionConfig,
        *,
        system_namespace: str,
        monitor_period: float = 30.0,
        per_manager: int = DEFAULT_PER_MANAGER,
    ) -> None:
        self.sim = sim
        self.kubeconfig = kubeconfig
        self.config = config
        self.system_namespace = system_namespace
        self.monitor_period = monitor_period
        self.per_manager = max(1, per_manager)
        self.agents: dict[str, DeviceManagerAgent] = {}
        self.managers: list[Manager] = []
        self.failures: list[str] = []
        self._pending: list[str] = []
        self._wake = asyncio.Event()
        self._starting = 0

    def _on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        """Store callback (inside the write): queue a node that needs an agent."""
        if obj.get("kind") != "Node" or obj.get("apiVersion") != "v1" or event_type == "DELETED":
            return
        name = (obj.get("metadata") or {}).get("name")
        if isinstance(name, str) and has_sim_devices(obj):
            self._want(name)

    def _want(self, name: str) -> None:
        if name not in self.agents and name not in self._pending:
            self._pending.append(name)
            self._wake.set()

    def idle(self) -> bool:
        """No agent waits to start and no agent has work queued (tests and ``sim`` poll it)."""
        return (
            not self._pending
            and self._starting == 0
            and all(m.synced.is_set() and _idle(m) for m in self.managers)
        )

    async def run(self) -> None:
        unsubscribe = self.sim.store.subscribe(self._on_event)
        try:
            for node in self.sim.store.list("v1", "Node"):
                if has_sim_devices(node):
                    self._want(node["metadata"]["name"])
            async with anyio.create_task_group() as tg:
                while True:
                    await self._wake.wait()
                    self._wake.clear()
                    while self._pending:
                        batch = self._pending[: self.per_manager]
                        del self._pending[: len(batch)]
                        self._starting += 1
                        tg.start_soon(self._run_manager, batch)
        finally:
            unsubscribe()

    async def _run_manager(self, names: list[str]) -> None:
        client: Client | None = None
        registered = False
        try:
            client = await Client.connect(self.kubeconfig)
            manager = Manager(
                client,
                ManagerOptions(
                    component="gpustack-device-manager",
                    health_probe_bind_address="0",
                    metrics_bind_address="0",
                    graceful_shutdown_timeout=2.0,
                ),
            )
            for name in names:
                self.agents[name] = DeviceManagerAgent(
                    manager,
                    self.config,
                    node_name=name,
                    system_namespace=self.system_namespace,
                    monitor_period=self.monitor_period,
                    simulated=True,
                    controller_name=f"device-manager-{name}",
                )
            self.managers.append(manager)
            registered = True
            self._starting -= 1
            await manager.run()
        except Exception as exc:  # one failed group must not stop the cluster; report it
            reason = f"device-manager agents for {', '.join(names)} stopped: {exc!r}"
            self.failures.append(reason)
            log.error("sim: device-manager agents failed", nodes=names, error=repr(exc))
            if not registered:
                self._starting -= 1
        finally:
            if client is not None:
                with anyio.CancelScope(shield=True):
                    await client.close()
