"""Several simulated clusters in one process, joined by MultiKueue: a manager and its members.

Each member is a whole :class:`~gpustack_sim.cluster.cluster.SimCluster` (the operator's
worker and agents on its Nodes, Kueue's admission stand-in, the scheduler and, here, the Job
runner, so a dispatched Job runs to completion) with authentication and RBAC on, holding the
product's deploy/components/multikueue-member; the fleet fills in that component's token
Secret, as kube-controller-manager does. The manager is a simulated API server with Kueue's
admission stand-in and the MultiKueue stand-in (``standins/multikueue.py``), which reaches
each member over HTTPS with the kubeconfig of its MultiKueueCluster's Secret, as Kueue does.
The manager's MultiKueue objects are written by the product: the worker-gateway's MultiKueue
mode (``gpustack_operator.gateway.multikueue``) runs here against the members and the
manager, handing Kueue each member's component token (docs/multikueue.md).
"""

from __future__ import annotations

import base64
import secrets
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import yaml

from gpustack_operator.domain.nodeview import labels_of
from gpustack_operator.domain.profiles import local_queue_name
from gpustack_operator.gateway.cluster import ClusterSpec, RunnerSettings
from gpustack_operator.gateway.gateway import Gateway
from gpustack_operator.gateway.multikueue import ManagerSettings, MultiKueueSync
from gpustack_operator.gateway.pools import pool_entry
from gpustack_operator.runtime.informer import ReflectorSettings
from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.cluster.cluster import SimCluster
from gpustack_sim.standins.crds import multikueue_stand_in_crds, stand_in_crds
from gpustack_sim.standins.jobrunner import JobRunnerStandIn
from gpustack_sim.standins.kueue import KueueStandIn
from gpustack_sim.standins.multikueue import MultiKueueStandIn

__all__ = [
    "MANAGER_ORIGIN",
    "MEMBER_COMPONENT",
    "MemberInput",
    "MultiKueueFleet",
    "member_component",
    "queued_job",
]

MANAGER_ORIGIN = "gpustack-manager"
"""The manager's ``multiKueue.origin`` (the label on the copies it makes)."""
KUEUE_NAMESPACE = "kueue-system"
MANAGED_BY = "app.kubernetes.io/managed-by"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
ADMIN_TOKEN = "admin"
"""The members' administrator token (the operator's worker and agents in the simulator)."""
MEMBER_COMPONENT = (
    Path(__file__).resolve().parents[3]
    / "deploy"
    / "components"
    / "multikueue-member"
    / "member.yaml"
)
"""The member side the product ships (its ServiceAccount, ClusterRole and token Secret)."""


