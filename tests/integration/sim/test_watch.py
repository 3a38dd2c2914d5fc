"""WATCH: initial state, resume from an RV, 410 beyond history, bookmarks, timeouts, selectors."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.integration.sim.helpers import call, watch_lines

pytestmark = pytest.mark.anyio


def node(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def summary(events: list[dict]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


async def test_watch_from_empty_rv_sends_current_state_then_live_events(sim, kube):
    sim.store.create(node("a"))

    async def change():
        sim.store.create(node("b"))
        sim.store.delete("v1", "Node", "a")

    events = await watch_lines(
        kube, "/api/v1/nodes", {"resourceVersion": ""}, stop_after=3, on_ready=change
    )
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    assert events[0]["object"]["kind"] == "Node" and events[0]["object"]["apiVersion"] == "v1"
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs)


async def test_watch_from_list_rv_and_resume_from_a_later_rv(sim, kube):
    listed = (await call(kube, "GET", "/api/v1/nodes")).json()
    list_rv = listed["metadata"]["resourceVersion"]
    sim.store.create(node("a"))
    sim.store.create(node("b"))
    sim.store.create(node("c"))
    events = await watch_lines(kube, "/api/v1/nodes", {"resourceVersion": list_rv}, stop_after=3)
    assert summary(events) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    resume_rv = events[0]["object"]["metadata"]["resourceVersion"]
    again = await watch_lines(kube, "/api/v1/nodes", {"resourceVersion": resume_rv}, stop_after=2)
    assert summary(again) == [("ADDED", "b"), ("ADDED", "c")]


async def test_watch_beyond_history_gets_in_stream_410():
    async with SimServer(watch_history=2) as small, httpx.AsyncClient(base_url=small.url) as c:
        start = small.store.resource_version
        for i in range(5):
            small.store.create(node(f"n{i}"))
        resp = await c.get("/api/v1/nodes", params={"watch": "1", "resourceVersion": str(start)})
        assert resp.status_code == 200
        events = [json.loads(line) for line in resp.text.splitlines()]
        assert len(events) == 1 and events[0]["type"] == "ERROR"
        status = events[0]["object"]
        assert status["kind"] == "Status" and status["code"] == 410
        assert status["reason"] == "Expired"
        assert "too old resource version" in status["message"]
        # the retained tail still works
        recent = str(small.store.resource_version - 1)
        resp = await c.get(
            "/api/v1/nodes",
            params={"watch": "1", "resourceVersion": recent, "timeoutSeconds": "0.2"},
        )
        assert [json.loads(x)["type"] for x in resp.text.splitlines()] == ["ADDED"]


async def test_timeout_seconds_ends_the_stream_cleanly(sim, kube):
    events = await watch_lines(
        kube,
        "/api/v1/nodes",
        {"resourceVersion": str(sim.store.resource_version), "timeoutSeconds": "1"},
    )
    assert events == []


async def test_bookmarks_carry_the_current_rv():
    async with SimServer(bookmark_interval=0.05) as fast, httpx.AsyncClient(base_url=fast.url) as c:
        fast.store.create(node("a"))
        rv = str(fast.store.resource_version)
        fast.store.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "other", "namespace": "default"},
            }
        )
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true"}
        async with c.stream("GET", "/api/v1/nodes", params=params) as resp:
            with anyio.fail_after(30):
                async for line in resp.aiter_lines():
                    event = json.loads(line)
                    break
        assert event["type"] == "BOOKMARK"
        assert event["object"]["kind"] == "Node"
        assert event["object"]["metadata"] == {"resourceVersion": str(fast.store.resource_version)}
        # without allowWatchBookmarks there are none
        params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "0.3"}
        assert (await c.get("/api/v1/nodes", params=params)).text == ""


async def test_label_selector_watch_turns_updates_into_added_and_deleted(sim, kube):
    sim.store.create(node("a", gpu="yes"))
    sim.store.create(node("b"))
    rv = str(sim.store.resource_version)

    def relabel(name: str, labels: dict) -> None:
        obj = sim.store.get("v1", "Node", name)
        obj["metadata"]["labels"] = labels
        sim.store.update(obj)

    relabel("b", {"gpu": "yes"})  # starts matching -> ADDED
    relabel("a", {"gpu": "no"})  # stops matching -> DELETED
    relabel("b", {"gpu": "yes", "x": "1"})  # still matching -> MODIFIED
    relabel("a", {"gpu": "no", "x": "1"})  # never matching -> nothing
    sim.store.delete("v1", "Node", "b")
    events = await watch_lines(
        kube, "/api/v1/nodes", {"resourceVersion": rv, "labelSelector": "gpu=yes"}, stop_after=4
    )
    assert summary(events) == [
        ("ADDED", "b"),
        ("DELETED", "a"),
        ("MODIFIED", "b"),
        ("DELETED", "b"),
    ]


async def test_namespaced_watch_and_field_selector(sim, kube):
    rv = str(sim.store.resource_version)
    for ns in ("kube-system", "default"):
        for name in ("x", "y"):
            sim.store.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns},
                }
            )
    events = await watch_lines(
        kube,
        "/api/v1/namespaces/default/configmaps",
        {"resourceVersion": rv, "fieldSelector": "metadata.name=y"},
        stop_after=1,
    )
    assert summary(events) == [("ADDED", "y")]
    assert events[0]["object"]["metadata"]["namespace"] == "default"


async def test_watch_of_a_custom_resource_rewrites_api_version(sim, kube):
    if sim.registry.lookup("kueue.x-k8s.io", "v1beta1", "resourceflavors") is None:
        pytest.skip("Kueue CRDs not available (../shared/crds is absent)")
    rv = str(sim.store.resource_version)
    sim.store.create(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "f"},
            "spec": {},
        }
    )
    versions = [i.version for i in sim.registry.versions_of("kueue.x-k8s.io", "resourceflavors")]
    for version in versions:
        events = await watch_lines(
            kube,
            f"/apis/kueue.x-k8s.io/{version}/resourceflavors",
            {"resourceVersion": rv},
            stop_after=1,
        )
        assert events[0]["object"]["apiVersion"] == f"kueue.x-k8s.io/{version}"


async def test_watch_ends_when_the_server_stops(sim, kube):
    async def stop():
        await sim.stop()

    events = await watch_lines(
        kube, "/api/v1/nodes", {"resourceVersion": str(sim.store.resource_version)}, on_ready=stop
    )
    assert events == []


async def test_send_initial_events_ends_with_a_marked_bookmark(sim, kube):
    sim.store.create(node("a"))
    sim.store.create(node("b"))
    rv = str(sim.store.resource_version)
    events = await watch_lines(
        kube,
        "/api/v1/nodes",
        {
            "sendInitialEvents": "true",
            "allowWatchBookmarks": "true",
            "resourceVersionMatch": "NotOlderThan",
            "resourceVersion": "",
        },
        stop_after=3,
    )
    assert summary(events)[:2] == [("ADDED", "a"), ("ADDED", "b")]
    end = events[2]
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"] == {
        "resourceVersion": rv,
        "annotations": {"k8s.io/initial-events-end": "true"},
    }


async def test_table_watch_sends_one_row_tables_with_headers_first(sim):
    sim.store.create(node("a"))
    sim.store.create(node("b"))
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    async with httpx.AsyncClient(base_url=sim.url, headers={"Accept": accept}) as client:
        resp = await client.get(
            "/api/v1/nodes", params={"watch": "1", "resourceVersion": "0", "timeoutSeconds": "0.2"}
        )
    events = [json.loads(line) for line in resp.text.splitlines()]
    assert [e["object"]["kind"] for e in events] == ["Table", "Table"]
    assert events[0]["object"]["columnDefinitions"]
    assert not events[1]["object"].get("columnDefinitions")
    assert [len(e["object"]["rows"]) for e in events] == [1, 1]


async def test_watch_on_a_named_object_follows_only_that_object(sim, kube):
    rv = str(sim.store.resource_version)
    sim.store.create(node("a"))
    sim.store.create(node("b"))
    sim.store.delete("v1", "Node", "b")
    events = await watch_lines(kube, "/api/v1/nodes/b", {"resourceVersion": rv}, stop_after=2)
    assert summary(events) == [("ADDED", "b"), ("DELETED", "b")]


async def test_a_watch_that_falls_too_far_behind_is_ended():
    """The server's memory stays bounded: past the limit a watch ends, as kube-apiserver does."""
    async with (
        SimServer(watch_queue_limit=5) as small,
        httpx.AsyncClient(base_url=small.url) as c,
    ):
        params = {"watch": "1", "resourceVersion": str(small.store.resource_version)}
        async with c.stream("GET", "/api/v1/nodes", params=params) as resp:
            assert resp.status_code == 200
            # The store writes synchronously: all 20 events reach the watch's queue before
            # the stream writer gets a turn, as with a client that stopped reading.
            for i in range(20):
                small.store.create(node(f"n{i}"))
            with anyio.fail_after(30):
                lines = [line async for line in resp.aiter_lines() if line]
        events = [json.loads(line) for line in lines]
        assert summary(events) == [("ADDED", f"n{i}") for i in range(5)]
        # the client can resume from the last event it saw, like after any ended watch
        last_rv = events[-1]["object"]["metadata"]["resourceVersion"]
        params = {"watch": "1", "resourceVersion": last_rv, "timeoutSeconds": "1"}
        resumed = [
            json.loads(x) for x in (await c.get("/api/v1/nodes", params=params)).text.splitlines()
        ]
        assert summary(resumed) == [("ADDED", f"n{i}") for i in range(5, 20)]


