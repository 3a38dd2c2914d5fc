"""``SimCluster``: the simulated API server with everything around the operator, running.

Seeded with Node manifests (the format ``plan`` reads) and namespaces, it runs the NFD-master
stand-in, the kubelet stand-in, one device-manager agent per node with simulated devices and,
unless told otherwise, the worker, all on the current event loop. :meth:`SimCluster.expected`
is what ``plan`` computes for the same input, :meth:`SimCluster.converge` waits until the
server holds exactly that, and stays so.

The input is kept as a person states it (``nodes``/``namespaces``): tests change it with
:meth:`add_node`, :meth:`edit_node`, :meth:`delete_node` and the namespace methods, which
write the same change to the server (directly to its store, as a person's kubectl would,
untouched by injected faults), so ``expected()`` always follows.
"""

from __future__ import annotations

import copy
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import anyio
import structlog
from anyio.abc import TaskGroup

from gpustack_operator.apis import kueue_resources
from gpustack_operator.devicemanager.detection import DetectionConfig
from gpustack_operator.domain.chain.declaredpools import is_capi_infrastructure
from gpustack_operator.domain.chain.explain import explain_nodes
from gpustack_operator.domain.chain.tenancy import tenant_fleet
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.availability import node_availability
from gpustack_operator.domain.node.nodeprofiles import is_managed
from gpustack_operator.domain.nodeview import annotations_of, name_of
from gpustack_operator.domain.plan.desired import DesiredState
from gpustack_operator.domain.plan.plan import plan_state, tenant_explanations, with_availability
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.manager import Manager, ManagerOptions
from gpustack_operator.wiring import (
    Worker,
    WorkerConfig,
    detect_tenancy_at_start,
    detect_topology_at_start,
    new_worker_manager,
    serves_dra,
    setup_worker,
)
from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.cluster.agents import AgentFleet
from gpustack_sim.cluster.chain import differences, read_chain, read_chain_from_store
from gpustack_sim.cluster.writelog import WriteLog
from gpustack_sim.standins.crds import is_stand_in, stand_in_crds
from gpustack_sim.standins.kubelet import SimKubelet
from gpustack_sim.standins.kueue import KueueStandIn
from gpustack_sim.standins.nfdmaster import NfdMaster
from gpustack_sim.standins.provisioning import PROVISIONED_ANNOTATION, ProvisioningStandIn
from gpustack_sim.standins.provisioningcheck import ProvisioningCheckStandIn
from gpustack_sim.standins.scheduler import SchedulerStandIn

log = structlog.get_logger(__name__)

DUMPED_DELETING_FINALIZER = "sim.gpustack.ai/dumped-deleting"
"""Holds a Node the dump shows being deleted but without a finalizer (which a real server
never shows) in its deleting state."""
SERVER_SET_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")
Namespace = str | Mapping[str, Any]


class NotConverged(Exception):
    """The cluster did not reach the planned chain in time; ``reasons`` say what differs."""

    def __init__(self, timeout: float, reasons: list[str]) -> None:
        self.reasons = reasons
        shown = reasons[:10]
        more = f"\n  ... and {len(reasons) - 10} more" if len(reasons) > 10 else ""
        super().__init__(
            f"the cluster did not converge within {timeout:g}s:\n  " + "\n  ".join(shown) + more
        )


def _namespace_name(ns: Namespace) -> str:
    return ns if isinstance(ns, str) else name_of(ns)


