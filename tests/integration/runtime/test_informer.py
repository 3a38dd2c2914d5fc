"""Informer semantics against the simulated API server, over real sockets.

Request counters of the simulator prove what was (not) sent; an injected sleep function
records every backoff delay and waits only a few milliseconds, so backoff and Retry-After are
checked without waiting for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from gpustack_operator.runtime.backoff import BackoffPolicy
from gpustack_operator.runtime.cache import object_key
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.informer import (
    HandlerFuncs,
    Informer,
    InformerFactory,
    ReflectorSettings,
)
from gpustack_operator.runtime.resources import CONFIGMAPS, NODES
from gpustack_sim.apiserver.server import SimServer

pytestmark = pytest.mark.anyio


async def eventually(condition: Callable[[], bool], what: str, deadline: float = 60.0) -> None:
    """Return once *condition()* holds; fail after *deadline* seconds."""
    with anyio.move_on_after(deadline):
        while not condition():  # noqa: ASYNC110 - polling plain state with a deadline
            await anyio.sleep(0.005)
        return
    raise AssertionError(f"timed out after {deadline:g}s waiting for {what}")


class SleepRecorder:
    """Records each requested delay (and the sync state then); sleeps at most 10 ms."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.synced_then: list[bool] = []
        self.informer: Informer | None = None

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        self.synced_then.append(bool(self.informer and self.informer.has_synced))
        await anyio.sleep(min(delay, 0.01))