def queued_job(
    name: str,
    namespace: str,
    queue: str,
    requests: Mapping[str, str],
    pod_annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A suspended one-Pod Job for LocalQueue *queue*, devices asked as limit = request (the
    Job the MultiKueue tests and demo submit to the manager)."""
    limits = {k: v for k, v in requests.items() if "/" in k}
    resources: dict[str, Any] = {"requests": dict(requests)}
    if limits:
        resources["limits"] = limits
    template: dict[str, Any] = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "resources": resources}],
        }
    }
    if pod_annotations:
        template = {"metadata": {"annotations": dict(pod_annotations)}, **template}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": queue},
        },
        "spec": {"suspend": True, "template": template},
    }


@dataclass(frozen=True)
class MemberInput:
    """One member as the manager sees it: its name, the kubeconfig the product hands Kueue
    (the component's token) and its pools as the gateway reads them."""

    name: str
    kubeconfig: Path
    pools: Sequence[Mapping[str, Any]]


def member_component(path: Path = MEMBER_COMPONENT) -> list[dict[str, Any]]:
    """The objects of deploy/components/multikueue-member, as a member's overlay applies them."""
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


class MultiKueueFleet:
    """``async with MultiKueueFleet({"east": nodes, ...}, ["ml"]) as fleet:`` starts the
    members, waits for their chains, installs the member component in each, starts the
    manager and the product's MultiKueue mode, and waits for the manager chain it writes
    (module docstring)."""

    def __init__(
        self,
        members: Mapping[str, Sequence[Mapping[str, Any]]],
        namespaces: Sequence[str],
        *,
        run_seconds: float = 2.0,
        converge_timeout: float = 120.0,
        sync_interval: float = 0.2,
    ) -> None:
        self.namespaces = list(namespaces)
        self.authenticators = {name: TokenAuthenticator() for name in members}
        for auth in self.authenticators.values():
            auth.add(ADMIN_TOKEN, "admin", groups=["system:masters"])
        self.members = {
            name: SimCluster(
                nodes,
                self.namespaces,
                tls=True,
                authenticator=self.authenticators[name],
                token=ADMIN_TOKEN,
            )
            for name, nodes in members.items()
        }
        self.runners = {
            name: JobRunnerStandIn(cluster.sim, run_seconds)
            for name, cluster in self.members.items()
        }
        self.manager = SimServer(namespaces=[KUEUE_NAMESPACE, *self.namespaces], tls=True)
        self.manager_kueue = KueueStandIn(self.manager)
        self.multikueue = MultiKueueStandIn(self.manager, origin=MANAGER_ORIGIN)
        self.gateway = Gateway(
            RunnerSettings(
                probe_interval=0.2,
                request_timeout=5.0,
                reflector=ReflectorSettings(min_watch_duration=0.0),
            )
        )
        self.sync: MultiKueueSync | None = None
        """The product's MultiKueue mode, once started."""
        self._sync_interval = sync_interval
        self._converge_timeout = converge_timeout
        self._stack: AsyncExitStack | None = None
        self.inputs: list[MemberInput] = []
        self.kubeconfig: Path | None = None
        """The manager's kubeconfig (an administrator's), once started."""

    def _install_member_component(self, name: str, folder: Path) -> Path:
        """Create the component in member *name*, fill in its token Secret (the control
        plane's token controller's part) and return the kubeconfig Kueue gets: that token,
        the member's CA embedded."""
        sim = self.members[name].sim
        objects = member_component()
        for obj in objects:
            namespace = (obj.get("metadata") or {}).get("namespace")
            if namespace and sim.store.get("v1", "Namespace", namespace) is None:
                sim.store.create(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
                )
            sim.store.create(obj)
        (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
        (secret,) = [o for o in objects if o["kind"] == "Secret"]
        namespace = account["metadata"]["namespace"]
        token = secrets.token_urlsafe(32)
        self.authenticators[name].add(
            token, f"system:serviceaccount:{namespace}:{account['metadata']['name']}"
        )
        stored = sim.store.get("v1", "Secret", secret["metadata"]["name"], namespace)
        assert stored is not None
        stored["data"] = {"token": base64.b64encode(token.encode()).decode()}
        sim.store.update(stored)
        return sim.write_kubeconfig(folder / f"{name}-multikueue.kubeconfig", token=token)

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
                MemberInput(name, self._install_member_component(name, tmp), self.pools(name))
                for name in self.members
            ]
            self.manager.load_crds([*stand_in_crds(), *multikueue_stand_in_crds()])
            await stack.enter_async_context(self.manager)
            self.kubeconfig = self.manager.write_kubeconfig(tmp / "manager.kubeconfig")
            await stack.enter_async_context(self.manager_kueue)
            await stack.enter_async_context(self.multikueue)
            for name, cluster in self.members.items():
                assert cluster.kubeconfig is not None
                self.gateway.add(ClusterSpec(name, cluster.kubeconfig))
            self.sync = MultiKueueSync(
                self.gateway,
                ManagerSettings(
                    manager=ClusterSpec("manager", self.kubeconfig),
                    member_kubeconfigs={
                        m.name: ClusterSpec(m.name, m.kubeconfig) for m in self.inputs
                    },
                    sync_interval=self._sync_interval,
                    request_timeout=5.0,
                ),
            )
            tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tasks.cancel_scope.cancel)
            tasks.start_soon(self.gateway.run)
            tasks.start_soon(self.sync.run)
            await self._wait_for_the_manager_chain(self._converge_timeout)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def _wait_for_the_manager_chain(self, seconds: float) -> None:
        """Until the mode wrote a ClusterQueue per distinct pool of the members, each with a
        LocalQueue in every namespace of the fleet."""
        pools = {str(p["name"]) for m in self.inputs for p in m.pools}
        wanted = {(ns, local_queue_name(pool)) for pool in pools for ns in self.namespaces}
        deadline = anyio.current_time() + seconds
        while True:
            store = self.manager.store
            queues = {q["metadata"]["name"] for q in store.list(KUEUE_API, "ClusterQueue")}
            local = {
                (q["metadata"]["namespace"], q["metadata"]["name"])
                for q in store.list(KUEUE_API, "LocalQueue")
            }
            if queues == pools and wanted <= local:
                return
            if anyio.current_time() > deadline:
                error = self.sync.last_error if self.sync is not None else ""
                raise TimeoutError(
                    f"the MultiKueue mode did not write the manager chain in {seconds:.0f} s: "
                    f"ClusterQueues {sorted(queues)}, wanted {sorted(pools)}; "
                    f"last error: {error or 'none'}"
                )
            await anyio.sleep(0.05)

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
            for queue in sim.store.list(KUEUE_API, "ClusterQueue")
            if labels_of(queue).get(MANAGED_BY) == "gpustack-operator"
        ]