async def test_a_bookmark_never_goes_ahead_of_queued_events():
    """A bookmark says every event up to its resourceVersion was sent: no event after it in
    the stream may be older. Events queued while a bookmark was due (the writer busy, a wait
    of 0) once went out after a bookmark past them, and a stream ending between the two lost
    them for good: the client resumed from the bookmark."""
    async with (
        SimServer(bookmark_interval=0.001) as fast,
        httpx.AsyncClient(base_url=fast.url, timeout=30) as c,
    ):
        rv = str(fast.store.resource_version)
        params = {
            "watch": "1",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "2",
        }
        lines: list[dict] = []

        async def churn() -> None:
            for burst in range(40):
                for i in range(20):  # one burst queues events while the next bookmark is due
                    fast.store.create(node(f"n{burst}-{i}"))
                await anyio.sleep(0.005)

        async with (
            anyio.create_task_group() as tg,
            c.stream("GET", "/api/v1/nodes", params=params) as resp,
        ):
            tg.start_soon(churn)
            async for line in resp.aiter_lines():
                if line.strip():
                    lines.append(json.loads(line))
        sent = [int(e["object"]["metadata"]["resourceVersion"]) for e in lines]
        kinds = [e["type"] for e in lines]
        assert "BOOKMARK" in kinds and kinds.count("ADDED") == 800
        for i, kind in enumerate(kinds):
            if kind == "BOOKMARK":
                older = [rv for rv, k in zip(sent[i + 1 :], kinds[i + 1 :], strict=True)
                         if k != "BOOKMARK" and rv <= sent[i]]  # fmt: skip
                assert not older, f"bookmark at {sent[i]} sent ahead of events {older[:5]}"
