"""Helpers for the worker-gateway tests: simulated clusters seeded with a chain, a running
gateway, and a watch client that collects NDJSON events."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx

from gpustack_operator.commands.plan import read_nodes_file
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.manufacturers import default_manufacturers
from gpustack_operator.domain.plan.desired import DesiredState
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.gateway.api import ApiOptions
from gpustack_operator.gateway.cluster import ClusterSpec, RunnerSettings
from gpustack_operator.gateway.gateway import Gateway
from gpustack_operator.gateway.server import GatewayServer, ServerOptions
from gpustack_operator.runtime.backoff import BackoffPolicy
from gpustack_operator.runtime.informer import ReflectorSettings
from gpustack_sim.apiserver.server import SimServer

JSON = dict[str, Any]
T = TypeVar("T")
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cluster.yaml"
_KUEUE_KINDS = (
    ("ResourceFlavor", "resourceflavors", "Cluster"),
    ("Cohort", "cohorts", "Cluster"),
    ("ClusterQueue", "clusterqueues", "Cluster"),
    ("LocalQueue", "localqueues", "Namespaced"),
)
_FAST_BACKOFF = BackoffPolicy(initial=0.05, cap=0.2, jitter=0.1)
FAST = RunnerSettings(
    probe_interval=0.1,
    request_timeout=2.0,
    connect_backoff=_FAST_BACKOFF,
    reflector=ReflectorSettings(backoff=_FAST_BACKOFF, min_watch_duration=0.0),
)


def kueue_crds(versions: Sequence[str]) -> list[JSON]:
    """Schema-less Kueue CRDs serving *versions* (the last one stores), with a status."""
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return [
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
            "spec": {
                "group": "kueue.x-k8s.io",
                "names": {"kind": kind, "plural": plural, "listKind": f"{kind}List"},
                "scope": scope,
                "versions": [
                    {
                        "name": version,
                        "served": True,
                        "storage": version == versions[-1],
                        "schema": schema,
                        "subresources": {"status": {}},
                    }
                    for version in versions
                ],
            },
        }
        for kind, plural, scope in _KUEUE_KINDS
    ]


def example_nodes(names: Iterable[str]) -> list[JSON]:
    nodes, _ = read_nodes_file(EXAMPLE)
    by_name = {n["metadata"]["name"]: dict(n) for n in nodes}
    return [by_name[name] for name in names]


def seed_chain(sim: SimServer, node_names: Iterable[str], version: KueueVersion) -> DesiredState:
    """Create the chain the worker would build for these example nodes, as the worker would."""
    state = plan_state(
        example_nodes(node_names),
        ["default"],
        ChainPolicy(manufacturers=default_manufacturers(), kueue_version=version),
    )
    for obj in [*state.resource_flavors, *state.cohorts, *state.cluster_queues]:
        sim.store.create(obj)
    for obj in state.local_queues:
        sim.store.create(obj)
    return state


async def start_sim(versions: Sequence[str] = ("v1beta1", "v1beta2")) -> SimServer:
    sim = SimServer(bookmark_interval=0.2)
    sim.load_crds(kueue_crds(versions))
    return await sim.start()


async def eventually(condition: Callable[[], bool], what: str, deadline: float = 60.0) -> None:
    """Poll *condition* until true; fail naming *what* after *deadline* seconds."""
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await anyio.sleep(0.02)


async def until(
    fetch: Callable[[], Awaitable[T]],
    condition: Callable[[T], bool],
    what: str,
    deadline: float = 60.0,
) -> T:
    """Call *fetch* until *condition* holds for its result; return that result."""
    end = time.monotonic() + deadline
    while True:
        value = await fetch()
        if condition(value):
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}; last value: {value!r}")
        await anyio.sleep(0.02)


async def clusters_list(client: httpx.AsyncClient) -> list[JSON]:
    items: list[JSON] = (await client.get("/apis/v1/clusters")).json()["items"]
    return items


async def all_ready(client: httpx.AsyncClient, count: int) -> list[JSON]:
    """Wait until the gateway lists *count* clusters, all Ready."""
    return await until(
        lambda: clusters_list(client),
        lambda items: len(items) == count and all(i["status"] == "Ready" for i in items),
        f"{count} Ready clusters",
    )


@asynccontextmanager
async def running_gateway(
    clusters: Sequence[ClusterSpec],
    *,
    api: ApiOptions | None = None,
    watch_buffer: int = 1024,
    tls: Any = None,
    **server_options: Any,
) -> AsyncIterator[GatewayServer]:
    """A gateway on a free port; *server_options* go to :class:`ServerOptions`."""
    gateway = Gateway(FAST, watch_buffer=watch_buffer)
    options = ServerOptions(
        bind_address="127.0.0.1", port=0, tls=tls, api=api or ApiOptions(), **server_options
    )
    server = GatewayServer(gateway, list(clusters), options)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.run)
        with anyio.fail_after(60):
            await server.serving.wait()
            await gateway.started.wait()
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


class Watch:
    """Collects the events of one ``?watch=true`` stream in the background."""

    def __init__(self) -> None:
        self.events: list[JSON] = []
        self.ended = False

    def live(self) -> list[JSON]:
        """Events after the initial snapshot's end bookmark (heartbeats left out)."""
        out: list[JSON] = []
        seen_end = False
        for event in self.events:
            if event["type"] == "BOOKMARK":
                seen_end = seen_end or bool(event["object"].get("initialEventsEnd"))
                continue
            if seen_end:
                out.append(event)
        return out

    def snapshot(self) -> list[JSON]:
        out: list[JSON] = []
        for event in self.events:
            if event["type"] == "BOOKMARK":
                if event["object"].get("initialEventsEnd"):
                    break
                continue
            out.append(event)
        return out

    def synced(self) -> bool:
        return any(
            e["type"] == "BOOKMARK" and e["object"].get("initialEventsEnd") for e in self.events
        )


@asynccontextmanager
async def watching(client: httpx.AsyncClient, url: str) -> AsyncIterator[Watch]:
    """Open a watch on *url* and collect its events until the block ends."""
    watch = Watch()

    async def read() -> None:
        async with client.stream("GET", url, params={"watch": "true"}) as response:
            assert response.status_code == 200, await response.aread()
            async for line in response.aiter_lines():
                if line.strip():
                    watch.events.append(json.loads(line))
        watch.ended = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await eventually(watch.synced, f"the initial snapshot of {url}")
        try:
            yield watch
        finally:
            tg.cancel_scope.cancel()
