"""Helpers of the bootstrap integration tests: a simulated cluster, a running manager with the
bootstrap controller, a request recorder for the RBAC proof, and polling with a deadline."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import yaml

from gpustack_operator.controllers.bootstrap import (
    Bootstrap,
    BootstrapConfig,
    check_nfd_crds,
    setup_bootstrap,
)
from gpustack_operator.domain.bootstrap import (
    BootstrapSettings,
    device_manager_prerequisites,
    nfd_prerequisites,
)
from gpustack_operator.runtime import metrics
from gpustack_operator.runtime.backoff import BackoffPolicy
from gpustack_operator.runtime.client import Client, NotFound
from gpustack_operator.runtime.informer import ReflectorSettings
from gpustack_operator.runtime.manager import Manager, ManagerOptions
from gpustack_operator.runtime.resources import Resource
from gpustack_sim.apiserver.authn import TokenAuthenticator
from gpustack_sim.apiserver.server import SimServer

NS = "gpustack-system"
IMAGE = "registry.example.com/gpustack/gpustack-operator:v9.9.9"


async def eventually(
    condition: Callable[[], Any],
    what: str,
    timeout: float = 60.0,  # noqa: ASYNC109 - a deadline, part of this helper's contract
) -> None:
    """Return as soon as *condition()* (sync or async) holds; fail after *timeout*."""
    last: object = None
    with anyio.move_on_after(timeout):
        while True:
            last = condition()
            if hasattr(last, "__await__"):
                last = await last
            if last:
                return
            await anyio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


async def get_or_none(
    client: Client, res: Resource, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    try:
        return await client.get(res, name, namespace)
    except NotFound:
        return None


@dataclass(frozen=True)
class Request:
    """One authorization-relevant request: who sent what to which resource, where."""

    subject: str
    verb: str
    group: str
    resource: str  # plural, or plural/subresource
    namespace: str | None  # None: cluster-scoped, or a namespaced kind across namespaces


@dataclass
class RequestLog:
    """Every request the simulated server answered, attributed by bearer token.

    Each component gets a kubeconfig with its own token (:func:`kubeconfig_for`); the
    simulated server does not authenticate, so the token only tells the callers apart.
    """

    seen: set[Request] = field(default_factory=set)

    def install(self, sim: SimServer) -> None:
        """Wrap the server's dispatcher (the one place that resolves a request's target)."""
        original = sim._dispatch

        async def recording(request: Any, group: str, version: str, tail: str) -> Any:
            try:
                target = sim._resolve(group, version, tail)
                verb = sim._verb(request, target)
            except Exception:
                return await original(request, group, version, tail)
            resource = target.info.plural
            if target.subresource:
                resource = f"{resource}/{target.subresource}"
            auth = request.headers.get("Authorization", "")
            subject = auth.removeprefix("Bearer ").strip() or "anonymous"
            namespace = target.namespace if target.info.namespaced else None
            self.seen.add(Request(subject, verb, target.info.group, resource, namespace))
            response = await original(request, group, version, tail)
            if verb == "patch" and response.status == 201:
                # A server-side apply that creates the object is authorized as create too.
                self.seen.add(Request(subject, "create", target.info.group, resource, namespace))
            return response

        sim._dispatch = recording  # type: ignore[method-assign]

    def of(self, subject: str) -> set[Request]:
        return {r for r in self.seen if r.subject == subject}


def kubeconfig_for(sim: SimServer, path: Path, subject: str) -> Path:
    """A kubeconfig for *sim* whose requests carry ``Authorization: Bearer <subject>``."""
    sim.write_kubeconfig(path)
    config = yaml.safe_load(path.read_text())
    config["users"][0]["user"] = {"token": subject}
    path.write_text(yaml.safe_dump(config))
    return path


def reconciles(result: str = "success") -> float:
    """How many bootstrap reconciles ended with *result* in this process so far."""
    value = metrics.RECONCILE_TOTAL.labels("bootstrap", result)._value.get()
    return float(value)


def options() -> ManagerOptions:
    return ManagerOptions(
        component="gpustack-operator",
        health_probe_bind_address="0",
        metrics_bind_address="0",
        cache_sync_timeout=30.0,
        graceful_shutdown_timeout=5.0,
        reflector=ReflectorSettings(backoff=BackoffPolicy(initial=0.01, cap=0.05)),
    )


def config(**overrides: Any) -> BootstrapConfig:
    """A configuration read from a controlled environment (never the test runner's)."""
    env = overrides.pop("env", {"GPUSTACK_PCI_CLASS_PREFIXES": "03,12"})
    overrides.setdefault("device_manager_image", IMAGE)
    overrides.setdefault("manufacturers", ["nvidia", "amd"])
    return BootstrapConfig.from_environment(env, namespace=NS, **overrides)


def install_prerequisites(sim: SimServer, *, nfd: bool = True) -> None:
    """What ``kubectl apply -k deploy/overlays/...`` installs besides the worker: NFD's CRDs
    and RBAC (the component) and the device manager's RBAC (docs/security.md)."""
    settings = BootstrapSettings(namespace=NS)
    objects = device_manager_prerequisites(settings)
    if nfd:
        objects = [*nfd_prerequisites(settings), *objects]
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    sim.load_crds(crds)
    for obj in objects:
        if obj["kind"] != "CustomResourceDefinition":
            sim.store.create(obj)


WORKER_TOKEN = "worker-token"
ADMIN_TOKEN = "admin-token"
REPO = Path(__file__).resolve().parents[3]


def worker_rbac() -> list[dict[str, Any]]:
    """The worker's roles and bindings as deploy/base/rbac.yaml installs them."""
    documents = yaml.safe_load_all((REPO / "deploy" / "base" / "rbac.yaml").read_text())
    objects = [d for d in documents if d]
    for obj in objects:
        if obj["kind"] in ("Role", "RoleBinding"):
            obj["metadata"]["namespace"] = NS
    return objects


@asynccontextmanager
async def started_sim(
    crd_docs: Iterable[dict[str, Any]] = (), *, prerequisites: bool = True
) -> AsyncIterator[SimServer]:
    """A simulated cluster with authorization on and the worker's RBAC installed: use
    ``write_kubeconfig(path, token=WORKER_TOKEN)`` (or ``ADMIN_TOKEN``). With
    *prerequisites*, deploy/'s NFD and device-manager RBAC too. A request outside the
    worker's RBAC is a 403 and fails the test (docs/security.md, "How the RBAC is checked")."""
    auth = TokenAuthenticator()
    auth.add(WORKER_TOKEN, f"system:serviceaccount:{NS}:gpustack-operator-worker")
    auth.add(ADMIN_TOKEN, "cluster-admin", groups=["system:masters"])
    sim = SimServer(namespaces=("default", "kube-system", NS), authenticator=auth)
    await sim.start()
    sim.load_crds(list(crd_docs))
    for obj in worker_rbac():
        sim.store.create(obj)
    if prerequisites:
        install_prerequisites(sim)
    try:
        yield sim
        denied = list(sim.authorizer.denials)
        assert not denied, "requests outside the worker's RBAC:\n" + "\n".join(denied)
    finally:
        await sim.stop()


@asynccontextmanager
async def bootstrap_running(
    kubeconfig: Path,
    cfg: BootstrapConfig,
    extra: Callable[[Manager], None] | None = None,
) -> AsyncIterator[Bootstrap]:
    """The worker's start-up as the command runs it: CRDs first, then the manager."""
    client = await Client.connect(kubeconfig)
    try:
        await check_nfd_crds(client, cfg)
        manager = Manager(client, options())
        bootstrap = setup_bootstrap(manager, cfg)
        if extra is not None:
            extra(manager)
        async with anyio.create_task_group() as tg:
            tg.start_soon(manager.run)
            try:
                yield bootstrap
            finally:
                tg.cancel_scope.cancel()
    finally:
        await client.close()


def idle(bootstrap: Bootstrap) -> bool:
    queue = bootstrap.controller.queue
    return len(queue) == 0 and not queue.processing() and queue.num_waiting() == 0
