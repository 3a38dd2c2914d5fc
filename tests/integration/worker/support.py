"""Helpers of the worker's integration tests: nodes, a running worker, the chain diff."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import anyio

from gpustack_operator.domain.labels import LABEL_REPAIR_ANNOTATION
from gpustack_operator.domain.plan.desired import DesiredState, desired_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.environment import load_manufacturers
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.leaderelection import LeaderElectionConfig
from gpustack_operator.runtime.manager import Manager, ManagerOptions
from gpustack_operator.wiring import (
    Worker,
    WorkerConfig,
    WorkerTiming,
    new_worker_manager,
    setup_worker,
)
from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.nfdmaster import NfdMaster

NS = "gpustack-system"
KUEUE = "kueue.x-k8s.io/v1beta2"
NFD = "nfd.k8s-sigs.io/v1alpha1"
MANAGED_BY = "app.kubernetes.io/managed-by"
A = "acceleratable.feature.gpustack.ai/"
WRITE_KINDS = ("NodeFeature", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")
MANUFACTURERS = load_manufacturers({})


def fast_config(**overrides: Any) -> WorkerConfig:
    """A worker configuration with test-sized waits; overrides named after a field of
    :class:`ChainPolicy` or :class:`WorkerTiming` go there."""
    policy_fields = {f.name for f in fields(ChainPolicy)}
    policy = ChainPolicy(
        # Unpooled devices judged at once: these nodes' labels are complete when they are
        # created, and a settling timer would keep the manager from ever being idle.
        **{"manufacturers": MANUFACTURERS, "unpooled_settling": 0.0}
        | {k: v for k, v in overrides.items() if k in policy_fields}
    )
    timing_fields = {f.name for f in fields(WorkerTiming)}
    timing = WorkerTiming(
        **{
            "kueue_discovery_interval": 0.1,
            "reserved_requeue": 0.2,
            "waiting_requeue": 0.1,
            "batch_window": 0.05,
            "capacity_window": 0.05,
            "cohort_deleting_requeue": 0.2,
            "verdicts_interval": 0.05,
        }
        | {k: v for k, v in overrides.items() if k in timing_fields}
    )
    values: dict[str, Any] = {"policy": policy, "timing": timing, "max_concurrent_reconciles": 2}
    values.update((k, v) for k, v in overrides.items() if k not in policy_fields | timing_fields)
    return WorkerConfig(**values)


def node(
    name: str,
    *,
    cpu: str = "16",
    memory: str = "64Gi",
    storage: str = "200Gi",
    cards: tuple[str, int] | None = None,
    sliced: int | None = None,
    managed: str | None = None,
) -> dict[str, Any]:
    """A Node as NFD and the device manager would have labelled it (AMD family 25 model 1,
    linux/amd64); *cards* = (product, count) of NVIDIA cards."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
        "feature.node.kubernetes.io/cpu-model.family": "25",
        "feature.node.kubernetes.io/cpu-model.id": "1",
    }
    if managed is not None:
        labels["gpustack.ai/managed"] = managed
    capacity = {"cpu": cpu, "memory": memory, "ephemeral-storage": storage, "pods": "110"}
    allocatable = dict(capacity)
    if cards is not None:
        product, count = cards
        key = A + "nvidia-" + product.lower().replace(" ", "-")
        labels |= {
            "feature.gpustack.ai/acceleratable": "true",
            A + "nvidia": "true",
            key: "true",
            key + ".count": str(count),
            key + ".product": product.replace(" ", "-"),
            key + ".memory": "15Gi",
        }
        if sliced is not None:
            labels[key + ".sliced.partitions"] = str(sliced)
        allocatable["nvidia.com/gpu"] = str(count)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"feature.gpustack.ai/cpu-physical-cores": "8"},
        },
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["registry.example/some-image:1"], "sizeBytes": 1}],
        },
    }


