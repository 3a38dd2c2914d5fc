"""The manager against the simulated API server: probes, metrics, shared informers, mapping
through real informers, Events, signals and fatal start-up errors."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from gpustack_operator.runtime.client import AlreadyExists, Client
from gpustack_operator.runtime.controller import CacheSyncTimeoutError, Request, TerminalError
from gpustack_operator.runtime.leaderelection import LeaderElectionConfig
from gpustack_operator.runtime.manager import Manager, RunnableFailed
from gpustack_operator.runtime.predicates import GENERATION_CHANGED
from gpustack_operator.runtime.resources import (
    CONFIGMAPS,
    DEPLOYMENTS,
    NODES,
    SECRETS,
    SERVICE_ACCOUNTS,
)
from gpustack_operator.runtime.workqueue import ItemExponentialFailureRateLimiter
from gpustack_sim.apiserver.server import SimServer
from tests.integration.sim.helpers import deployment
from tests.unit.runtime.polling import eventually

from .support import connected, http_get, idle, options, running, sample, unique

pytestmark = pytest.mark.anyio


def configmap(name: str, namespace: str = "default", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "data": {},
    }


async def test_readyz_is_not_ready_before_caches_sync(sim: SimServer, sim_kubeconfig: Path) -> None:
    fault = sim.faults.add("list", "ConfigMap", 500)
    async with connected(sim_kubeconfig) as client:
        manager = Manager(client, options())

        async def reconcile(req: Request) -> None:
            return None

        manager.controller(unique("readyz")).for_(CONFIGMAPS).complete(reconcile)
        async with running(manager):
            await manager.serving.wait()
            assert manager.health_server is not None
            url = manager.health_server.url
            await eventually(lambda: fault.fired >= 2, what="failing LISTs")
            not_ready = await http_get(f"{url}/readyz")
            assert not_ready.status_code == 500
            assert "informers-synced" in not_ready.text
            assert (await http_get(f"{url}/healthz")).status_code == 200
            assert not manager.elected.is_set(), "controllers must not start before sync"
            sim.faults.remove(fault)
            with anyio.fail_after(30):
                await manager.synced.wait()
            ready = await http_get(f"{url}/readyz?verbose")
            assert ready.status_code == 200
            assert "[+]informers-synced ok" in ready.text


async def test_metrics_endpoint_exposes_controller_runtime_names(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    name = unique("metrics")
    lease = unique("metrics-lease")
    async with connected(sim_kubeconfig) as client:
        # A lease that outlives a busy machine's slow renewal: a lost lead stops the
        # controller and takes its work-queue gauges off /metrics before the scrape.
        election = LeaderElectionConfig(
            lease, "default", "me", lease_duration=30, renew_deadline=20, retry_period=0.1
        )
        manager = Manager(client, options(leader_election=election))

        async def reconcile(req: Request) -> None:
            if req.name == "bad":
                raise TerminalError("bad input")

        manager.controller(name).for_(CONFIGMAPS).complete(reconcile)
        await client.create(CONFIGMAPS, configmap("good"))
        await client.create(CONFIGMAPS, configmap("bad"))
        async with running(manager):
            await manager.elected.wait()
            await eventually(
                lambda: (
                    sample("controller_runtime_reconcile_total", controller=name, result="error")
                    == 1
                    and idle(manager)
                ),
                what="both reconciles",
            )
            assert manager.metrics_server is not None
            text = (await http_get(f"{manager.metrics_server.url}/metrics")).text
    expected = [
        f'controller_runtime_reconcile_total{{controller="{name}",result="success"}}',
        f'controller_runtime_reconcile_total{{controller="{name}",result="error"}}',
        f'controller_runtime_reconcile_errors_total{{controller="{name}"}}',
        f'controller_runtime_terminal_reconcile_errors_total{{controller="{name}"}}',
        f'controller_runtime_reconcile_time_seconds_bucket{{controller="{name}",le="0.005"}}',
        f'controller_runtime_active_workers{{controller="{name}"}}',
        f'controller_runtime_max_concurrent_reconciles{{controller="{name}"}}',
        f'workqueue_depth{{name="{name}"}}',
        f'workqueue_adds_total{{name="{name}"}}',
        f'workqueue_retries_total{{name="{name}"}}',
        f'workqueue_queue_duration_seconds_count{{name="{name}"}}',
        f'workqueue_work_duration_seconds_count{{name="{name}"}}',
        f'workqueue_unfinished_work_seconds{{name="{name}"}}',
        f'workqueue_longest_running_processor_seconds{{name="{name}"}}',
        f'leader_election_master_status{{name="{lease}"}}',
        "rest_client_request_duration_seconds_bucket{",
    ]
    missing = [line for line in expected if line not in text]
    assert not missing, f"/metrics lacks {missing}"
    rest = [line for line in text.splitlines() if line.startswith("rest_client_requests_total{")]
    assert any('code="200"' in line and 'method="GET"' in line for line in rest), rest
    assert "_created" not in text


async def test_disabled_servers_and_bad_addresses(sim: SimServer, sim_kubeconfig: Path) -> None:
    async with connected(sim_kubeconfig) as client:
        manager = Manager(client, options(health_probe_bind_address="0", metrics_bind_address=""))
        async with running(manager):
            await manager.synced.wait()
            assert manager.health_server is None and manager.metrics_server is None
        with pytest.raises(ValueError, match="port"):
            Manager(client, options(metrics_bind_address="localhost"))


async def test_shared_informers_and_child_mapping_through_real_informers(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    """owns() maps Secrets to their controlling ConfigMap; watches() maps ServiceAccounts by
    label, old and new on update; two controllers for one kind share one informer."""
    reconciled: list[str] = []
    async with connected(sim_kubeconfig) as client:
        manager = Manager(client, options())

        async def reconcile(req: Request) -> None:
            reconciled.append(req.key)

        async def other(req: Request) -> None:
            return None

        def by_parent_label(sa: dict[str, Any]) -> list[Request]:
            parent = (sa["metadata"].get("labels") or {}).get("parent")
            return [Request.of(parent, sa["metadata"]["namespace"])] if parent else []

        (
            manager.controller(unique("parents"))
            .for_(CONFIGMAPS)
            .owns(SECRETS)
            .watches(SERVICE_ACCOUNTS, by_parent_label)
            .complete(reconcile)
        )
        manager.controller(unique("second")).for_(CONFIGMAPS).complete(other)
        kinds = [i.resource.kind for i in manager.informers.informers]
        assert sorted(kinds) == ["ConfigMap", "Secret", "ServiceAccount"]

        parent_a = await client.create(CONFIGMAPS, configmap("parent-a"))
        parent_b = await client.create(CONFIGMAPS, configmap("parent-b"))
        async with running(manager):
            await manager.elected.wait()
            await eventually(
                lambda: (
                    {"default/parent-a", "default/parent-b"} <= set(reconciled) and idle(manager)
                )
            )
            reconciled.clear()

            def owned_by(parent: dict[str, Any], controller: bool) -> dict[str, Any]:
                return {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": parent["metadata"]["name"],
                    "uid": parent["metadata"]["uid"],
                    "controller": controller,
                }

            await client.create(
                SECRETS,
                {
                    "metadata": {
                        "name": "child",
                        "namespace": "default",
                        "ownerReferences": [
                            owned_by(parent_a, True),
                            owned_by(parent_b, False),  # not the controller: ignored
                        ],
                    },
                    "type": "Opaque",
                },
            )
            await eventually(lambda: reconciled == ["default/parent-a"] and idle(manager))
            reconciled.clear()

            sa = await client.create(
                SERVICE_ACCOUNTS,
                {"metadata": {"name": "sa", "namespace": "default", "labels": {"parent": "x"}}},
            )
            await eventually(lambda: reconciled == ["default/x"] and idle(manager))
            reconciled.clear()
            sa["metadata"]["labels"]["parent"] = "y"
            await client.replace(SERVICE_ACCOUNTS, sa)
            await eventually(lambda: sorted(set(reconciled)) == ["default/x", "default/y"])
            await eventually(lambda: idle(manager))
            reconciled.clear()
            await client.delete(SECRETS, "child", "default")
            await eventually(lambda: reconciled == ["default/parent-a"] and idle(manager))


async def test_reconcile_failures_become_aggregated_warning_events(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    name = unique("events")
    async with connected(sim_kubeconfig) as client:
        manager = Manager(client, options(component="runtime-tests"))

        async def reconcile(req: Request) -> None:
            raise RuntimeError("quota service unavailable")

        (
            manager.controller(name)
            .for_(CONFIGMAPS)
            .with_options(rate_limiter=ItemExponentialFailureRateLimiter(0.001, 0.01))
            .complete(reconcile)
        )
        broken = await client.create(CONFIGMAPS, configmap("broken"))

        def events() -> list[dict[str, Any]]:
            return [
                e
                for e in sim.store.list("v1", "Event", "default")
                if e["involvedObject"].get("name") == "broken"
            ]

        async with running(manager):
            await eventually(
                lambda: any(e.get("count", 0) >= 3 for e in events()),
                what="a repeated event",
            )
    found = events()
    assert len(found) == 1, "repeats must update one Event, not create many"
    event = found[0]
    assert event["type"] == "Warning"
    assert event["reason"] == "ReconcileError"
    assert event["message"] == f"{name}: quota service unavailable"
    assert event["source"]["component"] == "runtime-tests"
    involved = event["involvedObject"]
    assert involved["kind"] == "ConfigMap" and involved["apiVersion"] == "v1"
    assert involved["uid"] == broken["metadata"]["uid"]
    assert event["firstTimestamp"] <= event["lastTimestamp"]


async def test_cache_sync_timeout_stops_the_manager(sim: SimServer, sim_kubeconfig: Path) -> None:
    sim.faults.add("list", "Secret", 500)
    async with connected(sim_kubeconfig) as client:
        manager = Manager(client, options(cache_sync_timeout=0.2))

        async def reconcile(req: Request) -> None:
            return None

        manager.controller(unique("nosync")).for_(SECRETS).complete(reconcile)
        with anyio.fail_after(30), pytest.raises(CacheSyncTimeoutError, match="secrets"):
            await manager.run()
        assert not manager.elected.is_set()


async def test_a_failing_runnable_stops_the_manager(sim: SimServer, sim_kubeconfig: Path) -> None:
    async with connected(sim_kubeconfig) as client:
        manager = Manager(client, options())
        ran = anyio.Event()

        async def healthy() -> None:
            ran.set()
            await anyio.sleep_forever()

        async def broken() -> None:
            await ran.wait()
            raise OSError("device plugin socket vanished")

        manager.add_runnable(healthy, name="healthy", needs_leader=False)
        manager.add_runnable(broken, name="broken")
        with anyio.fail_after(30), pytest.raises(RunnableFailed, match="socket vanished"):
            await manager.run()
        with pytest.raises(RuntimeError, match="once"):
            await manager.run()


async def test_sigterm_shuts_down_gracefully_and_releases_the_lease(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    lease = unique("signal-lease")
    finished: list[str] = []
    started = anyio.Event()
    release = anyio.Event()
    async with connected(sim_kubeconfig) as client:
        election = LeaderElectionConfig(
            lease, "default", "signalled", lease_duration=30, renew_deadline=10, retry_period=0.1
        )
        manager = Manager(client, options(leader_election=election))

        async def reconcile(req: Request) -> None:
            started.set()
            await release.wait()
            finished.append(req.key)

        manager.controller(unique("signal")).for_(CONFIGMAPS).complete(reconcile)
        await client.create(CONFIGMAPS, configmap("in-flight"))
        codes: list[int] = []

        async def main() -> None:
            codes.append(await manager.run_until_signal())

        previous = signal.getsignal(signal.SIGTERM)
        async with anyio.create_task_group() as tg:
            tg.start_soon(main)
            with anyio.fail_after(30):
                await started.wait()
            # Only signal once the receiver is installed (else SIGTERM would kill pytest).
            await eventually(lambda: signal.getsignal(signal.SIGTERM) != previous)
            os.kill(os.getpid(), signal.SIGTERM)
            await eventually(manager.stopping.is_set, what="shutdown to begin")
            assert not finished, "the in-flight reconcile must not have been cut"
            release.set()
    assert codes == [0]
    assert finished == ["default/in-flight"], "in-flight reconcile drained"
    stored = sim.store.get("coordination.k8s.io/v1", "Lease", lease, "default")
    assert stored is not None
    assert not stored["spec"].get("holderIdentity"), "lease released on clean shutdown"


async def test_manager_client_is_shared(sim: SimServer, sim_kubeconfig: Path) -> None:
    async with connected(sim_kubeconfig) as client:
        manager = Manager(client, options())
        assert isinstance(manager.client, Client)
        assert manager.informer(CONFIGMAPS) is manager.informer(CONFIGMAPS)
        assert manager.informer(CONFIGMAPS, namespace="default") is not manager.informer(CONFIGMAPS)


async def test_generation_changed_ignores_the_controllers_own_status_writes(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    calls: list[int] = []
    async with connected(sim_kubeconfig) as client:
        manager = Manager(client, options())
        deployments = manager.informer(DEPLOYMENTS)

        async def reconcile(req: Request) -> None:
            obj = deployments.indexer.get(req.key)
            assert obj is not None
            generation = obj["metadata"]["generation"]
            calls.append(generation)
            await client.patch(
                DEPLOYMENTS,
                req.name,
                {"status": {"observedGeneration": generation}},
                namespace=req.namespace,
                subresource="status",
            )

        manager.controller(unique("status")).for_(DEPLOYMENTS, GENERATION_CHANGED).complete(
            reconcile
        )

        def cache_caught_up() -> bool:
            stored = sim.store.get("apps/v1", "Deployment", "web", "default")
            cached = deployments.indexer.get("default/web")
            return (
                stored is not None
                and cached is not None
                and cached["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
                and idle(manager)
            )

        await client.create(DEPLOYMENTS, deployment("web", "default", replicas=1))
        async with running(manager):
            await eventually(lambda: calls == [1] and cache_caught_up())
            status = (deployments.indexer.get("default/web") or {}).get("status") or {}
            assert status.get("observedGeneration") == 1, "the status write reached the cache"
            current = await client.get(DEPLOYMENTS, "web", "default")
            current["spec"]["replicas"] = 3
            await client.replace(DEPLOYMENTS, current)
            await eventually(lambda: calls == [1, 2] and cache_caught_up())


async def test_a_standbys_leader_only_queues_stay_empty(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    """Handlers attach when a controller starts: on a standby nothing is ever enqueued."""
    lease = unique("standby-lease")
    names = {identity: unique(f"standby-{identity}") for identity in ("leader", "standby")}

    def elect(identity: str) -> LeaderElectionConfig:
        return LeaderElectionConfig(
            lease_name=lease,
            lease_namespace="default",
            identity=identity,
            lease_duration=2.0,
            renew_deadline=1.5,
            retry_period=0.2,
        )

    async def reconcile(req: Request) -> None:
        return None

    async with connected(sim_kubeconfig) as client:
        managers = {}
        for identity, name in names.items():
            manager = Manager(client, options(leader_election=elect(identity)))
            manager.controller(name).for_(CONFIGMAPS).complete(reconcile)
            managers[identity] = manager
        async with running(managers["leader"]):
            await managers["leader"].elected.wait()
            async with running(managers["standby"]):
                await managers["standby"].synced.wait()
                for i in range(5):
                    await client.create(CONFIGMAPS, configmap(f"standby-{i}"))
                await eventually(
                    lambda: sample("workqueue_adds_total", name=names["leader"]) >= 5,
                    what="the leader to enqueue the ConfigMaps",
                )
                standby = managers["standby"].controllers[0]
                assert not managers["standby"].is_leader
                assert len(standby.queue) == 0 and standby.queue.num_waiting() == 0
                assert sample("workqueue_adds_total", name=names["standby"]) == 0
                assert sample("workqueue_depth", name=names["standby"]) == 0


async def test_a_controller_added_after_start_runs(sim: SimServer, sim_kubeconfig: Path) -> None:
    reconciled: list[str] = []

    async def reconcile(req: Request) -> None:
        reconciled.append(req.key)

    async with connected(sim_kubeconfig) as client:
        await client.create(CONFIGMAPS, configmap("late"))
        manager = Manager(client, options())
        manager.controller(unique("early")).for_(SECRETS).complete(reconcile)
        async with running(manager):
            await manager.elected.wait()
            name = unique("late")
            late = manager.controller(name).for_(CONFIGMAPS).complete(reconcile)
            assert manager.controllers[-1] is late
            await eventually(
                lambda: "default/late" in reconciled, what="the late controller to run"
            )
            assert late.started
            with pytest.raises(ValueError, match="already registered"):
                manager.controller(name).for_(CONFIGMAPS).complete(reconcile)


async def test_a_failing_informer_turns_readyz_false_within_the_threshold(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    fault = sim.faults.add("watch", "ConfigMap", 500)  # LISTs work: the cache syncs
    async with connected(sim_kubeconfig) as client:
        manager = Manager(client, options(informer_failure_threshold=0.3))

        async def reconcile(req: Request) -> None:
            return None

        manager.controller(unique("failing")).for_(CONFIGMAPS).complete(reconcile)
        async with running(manager):
            await manager.synced.wait()
            assert manager.health_server is not None
            url = manager.health_server.url
            informer = manager.informers.informers[0]
            await eventually(lambda: fault.fired >= 1, what="a failing WATCH")

            await eventually(lambda: informer.failing_for() > 0.3, what="the threshold")
            not_ready = await http_get(f"{url}/readyz")
            assert not_ready.status_code == 500 and "informers-healthy" in not_ready.text
            assert sample("gpustack_informer_failing_seconds", informer="configmaps") > 0.3
            sim.faults.remove(fault)
            await client.create(CONFIGMAPS, configmap("wakes-the-watch"))
            await eventually(lambda: informer.failing_for() == 0, what="the watch to recover")
            assert (await http_get(f"{url}/readyz")).status_code == 200


async def test_a_cache_holding_a_deleted_object_is_listed_again_and_readyz_says_so(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    """A Node the cache still holds but the API server deleted: the object made for it (owned
    by it) is deleted by the garbage collector as soon as it is made, and made again, without
    end. Its key churns: the controller lists its kinds again, which drops the Node, and
    ``/readyz`` fails (``reconciles-settling``) until the churn is a window behind."""
    made: list[str] = []
    async with connected(sim_kubeconfig) as client:
        manager = Manager(client, options(churn_limit=15, churn_window=1.0))
        nodes = manager.informer(NODES)

        async def reconcile(req: Request) -> None:
            node = nodes.indexer.get(req.key)
            if node is None:
                return
            owner = {"apiVersion": "v1", "kind": "Node", "name": req.name}
            owner["uid"] = node["metadata"]["uid"]
            body = configmap(f"for-{req.name}", ownerReferences=[owner])
            with contextlib.suppress(AlreadyExists):
                await client.create(CONFIGMAPS, body)
                made.append(req.name)

        def for_node(cm: dict[str, Any]) -> list[Request]:
            refs = cm["metadata"].get("ownerReferences") or []
            return [Request.of(r["name"]) for r in refs if r.get("kind") == "Node"]

        controller = (
            manager.controller(unique("per-node"))
            .for_(NODES)
            .watches(CONFIGMAPS, for_node)
            .complete(reconcile)
        )
        await client.create(NODES, {"metadata": {"name": "real"}})
        async with running(manager):
            await manager.elected.wait()
            assert manager.health_server is not None
            url = manager.health_server.url
            await eventually(lambda: made == ["real"] and idle(manager), what="the steady state")
            lists = nodes.list_count
            ghost = {"apiVersion": "v1", "kind": "Node"}
            ghost["metadata"] = {"name": "ghost", "uid": "a-deleted-node", "resourceVersion": "1"}
            nodes.indexer.upsert(ghost)  # what a lost DELETED event leaves behind
            controller.queue.add("ghost")
            await eventually(lambda: nodes.indexer.get("ghost") is None, what="the ghost dropped")
            assert nodes.list_count > lists
            assert made.count("ghost") >= 15, "the loop ran until the key churned"
            not_ready = await http_get(f"{url}/readyz")
            assert not_ready.status_code == 500 and "reconciles-settling" in not_ready.text
            await eventually(lambda: idle(manager), what="the loop to stop")
            after = len(made)
            await eventually(
                lambda: manager.controllers[0].churn.churning() == {},
                what="the churn a window behind",
            )
            assert (await http_get(f"{url}/readyz")).status_code == 200
            assert len(made) == after
            assert [c["metadata"]["name"] for c in sim.store.list("v1", "ConfigMap", "default")
                    if c["metadata"]["name"].startswith("for-")] == ["for-real"]  # fmt: skip