class Recorder:
    """An event handler that records (event, name, payload) tuples."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.updates: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.deleted: list[dict[str, Any]] = []

    def on_add(self, obj: dict[str, Any]) -> None:
        self.events.append(("add", object_key(obj)))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.events.append(("update", object_key(new)))
        self.updates.append((old, new))

    def on_delete(self, obj: dict[str, Any]) -> None:
        self.events.append(("delete", object_key(obj)))
        self.deleted.append(obj)

    def of(self, kind: str) -> list[str]:
        return [key for event, key in self.events if event == kind]


def settings(sleep: SleepRecorder, **overrides: Any) -> ReflectorSettings:
    values: dict[str, Any] = {
        "inactivity_timeout": 10.0,
        "backoff": BackoffPolicy(initial=0.01, cap=1.0, jitter=0.0),
        "sleep": sleep,
    }
    values.update(overrides)
    return ReflectorSettings(**values)


def cm(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "labels": dict(labels)}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": "0"}}


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(watch_history=10, bookmark_interval=3600.0) as server:
        yield server


@pytest.fixture
async def client(sim: SimServer, tmp_path: Path) -> AsyncIterator[Client]:
    c = await Client.connect(sim.write_kubeconfig(tmp_path / "kubeconfig"), timeout=5.0)
    try:
        yield c
    finally:
        await c.close()


@asynccontextmanager
async def running(*informers: Informer | InformerFactory) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        for informer in informers:
            tg.start_soon(informer.run)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


def make(
    client: Client, sleep: SleepRecorder | None = None, **kwargs: Any
) -> tuple[Informer, Recorder, SleepRecorder]:
    sleep = sleep or SleepRecorder()
    overrides = kwargs.pop("settings", {})
    informer = Informer(
        client, kwargs.pop("resource", CONFIGMAPS), settings=settings(sleep, **overrides), **kwargs
    )
    sleep.informer = informer
    recorder = Recorder()
    informer.add_event_handler(recorder)
    return informer, recorder, sleep


# --- list, sync, events ---------------------------------------------------------------------


async def test_paged_initial_list_then_events_with_old_and_new(
    sim: SimServer, client: Client
) -> None:
    for i in range(7):
        sim.store.create(cm(f"c{i}"))
    informer, rec, _ = make(client, settings={"page_size": 3})
    assert not informer.has_synced
    async with running(informer):
        assert await informer.wait_for_sync(60)
        assert sorted(rec.of("add")) == [f"default/c{i}" for i in range(7)]
        assert sim.counters.get("list", "ConfigMap") == 3  # pages of 3, 3 and 1
        late = Recorder()
        informer.add_event_handler(late)
        assert sorted(late.of("add")) == sorted(rec.of("add"))

        live = sim.store.get("v1", "ConfigMap", "c1", "default")
        assert live is not None
        live["data"] = {"v": "1"}
        sim.store.update(live)
        sim.store.delete("v1", "ConfigMap", "c2", "default")
        sim.store.create(cm("new"))
        await eventually(lambda: ("add", "default/new") in rec.events, "the ADDED event")
        old, new = rec.updates[-1]
        assert (old["data"], new["data"]) == ({"v": "0"}, {"v": "1"})
        assert rec.of("delete") == ["default/c2"]
        assert informer.indexer.get("default/c2") is None
        assert informer.indexer.get("default/c1")["data"] == {"v": "1"}  # type: ignore[index]
        assert late.events[-3:] == rec.events[-3:]
    assert sim.counters.get("list", "ConfigMap") == 3


async def test_not_synced_while_list_fails_and_backoff_grows(
    sim: SimServer, client: Client
) -> None:
    sim.store.create(cm("a"))
    sim.faults.add(verb="list", kind="ConfigMap", status=500, count=4)
    informer, rec, sleep = make(client)
    async with running(informer):
        assert await informer.wait_for_sync(60)
    assert sleep.delays == pytest.approx([0.01, 0.02, 0.04, 0.08])
    assert sleep.synced_then == [False] * 4
    assert rec.events == [("add", "default/a")], "nothing is deleted before the first LIST"
    assert sim.counters.get("list", "ConfigMap") == 5


async def test_retry_after_is_honoured_on_list_and_watch(sim: SimServer, client: Client) -> None:
    sim.faults.add(verb="list", kind="ConfigMap", status=429, retry_after=3, count=1)
    sim.faults.add(verb="watch", kind="ConfigMap", status=429, retry_after=5, count=1)
    informer, rec, sleep = make(client)
    async with running(informer):
        assert await informer.wait_for_sync(60)
        await eventually(lambda: sim.counters.get("watch", "ConfigMap") >= 2, "a second watch")
        sim.store.create(cm("after"))
        await eventually(lambda: rec.of("add") == ["default/after"], "the event after 429s")
    assert sleep.delays[:2] == [3.0, 5.0]


async def test_jittered_default_backoff_stays_in_range(sim: SimServer, client: Client) -> None:
    sim.faults.add(verb="list", kind="ConfigMap", status=503, count=3)
    sleep = SleepRecorder()
    informer = Informer(client, CONFIGMAPS, settings=ReflectorSettings(sleep=sleep))
    async with running(informer):
        assert await informer.wait_for_sync(60)
    for delay, base in zip(sleep.delays, (0.8, 1.6, 3.2), strict=True):
        assert base <= delay <= 2 * base


# --- watch recovery ---------------------------------------------------------------------


async def test_watch_cut_mid_stream_resumes_from_last_rv_without_relist(
    sim: SimServer, client: Client
) -> None:
    sim.store.create(cm("a"))
    sim.faults.add(
        verb="watch", kind="ConfigMap", status=None, cut_watch=True, after_events=2, count=1
    )
    informer, rec, sleep = make(client)
    async with running(informer):
        assert await informer.wait_for_sync(60)
        sim.store.create(cm("b"))
        sim.store.create(cm("c"))  # the second event: the stream is cut right after it
        await eventually(lambda: sim.counters.get("watch", "ConfigMap") == 2, "the re-watch")
        sim.store.create(cm("d"))
        await eventually(lambda: "default/d" in rec.of("add"), "the event after the cut")
    assert sim.counters.get("list", "ConfigMap") == 1, "a cut watch must not re-LIST"
    # Resumed exactly after c: nothing replayed (a replay would show up as updates).
    assert rec.events == [("add", f"default/{n}") for n in "abcd"]
    assert sleep.delays == [], "progress was made, so no backoff"


async def test_an_object_that_leaves_the_cache_is_released_after_every_handler(
    sim: SimServer, client: Client
) -> None:
    """``on_released`` is told (old, new) of a replaced object and (old, None) of a removed
    one (the cached version and the watch event's last state), after every handler saw the
    event; never on resync."""
    sim.store.create(cm("kept"))
    sim.store.create(cm("doomed"))
    informer, rec, _ = make(client)
    released: list[tuple[str, str | None, int]] = []

    def on_released(old: dict[str, Any], new: dict[str, Any] | None) -> None:
        assert informer.indexer.get(object_key(old)) is new  # the cache holds new (or none)
        value = new["data"]["v"] if new is not None else None
        released.append((old["metadata"]["resourceVersion"], value, len(rec.events)))

    informer.on_released(on_released)
    async with running(informer):
        assert await informer.wait_for_sync(60)
        first = informer.indexer.get("default/kept")
        assert first is not None
        informer.resync()
        assert released == []
        live = sim.store.get("v1", "ConfigMap", "kept", "default")
        assert live is not None
        live["data"] = {"v": "1"}
        sim.store.update(live)
        sim.store.delete("v1", "ConfigMap", "doomed", "default")
        await eventually(lambda: len(released) == 3, "the releases")
        handled = len(rec.events)
        assert released[0] == (first["metadata"]["resourceVersion"], "1", handled - 1)
        assert [r[1:] for r in released[1:]] == [(None, handled)] * 2


async def test_a_paged_list_is_transformed_page_by_page(sim: SimServer, client: Client) -> None:
    """Each page's items are trimmed before the next page is asked for: a cold start never
    holds the whole list untrimmed."""
    for i in range(7):
        sim.store.create(cm(f"c{i}"))
    log: list[str] = []
    original = client.list

    async def list_page(*args: Any, **kwargs: Any) -> Any:
        log.append("page")
        return await original(*args, **kwargs)

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        log.append("item")
        return {**obj, "trimmed": True}

    client.list = list_page  # type: ignore[method-assign]
    informer, _, _ = make(client, settings={"page_size": 3}, transform=transform)
    async with running(informer):
        assert await informer.wait_for_sync(60)
    assert "".join(x[0] for x in log) == "piiipiiipi"
    assert all(o["trimmed"] for o in informer.indexer.list()) and len(informer.indexer) == 7


async def test_history_exceeded_relists_and_reports_objects_deleted_in_the_gap(
    sim: SimServer, client: Client
) -> None:
    for name in ("keep", "doomed", "changed"):
        sim.store.create(cm(name))
    sim.faults.add(
        verb="watch", kind="ConfigMap", status=None, cut_watch=True, after_events=1, count=1
    )
    outage = sim.faults.add(verb="watch", kind="ConfigMap", status=500)
    informer, rec, _ = make(client)
    async with running(informer):
        assert await informer.wait_for_sync(60)
        sim.store.create(cm("trigger"))  # delivered, then the stream is cut
        await eventually(lambda: outage.fired >= 1, "the watch outage")
        sim.store.delete("v1", "ConfigMap", "doomed", "default")
        changed = sim.store.get("v1", "ConfigMap", "changed", "default")
        assert changed is not None
        changed["data"] = {"v": "gap"}
        sim.store.update(changed)
        for i in range(15):  # more than the 10 events the simulator retains
            sim.store.create(cm(f"filler{i}"))
        sim.faults.remove(outage)
        await eventually(lambda: rec.of("delete") == ["default/doomed"], "the delete event")
        await eventually(lambda: len(informer.indexer) == 18, "the re-LISTed cache")
        assert sim.counters.get("list", "ConfigMap") == 2
        assert {"default/keep", "default/changed"} <= set(rec.of("update"))
        assert informer.indexer.get("default/changed")["data"] == {"v": "gap"}  # type: ignore[index]
        assert rec.deleted[0]["metadata"]["name"] == "doomed"
        sim.store.create(cm("live-again"))
        await eventually(lambda: "default/live-again" in rec.of("add"), "events after re-LIST")


async def test_relist_tries_last_rv_first_then_empty_rv(sim: SimServer, client: Client) -> None:
    list_rvs: list[str | None] = []
    original = client.list_all

    async def spy(*args: Any, **kwargs: Any) -> Any:
        list_rvs.append(kwargs.get("resource_version"))
        return await original(*args, **kwargs)

    client.list_all = spy  # type: ignore[method-assign]
    sim.faults.add(
        verb="watch", kind="ConfigMap", status=None, cut_watch=True, after_events=1, count=1
    )
    informer, rec, _ = make(client)
    async with running(informer):
        assert await informer.wait_for_sync(60)
        sim.faults.add(verb="watch", kind="ConfigMap", status=410, count=1)  # in-stream ERROR
        sim.faults.add(verb="list", kind="ConfigMap", status=410, count=1)
        sim.store.create(cm("x"))
        await eventually(lambda: len(list_rvs) == 3, "two re-LISTs")
        rv_after_x = informer.last_resource_version
        sim.store.create(cm("y"))
        await eventually(lambda: "default/y" in rec.of("add"), "events after the re-LIST")
    assert list_rvs[0] is None  # the first LIST: a consistent read
    assert list_rvs[1] not in (None, "")  # the re-LIST at the last RV ...
    assert list_rvs[2] is None  # ... and, that being gone too, at ""
    assert int(rv_after_x) >= int(list_rvs[1])


async def test_repeated_410_after_relist_backs_off(sim: SimServer, client: Client) -> None:
    sim.faults.add(verb="watch", kind="ConfigMap", status=410, count=3)
    informer, rec, sleep = make(client)
    async with running(informer):
        await eventually(lambda: sim.counters.get("watch", "ConfigMap") >= 4, "the fourth watch")
        sim.store.create(cm("z"))
        await eventually(lambda: "default/z" in rec.of("add"), "events once 410s stop")
    # First 410: immediate re-LIST. The next ones right after a LIST: growing backoff.
    assert sleep.delays == pytest.approx([0.01, 0.02])
    assert sim.counters.get("list", "ConfigMap") == 4


async def test_watch_500s_back_off_growing_then_reset_after_progress(
    sim: SimServer, client: Client
) -> None:
    sim.faults.add(verb="watch", kind="ConfigMap", status=500, count=2)
    sim.faults.add(
        verb="watch", kind="ConfigMap", status=None, cut_watch=True, after_events=1, count=1
    )
    sim.faults.add(verb="watch", kind="ConfigMap", status=500, count=3)
    informer, rec, sleep = make(client)
    async with running(informer):
        assert await informer.wait_for_sync(60)
        await eventually(lambda: sim.counters.get("watch", "ConfigMap") == 3, "the third watch")
        sim.store.create(cm("a"))  # delivered on watch 3, which is then cut
        await eventually(lambda: sim.counters.get("watch", "ConfigMap") == 7, "the 7th watch")
        sim.store.create(cm("b"))
        await eventually(lambda: "default/b" in rec.of("add"), "events after the outage")
    assert sleep.delays == pytest.approx([0.01, 0.02, 0.01, 0.02, 0.04])
    assert sim.counters.get("list", "ConfigMap") == 1, "watch errors re-watch, never re-LIST"


async def test_silent_watch_is_restarted_after_inactivity_timeout(
    sim: SimServer, client: Client
) -> None:
    informer, rec, sleep = make(client, settings={"inactivity_timeout": 0.2})
    async with running(informer):
        assert await informer.wait_for_sync(60)
        await eventually(lambda: sim.counters.get("watch", "ConfigMap") >= 3, "watch restarts")
        sim.store.create(cm("a"))
        await eventually(lambda: rec.of("add") == ["default/a"], "events after stalls")
    assert sim.counters.get("list", "ConfigMap") == 1
    assert sleep.delays == []


async def test_watch_whose_headers_never_come_times_out(sim: SimServer, tmp_path: Path) -> None:
    kubeconfig = sim.write_kubeconfig(tmp_path / "kc")
    # A timeout the list never reaches even on a loaded machine; a watch delay well beyond it.
    async with await Client.connect(kubeconfig, timeout=1.0) as c:
        sim.faults.add(verb="watch", kind="ConfigMap", status=None, delay=1.5, count=1)
        informer, rec, sleep = make(c)
        async with running(informer):
            assert await informer.wait_for_sync(60)
            await eventually(lambda: sim.counters.get("watch", "ConfigMap") >= 2, "a re-watch")
            sim.store.create(cm("a"))
            await eventually(lambda: rec.of("add") == ["default/a"], "events after the stall")
        assert len(sleep.delays) == 1


async def test_bookmarks_advance_the_resource_version_and_clean_ends_rewatch(
    tmp_path: Path,
) -> None:
    sim = SimServer(bookmark_interval=0.05)
    async with sim, await Client.connect(sim.write_kubeconfig(tmp_path / "kc")) as c:
        calls: list[dict[str, Any]] = []
        original = c.watch

        def spy(*args: Any, **kwargs: Any) -> Any:
            calls.append(kwargs)
            return original(*args, **kwargs)

        c.watch = spy  # type: ignore[method-assign]
        informer, rec, _ = make(c, settings={"watch_timeout_range": (1, 2)})
        async with running(informer):
            assert await informer.wait_for_sync(60)
            listed_rv = informer.last_resource_version
            for i in range(3):  # other kinds move the global resourceVersion
                sim.store.create(
                    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}}
                )
            target = str(sim.store.resource_version)
            await eventually(
                lambda: informer.last_resource_version == target, "a bookmark at the new RV"
            )
            await eventually(lambda: len(calls) >= 2, "a re-watch after the server's timeout")
        assert rec.events == []
        assert sim.counters.get("list", "ConfigMap") == 1
        assert int(target) > int(listed_rv)
        assert calls[1]["resource_version"] == target, "re-watch starts at the bookmark"
        assert all(call["allow_bookmarks"] for call in calls)


async def test_watch_asks_random_timeout_between_300_and_600(
    sim: SimServer, client: Client
) -> None:
    timeouts: list[int] = []
    original = client.watch

    def spy(*args: Any, **kwargs: Any) -> Any:
        timeouts.append(kwargs["timeout_seconds"])
        return original(*args, **kwargs)

    client.watch = spy  # type: ignore[method-assign]
    sim.faults.add(verb="watch", kind="ConfigMap", status=500, count=20)
    values = iter([0.0, 0.999999, 0.5] + [0.25] * 100)
    informer = Informer(
        client,
        CONFIGMAPS,
        settings=ReflectorSettings(
            sleep=SleepRecorder(), rand=lambda: next(values), backoff=BackoffPolicy(jitter=0.0)
        ),
    )
    async with running(informer):
        await eventually(lambda: len(timeouts) >= 3, "three watches")
    assert timeouts[:3] == [300, 599, 450]
    assert all(300 <= t < 600 for t in timeouts)


# --- scoping, transform, handlers, resync, factory ----------------------------------------


async def test_label_field_and_namespace_scoping(sim: SimServer, client: Client) -> None:
    sim.store.create(cm("a", app="x"))
    sim.store.create(cm("b", app="y"))
    sim.store.create(cm("c", namespace="kube-system", app="x"))
    by_label, labelled, _ = make(client, label_selector="app=x")
    by_field, named, _ = make(client, field_selector="metadata.name=b")
    in_ns, namespaced, _ = make(client, namespace="kube-system")
    async with running(by_label, by_field, in_ns):
        for informer in (by_label, by_field, in_ns):
            assert await informer.wait_for_sync(60)
        assert sorted(labelled.of("add")) == ["default/a", "kube-system/c"]
        assert named.of("add") == ["default/b"]
        assert namespaced.of("add") == ["kube-system/c"]
        relabelled = sim.store.get("v1", "ConfigMap", "a", "default")
        assert relabelled is not None
        relabelled["metadata"]["labels"] = {"app": "z"}
        sim.store.update(relabelled)
        await eventually(lambda: labelled.of("delete") == ["default/a"], "leaving the selector")
        assert by_label.indexer.keys() == ["kube-system/c"]


async def test_default_transform_drops_managed_fields(sim: SimServer, client: Client) -> None:
    await client.apply(
        CONFIGMAPS,
        {
            "metadata": {
                "name": "a",
                "namespace": "default",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            }
        },
        field_manager="test",
    )
    raw = await client.get(CONFIGMAPS, "a", "default")
    assert raw["metadata"].get("managedFields"), "precondition: the server tracks managers"
    stripped, _, _ = make(client)
    untouched, _, _ = make(client, transform=None)
    custom, _, _ = make(client, transform=lambda o: {**o, "data": {"seen": "yes"}})
    async with running(stripped, untouched, custom):
        for informer in (stripped, untouched, custom):
            assert await informer.wait_for_sync(60)
    cached = stripped.indexer.get("default/a")
    assert cached is not None and "managedFields" not in cached["metadata"]
    assert cached["metadata"].get("annotations", {}) == {}
    assert untouched.indexer.get("default/a")["metadata"]["managedFields"]  # type: ignore[index]
    assert custom.indexer.get("default/a")["data"] == {"seen": "yes"}  # type: ignore[index]


async def test_failing_handler_does_not_stop_the_informer(sim: SimServer, client: Client) -> None:
    def explode(obj: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    informer, rec, _ = make(client)
    informer.add_event_handler(HandlerFuncs(add=explode))
    async with running(informer):
        assert await informer.wait_for_sync(60)
        sim.store.create(cm("a"))
        sim.store.create(cm("b"))
        await eventually(lambda: rec.of("add") == ["default/a", "default/b"], "both events")


async def test_resync_replays_updates_for_cached_objects(sim: SimServer, client: Client) -> None:
    sim.store.create(cm("a"))
    sim.store.create(cm("b"))
    informer, rec, _ = make(client, resync_period=0.05)
    async with running(informer):
        assert await informer.wait_for_sync(60)
        await eventually(lambda: len(rec.of("update")) >= 4, "two periodic resyncs")
    old, new = rec.updates[0]
    assert old is new
    informer.resync()
    assert len(rec.of("update")) >= 6


async def test_indexes_are_kept_current(sim: SimServer, client: Client) -> None:
    sim.store.create(cm("a", app="x"))
    informer, _, _ = make(client, indexers={"app": lambda o: [o["metadata"]["labels"]["app"]]})
    async with running(informer):
        assert await informer.wait_for_sync(60)
        sim.store.create(cm("b", app="x"))
        await eventually(lambda: len(informer.indexer.by_index("app", "x")) == 2, "indexing b")


async def test_factory_shares_informers_and_starts_late_ones(
    sim: SimServer, client: Client
) -> None:
    sim.store.create(cm("a"))
    sim.store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    factory = InformerFactory(client, settings=settings(SleepRecorder()))
    first = factory.informer(CONFIGMAPS)
    assert factory.informer(CONFIGMAPS) is first
    assert factory.informer(CONFIGMAPS, namespace="default") is not first
    async with running(factory):
        assert await factory.wait_for_sync(60)
        late = factory.informer(NODES)
        assert await late.wait_for_sync(60)
        assert late.indexer.keys() == ["n1"]
        assert await factory.wait_for_sync(60)
    assert len(factory.informers) == 3
    assert sim.counters.get("list", "ConfigMap") == 2


async def test_wait_for_sync_times_out_when_listing_never_succeeds(
    sim: SimServer, client: Client
) -> None:
    sim.faults.add(verb="list", kind="ConfigMap", status=500)
    informer, _, _ = make(client)
    async with running(informer):
        assert not await informer.wait_for_sync(0.2)
    with pytest.raises(ValueError, match="cluster-scoped"):
        Informer(client, NODES, namespace="default")


async def test_api_server_restart_is_survived_without_relist(
    sim: SimServer, client: Client
) -> None:
    sim.store.create(cm("a"))
    informer, rec, sleep = make(client)
    async with running(informer):
        assert await informer.wait_for_sync(60)
        await eventually(lambda: sim.counters.get("watch", "ConfigMap") == 1, "the watch")
        await sim.stop()  # watches end, new connections are refused
        await eventually(lambda: len(sleep.delays) >= 3, "three refused attempts")
        sim.store.create(cm("while-down"))
        await sim.start()  # same port, same store and event history
        await eventually(lambda: "default/while-down" in rec.of("add"), "the missed event")
    assert sleep.delays[:3] == pytest.approx([0.01, 0.02, 0.04])
    assert sim.counters.get("list", "ConfigMap") == 1
    assert rec.of("delete") == []


@pytest.mark.parametrize("anyio_backend", [("asyncio", {"use_uvloop": True})])
async def test_cut_watch_recovers_on_uvloop(sim: SimServer, client: Client) -> None:
    """The product runs on uvloop: the stream-cut path must behave the same there."""
    assert type(asyncio.get_running_loop()).__module__.startswith("uvloop")
    sim.faults.add(
        verb="watch", kind="ConfigMap", status=None, cut_watch=True, after_events=1, count=1
    )
    informer, rec, _ = make(client)
    async with running(informer):
        assert await informer.wait_for_sync(60)
        sim.store.create(cm("a"))
        await eventually(lambda: sim.counters.get("watch", "ConfigMap") == 2, "the re-watch")
        sim.store.create(cm("b"))
        await eventually(lambda: rec.of("add") == ["default/a", "default/b"], "both events")
    assert sim.counters.get("list", "ConfigMap") == 1


async def test_a_deleted_object_leaves_the_cache_whatever_the_faults(tmp_path: Path) -> None:
    """Nodes created and deleted while the watches are cut, delayed, refused and end every
    second, with a bookmark due whenever the server is busy: once the churn stops the cache
    holds exactly the server's Nodes. A server that sent a bookmark while events were still
    queued for the watch (its resourceVersion past them) and then ended the stream lost
    them for good: the re-watch started after them (docs/simulator.md, "What it implements")."""
    sim = SimServer(bookmark_interval=0.002, watch_history=10_000, seed=7)
    async with sim, await Client.connect(sim.write_kubeconfig(tmp_path / "kc")) as c:
        informer, _, _ = make(
            c, resource=NODES, settings={"watch_timeout_range": (1, 2), "min_watch_duration": 0}
        )
        sim.faults.add(verb="watch", status=None, delay=0.05, write_delay=0.02, share=0.5)
        sim.faults.add(verb="watch", status=None, cut_watch=True, after_events=7, share=0.2)
        sim.faults.add(verb="*", status=500, share=0.1)
        async with running(informer):
            assert await informer.wait_for_sync(60)
            for i in range(1500):
                name = f"n{i}"
                sim.store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
                if i % 3:
                    sim.store.delete("v1", "Node", f"n{i - 1}")
                if i % 5 == 0:
                    await anyio.sleep(0.01)
            sim.faults.clear()
            on_server = {o["metadata"]["name"] for o in sim.store.list("v1", "Node")}
            await eventually(
                lambda: {o["metadata"]["name"] for o in informer.indexer.list()} == on_server,
                "the cache to hold the server's Nodes",
                deadline=15.0,
            )