def put_node(sim: SimServer, obj: dict[str, Any]) -> None:
    """Create or replace a Node (labels and status), as a kubelet and `kubectl label` would."""
    name = obj["metadata"]["name"]
    current = sim.store.get("v1", "Node", name)
    if current is None:
        sim.store.create(obj)
        return
    # Keep labels others (NFD master) wrote that the new manifest does not mention.
    labels = {**current["metadata"].get("labels", {})}
    for key in list(labels):
        if (
            key.startswith(A)
            and key not in obj["metadata"]["labels"]
            and not key.endswith((".cpu", ".ram", ".storage", ".z-flavor", ".z-queue", ".z-cohort"))
        ):
            del labels[key]
    labels.update(obj["metadata"]["labels"])
    current["metadata"]["labels"] = labels
    sim.store.update(current)
    current = sim.store.get("v1", "Node", name)
    assert current is not None
    current["status"] = obj["status"]
    sim.store.update_status(current)


def relabel(sim: SimServer, name: str, **changes: str | None) -> None:
    """Set (value) or remove (None) Node labels, like `kubectl label`."""
    current = sim.store.get("v1", "Node", name)
    assert current is not None
    labels = current["metadata"].setdefault("labels", {})
    for key, value in changes.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    sim.store.update(current)


def kueue_objects(sim: SimServer, kind: str, *, managed: bool = True) -> list[dict[str, Any]]:
    objs = sim.store.list(KUEUE, kind)
    return [
        o
        for o in objs
        if (o["metadata"].get("labels", {}).get(MANAGED_BY) == "gpustack-operator") == managed
    ]


def expected(sim: SimServer, config: WorkerConfig) -> DesiredState:
    """What the chain should be for the simulated cluster's current Nodes and Namespaces."""
    cohorts = {c["metadata"]["name"]: c["metadata"]["uid"] for c in kueue_objects(sim, "Cohort")}
    return desired_state(
        sim.store.list("v1", "Node"),
        sim.store.list("v1", "Namespace"),
        config.policy,
        cohort_uids=cohorts,
    )


def _contains(have: object, want: object) -> bool:
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(
            k in have and _contains(have[k], v) for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(_contains(h, w) for h, w in zip(have, want, strict=True))
        )
    return have == want


def _flavors_by_name(spec: Any) -> Any:
    """A ClusterQueue spec with each group's flavors sorted by name.

    The controller orders flavors by creation time (docs/worker.md); ``desired_state`` works on
    flavors not created yet and orders them by name. Both hold the same flavors.
    """
    if not isinstance(spec, Mapping) or "resourceGroups" not in spec:
        return spec
    groups = [
        {**g, "flavors": sorted(g.get("flavors", []), key=lambda f: f["name"])}
        for g in spec["resourceGroups"]
    ]
    return {**spec, "resourceGroups": groups}


