"""Several simulated clusters in one process, joined by MultiKueue: a manager and its members.

Each member is a whole :class:`~gpustack_sim.cluster.cluster.SimCluster` (the operator's
worker and agents on its Nodes, Kueue's admission stand-in, the scheduler and, here, the Job
runner, so a dispatched Job runs to completion); the manager is a simulated API server with
Kueue's admission stand-in and the MultiKueue stand-in (``standins/multikueue.py``), which
reaches each member over HTTPS with the kubeconfig of its MultiKueueCluster's Secret, as
Kueue does. The manager's MultiKueue objects come from *manager_objects*, a function of the
members (name, kubeconfig, pools as the gateway reads them, namespaces) that returns the
objects to create: the product's generator, or the tests' stand-in for it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from gpustack_operator.domain.nodeview import labels_of
from gpustack_operator.gateway.pools import pool_entry
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.cluster.cluster import SimCluster
from gpustack_sim.standins.crds import multikueue_stand_in_crds, stand_in_crds
from gpustack_sim.standins.jobrunner import JobRunnerStandIn
from gpustack_sim.standins.kueue import KueueStandIn
from gpustack_sim.standins.multikueue import MultiKueueStandIn

__all__ = ["MANAGER_ORIGIN", "MemberInput", "MultiKueueFleet"]

MANAGER_ORIGIN = "gpustack-manager"
"""The manager's ``multiKueue.origin`` (the label on the copies it makes)."""
KUEUE_NAMESPACE = "kueue-system"
MANAGED_BY = "app.kubernetes.io/managed-by"


@dataclass(frozen=True)
class MemberInput:
    """What a manager generator reads of one member (the gateway's view of it)."""

    name: str
    kubeconfig: str
    pools: Sequence[Mapping[str, Any]]
    namespaces: Sequence[str]


ManagerObjects = Callable[[Sequence[MemberInput]], list[dict[str, Any]]]


class MultiKueueFleet:
    """``async with MultiKueueFleet({"east": nodes, ...}, ["ml"], generator) as fleet:``
    starts the members, waits for their chains, then starts the manager with the
    generator's objects for them (module docstring)."""

    def __init__(
        self,
        members: Mapping[str, Sequence[Mapping[str, Any]]],
        namespaces: Sequence[str],
        manager_objects: ManagerObjects,
        *,
        run_seconds: float = 2.0,
        converge_timeout: float = 120.0,
    ) -> None:
        self.namespaces = list(namespaces)
        self.members = {
            name: SimCluster(nodes, self.namespaces, tls=True) for name, nodes in members.items()
        }
        self.runners = {
            name: JobRunnerStandIn(cluster.sim, run_seconds)
            for name, cluster in self.members.items()
        }
        self.manager = SimServer(namespaces=[KUEUE_NAMESPACE, *self.namespaces], tls=True)
        self.manager_kueue = KueueStandIn(self.manager)
        self.multikueue = MultiKueueStandIn(self.manager, origin=MANAGER_ORIGIN)
        self._generator = manager_objects
        self._converge_timeout = converge_timeout
        self._stack: AsyncExitStack | None = None
        self.inputs: list[MemberInput] = []
        self.kubeconfig: Path | None = None
        """The manager's kubeconfig (an administrator's), once started."""

    async def __aenter__(self) -> MultiKueueFleet:
        stack = AsyncExitStack()
        await stack.__aenter__()
        self._stack = stack
        try:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpustack-mk-")))
            for name, cluster in self.members.items():
                await stack.enter_async_context(cluster)
                await stack.enter_async_context(self.runners[name])
            for cluster in self.members.values():
                await cluster.converge(self._converge_timeout)
            self.inputs = [
                MemberInput(
                    name,
                    cluster.sim.write_kubeconfig(tmp / f"{name}.kubeconfig").read_text(),
                    self.pools(name),
                    self.namespaces,
                )
                for name, cluster in self.members.items()
            ]
            self.manager.load_crds([*stand_in_crds(), *multikueue_stand_in_crds()])
            await stack.enter_async_context(self.manager)
            self.kubeconfig = self.manager.write_kubeconfig(tmp / "manager.kubeconfig")
            for obj in self._generator(self.inputs):
                self.manager.store.create(obj)
            await stack.enter_async_context(self.manager_kueue)
            await stack.enter_async_context(self.multikueue)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    def pools(self, member: str) -> list[dict[str, Any]]:
        """*member*'s pools as the gateway reads them (one per operator-made ClusterQueue)."""
        sim = self.members[member].sim
        return [
            pool_entry(member, queue)
            for queue in sim.store.list("kueue.x-k8s.io/v1beta2", "ClusterQueue")
            if labels_of(queue).get(MANAGED_BY) == "gpustack-operator"
        ]