def _seedable(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a manifest the API accepts on create (server-set metadata removed)."""
    out = copy.deepcopy(dict(obj))
    meta = out.setdefault("metadata", {})
    for key in SERVER_SET_METADATA:
        meta.pop(key, None)
    meta.pop("deletionTimestamp", None)
    return out


def _namespace_object(ns: Namespace) -> dict[str, Any]:
    if isinstance(ns, str):
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    obj = _seedable(ns)
    obj.pop("status", None)
    obj.setdefault("apiVersion", "v1")
    return obj


def _edit_map(meta: dict[str, Any], key: str, changes: Mapping[str, str | None]) -> None:
    values = dict(meta.get(key) or {})
    for k, v in changes.items():
        if v is None:
            values.pop(k, None)
        else:
            values[k] = v
    meta[key] = values


PROVISIONING_CRDS: Final = frozenset(
    {
        "provisioningrequestconfigs.kueue.x-k8s.io",
        "provisioningrequests.autoscaling.x-k8s.io",
    }
)


class SimCluster:
    """See the module docstring. Use as ``async with SimCluster(...) as cluster:``."""

    def __init__(
        self,
        nodes: Iterable[Mapping[str, Any]],
        namespaces: Iterable[Namespace] = ("default",),
        *,
        crds: Sequence[Mapping[str, Any]] | None = None,
        policy: ChainPolicy | None = None,
        with_memory: bool = False,
        resource_slices: Sequence[Mapping[str, Any]] = (),
        pool_objects: Sequence[Mapping[str, Any]] = (),
        extra_objects: Sequence[Mapping[str, Any]] = (),
        provision_delay: float = 2.0,
        consolidation_delay: float = 30.0,
        run_worker: bool = True,
        run_agents: bool = True,
        worker_config: WorkerConfig | None = None,
        worker_resync_period: float | None = None,
        agent_monitor_period: float = 30.0,
        agents_per_manager: int | None = None,
        kubeconfig: Path | None = None,
        kueue_config: Mapping[str, Any] | None = None,
        seed: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        authenticator: TokenAuthenticator | None = None,
        token: str | None = None,
        tls: bool = False,
    ) -> None:
        """*policy* shapes the chain for the worker and for :meth:`expected` alike
        (docs/configuration.md, "Chain policy"; default: every manufacturer with
        ``GPUSTACK_<MFR>_*`` applied, unpooled devices judged without settling).
        *authenticator* turns on the server's authentication and RBAC authorization; *token*
        is then the bearer token of the kubeconfig the agents and worker use. With *tls* the
        server serves HTTPS with its own CA, and the kubeconfig of the agents and the worker
        carries that CA (and, without *token*, the administrator's client certificate). The
        policy's tenant settings (docs/tenants.md; an unset tenancy told from *nodes*)
        decide whether this is a vCluster tenant: one runs no NFD stand-in and no agents, as
        the worker installs neither there; the simulated worker tells its tenancy from the
        served Nodes at start, as the worker does."""
        self.nodes: dict[str, dict[str, Any]] = {}
        for node in nodes:
            self.nodes[name_of(node)] = copy.deepcopy(dict(node))
        self.namespaces: list[Namespace] = list(namespaces)
        if policy is None:
            # Without a policy (tests): unpooled devices are judged at once, since the nodes
            # given are complete; `sim --cluster` passes the flags' policy (5m settling).
            policy = (
                worker_config.policy
                if worker_config
                else ChainPolicy(load_manufacturers(), unpooled_settling=0.0)
            )
        self.policy = policy
        self.with_memory = with_memory
        self.resource_slices = [copy.deepcopy(dict(s)) for s in resource_slices]
        """DRA ResourceSlices created with the Nodes (docs/devices.md, "DRA")."""
        self.pool_objects = [copy.deepcopy(dict(p)) for p in pool_objects]
        """Karpenter NodePools and Cluster API node groups (docs/autoscaling.md); their
        CRDs must be among *crds* (``sim.crds.autoscaling_stand_in_crds``). The namespace
        of a namespaced one (a MachineDeployment's) joins the input's namespaces."""
        self.extra_objects = [copy.deepcopy(dict(o)) for o in extra_objects]
        """Other objects of the dump, created as they are (ConfigMaps: the pool
        declarations')."""
        known = {name_of(_namespace_object(ns)) for ns in self.namespaces}
        for obj in self.pool_objects:
            namespace = (obj.get("metadata") or {}).get("namespace")
            if isinstance(namespace, str) and namespace and namespace not in known:
                self.namespaces.append(namespace)
                known.add(namespace)
        self.crds = list(crds) if crds is not None else stand_in_crds()
        if policy.provisioning.served is None:
            # ``auto`` resolved as the worker resolves it, from the kinds served
            # (docs/autoscaling.md, "Provisioning requests"), so plan and worker agree.
            served = {str((c.get("metadata") or {}).get("name")) for c in self.crds}
            policy = replace(
                policy,
                provisioning=replace(policy.provisioning, served=served >= PROVISIONING_CRDS),
            )
            self.policy = policy
        self.server_defaults = any(not is_stand_in(crd) for crd in self.crds)
        """Real CRDs default fields: convergence then tolerates extra ``spec`` fields."""
        self.kueue = kueue_resources(self.policy.offline_kueue_version)
        self.tenant = self.policy.tenant_settings(self.nodes.values())
        """The policy's tenant settings for these nodes (what the stand-ins follow)."""
        self.sim = SimServer(
            namespaces=self._base_namespaces(),
            seed=seed,
            host=host,
            port=port,
            authenticator=authenticator,
            tls=tls,
        )
        self._token = token
        self.nfd = NfdMaster(self.sim, namespace=self.system_namespace)
        self.kubelet = SimKubelet(self.sim, self.manufacturers, with_memory=with_memory)
        self.kueue_admission = KueueStandIn(self.sim, kueue_config)
        """Kueue's admission for Jobs (``gpustack_sim/standins/kueue.py``); *kueue_config* is a
        Kueue
        Configuration (its resource transformations), None for Kueue's default."""
        self.scheduler = SchedulerStandIn(
            self.sim,
            host_labels_only=self.tenant.is_tenant and not self.tenant.virtual_scheduler,
        )
        """Binds started Jobs' pods to Nodes (``gpustack_sim/standins/scheduler.py``); in a
        shared-node tenant
        by host-owned labels, as the host scheduler does (docs/tenants.md)."""
        self.provisioning_check = ProvisioningCheckStandIn(self.sim)
        """Kueue's provisioning admission check controller (``standins/provisioningcheck.py``):
        provisioning AdmissionChecks become Active where ProvisioningRequests are served."""
        self.provisioning: ProvisioningStandIn | None = ProvisioningStandIn(
            self.sim,
            self.policy.declared_pools,
            self.policy.manufacturers_by_resource,
            provision_delay=provision_delay,
            consolidation_delay=consolidation_delay,
            namespace=self.system_namespace,
        )
        """Adds and removes the nodes of pools that scale from zero (``sim/provisioning.py``):
        those of pool objects, of the policy's declarations and of the ConfigMap
        ``gpustack-declared-pools``, which a person may create at any time."""
        self._run_worker = run_worker
        self._run_agents = run_agents and not self.tenant.is_tenant
        self.worker_config = worker_config or WorkerConfig(policy=self.policy)
        self._worker_resync = worker_resync_period
        self._agent_monitor_period = agent_monitor_period
        self._agents_per_manager = agents_per_manager
        self._kubeconfig_path = kubeconfig
        self.kubeconfig: Path | None = None
        self.fleet: AgentFleet | None = None
        self.worker: Worker | None = None
        self.worker_manager: Manager | None = None
        self.worker_error: str | None = None
        self._stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None

    @property
    def system_namespace(self) -> str:
        return self.policy.system_namespace

    @property
    def manufacturers(self) -> Mapping[str, Manufacturer]:
        return self.policy.manufacturers

    def _base_namespaces(self) -> list[str]:
        """Namespaces every cluster has; the input's are created with their labels later."""
        return ["kube-system", self.system_namespace]

    # --- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> SimCluster:
        stack = AsyncExitStack()
        await stack.__aenter__()
        self._stack = stack
        try:
            await self._start(stack)
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
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        if stack is not None:
            # The body's exception is the caller's: the task group must not wrap it.
            await stack.aclose()
        self._tg = None

    def _owned_by_simulated_nodes(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A dumped object whose Node owner references name the simulated Node's uid (the
        dump's name the real one, and the garbage collector would delete the object)."""
        refs = obj.get("metadata", {}).get("ownerReferences") or []
        for ref in refs:
            if isinstance(ref, dict) and ref.get("kind") == "Node":
                node = self.sim.store.get("v1", "Node", str(ref.get("name", "")))
                if node is not None:
                    ref["uid"] = node["metadata"]["uid"]
        return obj

    def _seed_node(self, node: Mapping[str, Any]) -> None:
        """Create *node*; one the dump shows being deleted (``deletionTimestamp``: Karpenter's
        disruption, a drain before removal) is deleted again behind its finalizers, so the
        server holds it deleting as the dumped cluster did (docs/simulator.md)."""
        seeded = _seedable(node)
        deleting = bool((node.get("metadata") or {}).get("deletionTimestamp"))
        if deleting and not seeded["metadata"].get("finalizers"):
            seeded["metadata"]["finalizers"] = [DUMPED_DELETING_FINALIZER]
        self.sim.store.create(seeded)
        if deleting:
            self.sim.store.delete("v1", "Node", name_of(seeded))

    async def _start(self, stack: AsyncExitStack) -> None:
        self.sim.load_crds(self.crds)
        for ns in self.namespaces:
            obj = _namespace_object(ns)
            if self.sim.store.get("v1", "Namespace", name_of(obj)) is None:
                self.sim.store.create(obj)
        for node in self.nodes.values():
            self._seed_node(node)
        for obj in self.resource_slices:
            self.sim.store.create(self._owned_by_simulated_nodes(_seedable(obj)))
        for obj in self.extra_objects:
            if self.sim.store.get("v1", "Namespace", str(obj["metadata"].get("namespace"))):
                self.sim.store.create(_seedable(obj))
        for obj in self.pool_objects:  # as a dump holds them: server-set metadata, status
            seeded = _seedable(obj)
            if not is_capi_infrastructure(obj):  # an infrastructure object's status sizes it
                seeded.pop("status", None)
            self.sim.store.create(seeded)
        await stack.enter_async_context(self.sim)
        if self._kubeconfig_path is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="gpustack-sim-"))
            path = Path(tmp) / "kubeconfig.yaml"
        else:
            path = self._kubeconfig_path
        self.kubeconfig = self.sim.write_kubeconfig(path, context="sim", token=self._token)
        if not self.tenant.is_tenant:  # the host runs NFD (docs/tenants.md)
            await stack.enter_async_context(self.nfd)
        await stack.enter_async_context(self.kueue_admission)
        await stack.enter_async_context(self.scheduler)
        await stack.enter_async_context(self.provisioning_check)
        if self.provisioning is not None:
            await stack.enter_async_context(self.provisioning)
        await self.kubelet.start()
        stack.push_async_callback(self.kubelet.stop)
        self.fleet = AgentFleet(
            self.sim,
            self.kubeconfig,
            DetectionConfig.from_environment(),
            system_namespace=self.system_namespace,
            monitor_period=self._agent_monitor_period,
            **({"per_manager": self._agents_per_manager} if self._agents_per_manager else {}),
        )
        tg = await stack.enter_async_context(anyio.create_task_group())
        self._tg = tg
        if self._run_agents:
            tg.start_soon(self.fleet.run)
        if self._run_worker:
            client = await Client.connect(self.kubeconfig)
            stack.push_async_callback(client.close)
            manager = new_worker_manager(
                client,
                ManagerOptions(
                    component="gpustack-operator",
                    health_probe_bind_address="0",
                    metrics_bind_address="0",
                    graceful_shutdown_timeout=2.0,
                    resync_period=self._worker_resync,
                ),
            )
            self.worker_config.dra = await serves_dra(client)
            config = self.worker_config
            config.policy = await detect_tenancy_at_start(client, config.policy)
            config.policy = await detect_topology_at_start(client, config.policy)
            self.worker = setup_worker(manager, self.worker_config)
            self.worker_manager = manager
            tg.start_soon(self._run_manager, manager)

    async def _run_manager(self, manager: Manager) -> None:
        try:
            await manager.run()
        except Exception as exc:
            log.error("sim: the worker stopped", error=repr(exc))
            self.worker_error = repr(exc)

    # --- the chain ------------------------------------------------------------------------

    def expected(self) -> DesiredState:
        """What ``plan`` computes for the current input: the chain to converge to."""
        # Every namespace the server holds, as `plan --kubeconfig` reads them: the base ones
        # get LocalQueues too under a policy that does not exclude them.
        # Nodes the provisioning stand-in added are the cluster's as much as the input's.
        added = [
            n
            for n in self.sim.store.list("v1", "Node")
            if PROVISIONED_ANNOTATION in annotations_of(n) and name_of(n) not in self.nodes
        ]
        return plan_state(
            [*self.nodes.values(), *added],
            [*self._base_namespaces(), *self.namespaces],
            self.policy,
            with_memory=self.with_memory,
            resource_slices=self.resource_slices,
            pool_objects=self.pool_objects,
            now=self.worker_config.clock(),
        )

    def actual(self) -> DesiredState:
        """The chain the server holds now (read from its store: no faults, not counted)."""
        return read_chain_from_store(self.sim.store, self.system_namespace, self.kueue)

    async def read_back(self) -> DesiredState:
        """The chain read back through the API with a fresh client (LIST requests)."""
        assert self.kubeconfig is not None, "the cluster is not running"
        async with await Client.connect(self.kubeconfig) as client:
            chain = await read_chain(client, self.system_namespace, self.kueue)
        return self.explained(chain)

    def explained(self, chain: DesiredState) -> DesiredState:
        """*chain* (read back) with its Nodes explained as ``plan`` explains its input; in a
        vCluster tenant, the Nodes as its pools see them (docs/tenants.md)."""
        if not self.tenant.is_tenant:
            now = self.worker_config.clock()
            chain.availability = {
                name_of(n): node_availability(n, self.policy.lifecycle, now)
                for n in chain.nodes
                if is_managed(n)
            }
            chain.explanations = with_availability(
                explain_nodes(
                    chain.nodes,
                    self.manufacturers,
                    inputs=chain.nodes,
                    resource_slices=self.resource_slices,
                ),
                chain.availability,
            )
            return chain
        given = chain.nodes
        fleet = tenant_fleet(
            given, self.manufacturers, virtual_scheduler=self.tenant.virtual_scheduler
        )
        chain.nodes = list(fleet.nodes)
        chain.tenancy, chain.fleet = self.tenant.tenancy, fleet
        chain.explanations = tenant_explanations(
            chain.nodes, fleet, given, self.manufacturers, self.resource_slices
        )
        return chain

    def idle(self) -> bool:
        """No stand-in and no controller has work queued or in progress."""
        managers = list(self.fleet.managers) if self.fleet is not None else []
        if self.worker_manager is not None:
            managers.append(self.worker_manager)
        queues_empty = all(
            len(c.queue) == 0 and not c.queue.processing() for m in managers for c in m.controllers
        )
        fleet_idle = self.fleet is None or self.fleet.idle()
        worker_up = self.worker is None or (
            self.worker.queue_controllers != []
            and all(c.started for c in self.worker.queue_controllers)
        )
        stand_ins = (
            self.nfd.idle()
            and self.kubelet.idle()
            and self.kueue_admission.idle()
            and self.scheduler.idle()
            and self.provisioning_check.idle()
            and (self.provisioning is None or self.provisioning.idle())
        )
        return stand_ins and fleet_idle and worker_up and queues_empty

    def busy(self) -> list[str]:
        """What keeps :meth:`idle` false: controllers with work queued or in progress (and
        their keys), stand-ins not idle, the worker's queue controllers not started."""
        managers = list(self.fleet.managers) if self.fleet is not None else []
        if self.worker_manager is not None:
            managers.append(self.worker_manager)
        out = []
        for manager in managers:
            for c in manager.controllers:
                keys = sorted(set(c.queue.processing()))
                if len(c.queue) or keys:
                    out.append(
                        f"controller {c.name}: {len(c.queue)} queued, processing "
                        f"{', '.join(keys[:5]) or 'nothing'}"
                    )
        if self.fleet is not None and not self.fleet.idle():
            out.append("the device-manager agents are not idle")
        if self.worker is not None and not (
            self.worker.queue_controllers != []
            and all(c.started for c in self.worker.queue_controllers)
        ):
            out.append("the worker's Kueue controllers have not started")
        stand_ins = {
            "nfd-master": self.nfd,
            "kubelet": self.kubelet,
            "kueue admission": self.kueue_admission,
            "scheduler": self.scheduler,
            "provisioning check": self.provisioning_check,
            "provisioning": self.provisioning,
        }
        out += [f"stand-in {n} not idle" for n, s in stand_ins.items() if s and not s.idle()]
        return out

    def problems(self) -> list[str]:
        """Components that stopped (the cluster cannot converge without them)."""
        out = list(self.fleet.failures) if self.fleet is not None else []
        if self.worker_error is not None:
            out.append(f"the worker stopped: {self.worker_error}")
        return out

    async def converge(
        self,
        timeout: float,  # noqa: ASYNC109 - a bound on convergence, reported in the error
        *,
        settle: float = 0.5,
        interval: float | None = None,
        idle: Callable[[], bool] | None = None,
        match: bool = True,
    ) -> float:
        """Wait until the server holds :meth:`expected` and nothing changes for *settle*
        seconds; returns the seconds until that state was first seen. Raises
        :class:`NotConverged` with what differs. The input must not change meanwhile.

        *match* False waits for the rest alone, whatever the chain: for a state where it is
        not ``plan``'s by design (retiring queues still hold work, docs/teams.md).

        *idle* replaces :meth:`idle` (a worker in another process cannot be inspected; the
        store's resourceVersion standing still is then the only sign of rest).
        """
        started = time.monotonic()
        deadline = started + timeout
        step = interval if interval is not None else 0.05 + len(self.nodes) / 20000
        is_idle = idle or self.idle
        quiet_since: float | None = None
        quiet_rv = -1
        reasons: list[str] = []
        expected = self.expected()
        with WriteLog(self.sim.store) as writes:
            while True:
                now = time.monotonic()
                problems = self.problems()
                if problems:
                    raise NotConverged(timeout, problems)
                reasons = (
                    differences(self.actual(), expected, server_defaults=self.server_defaults)
                    if match
                    else []
                )
                rv = self.sim.store.resource_version
                if not reasons and is_idle():
                    if quiet_since is None or rv != quiet_rv:
                        quiet_since, quiet_rv = now, rv
                    elif now - quiet_since >= settle:
                        return quiet_since - started
                else:
                    quiet_since = None
                if now >= deadline:
                    raise NotConverged(
                        timeout, reasons or self._unsettled(writes, since=now - 10 * settle)
                    )
                # The check shares the event loop with the server: keep it to a fifth of it.
                await anyio.sleep(max(step, 4 * (time.monotonic() - now)))

    def _unsettled(self, writes: WriteLog, since: float) -> list[str]:
        """Why a cluster whose chain matched never stayed still: what was busy at the end,
        and the objects written in the last seconds, by whom, and which fields."""
        seconds = time.monotonic() - since
        written = writes.summary(since)
        return [
            "the chain matched but the cluster kept changing",
            *(f"busy: {b}" for b in self.busy()),
            *(f"written in the last {seconds:.0f}s: {w}" for w in written),
        ]

    # --- changing the input (a person's edits) --------------------------------------------

    def add_node(self, node: Mapping[str, Any]) -> None:
        """Add *node* to the input and create it on the server."""
        self.nodes[name_of(node)] = copy.deepcopy(dict(node))
        self.sim.store.create(_seedable(node))

    def edit_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] = {},
        annotations: Mapping[str, str | None] = {},
    ) -> None:
        """Set (or with ``None`` remove) labels and annotations, on the input and the server."""
        meta = self.nodes[name].setdefault("metadata", {})
        _edit_map(meta, "labels", labels)
        _edit_map(meta, "annotations", annotations)
        stored = self.sim.store.get("v1", "Node", name)
        if stored is None:
            raise KeyError(f"node {name} is in the input but not on the server: add_node() it")
        _edit_map(stored["metadata"], "labels", labels)
        _edit_map(stored["metadata"], "annotations", annotations)
        self.sim.store.update(stored)

    def delete_pool_object(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Remove a NodePool or Cluster API node group from the input and the server."""
        for i, obj in enumerate(self.pool_objects):
            meta = obj.get("metadata") or {}
            if obj.get("kind") == kind and meta.get("name") == name:
                del self.pool_objects[i]
                self.sim.store.delete(str(obj["apiVersion"]), kind, name, meta.get("namespace"))
                return
        raise KeyError(f"{kind} {name} is not in the input")

    def delete_node(self, name: str) -> None:
        """Remove the Node from the input and delete it on the server."""
        del self.nodes[name]
        self.sim.store.delete("v1", "Node", name)

    def add_namespace(self, name: str) -> None:
        """Add a Namespace (it gets a LocalQueue) to the input and the server."""
        self.namespaces.append(name)
        self.sim.store.create(_namespace_object(name))

    def delete_namespace(self, name: str) -> None:
        """Remove a Namespace from the input and delete it on the server."""
        self.namespaces = [n for n in self.namespaces if _namespace_name(n) != name]
        self.sim.store.delete("v1", "Namespace", name)