def _owners(obj: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    return {(r["kind"], r["name"], r["uid"]) for r in obj["metadata"].get("ownerReferences") or []}


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def chain_diff(sim: SimServer, config: WorkerConfig) -> list[str]:
    """Differences between the simulated cluster and the desired chain ([] when converged)."""
    want = expected(sim, config)
    have = {
        "NodeFeature": [
            f
            for f in sim.store.list(NFD, "NodeFeature", NS)
            if f["metadata"].get("labels", {}).get("app.kubernetes.io/part-of")
            == "gpustack-operator-worker"
        ],
        "ResourceFlavor": kueue_objects(sim, "ResourceFlavor"),
        "Cohort": kueue_objects(sim, "Cohort"),
        "ClusterQueue": kueue_objects(sim, "ClusterQueue"),
        "LocalQueue": kueue_objects(sim, "LocalQueue"),
    }
    wanted = {
        "NodeFeature": want.node_features,
        "ResourceFlavor": want.resource_flavors,
        "Cohort": want.cohorts,
        "ClusterQueue": want.cluster_queues,
        "LocalQueue": want.local_queues,
    }
    problems: list[str] = []
    cq_uids = {q["metadata"]["name"]: q["metadata"]["uid"] for q in have["ClusterQueue"]}
    for kind, desired in wanted.items():
        actual = {_key(o): o for o in have[kind]}
        names = {_key(o) for o in desired}
        if set(actual) != names:
            missing, extra = sorted(names - set(actual)), sorted(set(actual) - names)
            problems.append(f"{kind}: missing {missing}, extra {extra}")
            continue
        for obj in desired:
            got = actual[_key(obj)]
            meta, got_meta = obj["metadata"], got["metadata"]
            if not _contains(_flavors_by_name(got.get("spec")), _flavors_by_name(obj.get("spec"))):
                problems.append(f"{kind} {_key(obj)}: spec differs")
            if not _contains(got_meta.get("labels", {}), meta.get("labels", {})):
                problems.append(f"{kind} {_key(obj)}: labels differ")
            got_annotations = dict(got_meta.get("annotations", {}))
            got_annotations.pop(LABEL_REPAIR_ANNOTATION, None)  # a repair's mark stays
            if got_annotations != meta.get("annotations", {}):
                problems.append(f"{kind} {_key(obj)}: annotations differ")
            if not _owners(obj) <= _owners(got):
                problems.append(f"{kind} {_key(obj)}: owner references differ")
            if kind == "LocalQueue":
                target = obj["spec"]["clusterQueue"]
                if _owners(got) != {("ClusterQueue", target, cq_uids.get(target, "?"))}:
                    problems.append(f"LocalQueue {_key(obj)}: not owned by its ClusterQueue")
    return problems


async def eventually(
    condition: Callable[[], Any],
    what: str,
    timeout: float = 20.0,  # noqa: ASYNC109 - a deadline, part of this helper's contract
) -> None:
    """Return once *condition()* is truthy; fail after *timeout* seconds."""
    with anyio.move_on_after(timeout):
        while not condition():  # noqa: ASYNC110 - polls cluster state, not an event
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


async def converged(sim: SimServer, config: WorkerConfig, timeout: float = 20.0) -> None:  # noqa: ASYNC109
    """Wait until the chain equals the desired state; fail with the last differences."""
    last: list[str] = []

    def check() -> bool:
        nonlocal last
        last = chain_diff(sim, config)
        return not last

    try:
        await eventually(check, "the chain to converge", timeout)
    except AssertionError:
        raise AssertionError("chain did not converge:\n" + "\n".join(last)) from None


def idle(manager: Manager) -> bool:
    """No controller of *manager* has queued, running, delayed or coalescing work."""
    return all(
        len(c.queue) == 0
        and not c.queue.processing()
        and c.queue.num_waiting() == 0
        and c.pending_bursts() == 0
        for c in manager.controllers
    )


def started_and_idle(manager: Manager, *names: str) -> bool:
    """Controllers *names* (at least) added and started, and *manager* idle: a worker that
    has done what its caches ask of it."""
    started = {c.name for c in manager.controllers if c.started}
    return set(names) <= started and idle(manager)


@dataclass
class Running:
    manager: Manager
    worker: Worker
    client: Client
    scope: anyio.CancelScope

    def stop(self) -> None:
        self.scope.cancel()


@asynccontextmanager
async def worker_running(
    kubeconfig: Path,
    config: WorkerConfig,
    *,
    election: LeaderElectionConfig | None = None,
    health: bool = False,
) -> AsyncIterator[Running]:
    """The worker on its own manager and client, in the background until the block ends."""
    client = await Client.connect(kubeconfig)
    options = ManagerOptions(
        component="gpustack-operator-worker",
        health_probe_bind_address="127.0.0.1:0" if health else "0",
        metrics_bind_address="0",
        leader_election=election,
        graceful_shutdown_timeout=3.0,
    )
    manager = new_worker_manager(client, options)
    worker = setup_worker(manager, config)
    try:
        async with anyio.create_task_group() as tg:
            scope = anyio.CancelScope()

            async def run() -> None:
                with scope:
                    await manager.run()

            tg.start_soon(run)
            try:
                yield Running(manager, worker, client, scope)
            finally:
                tg.cancel_scope.cancel()
    finally:
        await client.close()


@asynccontextmanager
async def nfd_master(sim: SimServer) -> AsyncIterator[NfdMaster]:
    master = NfdMaster(sim, namespace=NS)
    await master.start()
    try:
        yield master
    finally:
        await master.stop()
