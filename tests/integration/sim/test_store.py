"""The store's direct API, deep-copy safety, subscriptions, and kr8s' object layer."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from gpustack_sim.apiserver.errors import ApiError
from tests.integration.sim.helpers import call

pytestmark = pytest.mark.anyio


def node(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


async def test_store_returns_copies_and_keeps_none_of_its_inputs(sim, kube):
    seed = node("a", zone="x")
    created = sim.store.create(seed)
    seed["metadata"]["labels"]["zone"] = "mutated-input"
    created["metadata"]["labels"]["zone"] = "mutated-output"
    got = sim.store.get("v1", "Node", "a")
    assert got["metadata"]["labels"] == {"zone": "x"}
    got["metadata"]["labels"]["zone"] = "mutated-get"
    listed = sim.store.list("v1", "Node")
    listed[0]["metadata"]["labels"]["zone"] = "mutated-list"
    served = (await call(kube, "GET", "/api/v1/nodes/a")).json()
    assert served["metadata"]["labels"] == {"zone": "x"}


async def test_store_writes_follow_the_http_rules(sim):
    created = sim.store.create(node("a"))
    assert "generation" not in created["metadata"]
    with pytest.raises(ApiError) as exc:
        sim.store.create(node("a"))
    assert exc.value.code == 409
    stale = dict(created, spec={"unschedulable": True})
    sim.store.update(stale)
    with pytest.raises(ApiError) as exc:
        sim.store.update(dict(created, spec={"unschedulable": False}))  # stale RV
    assert exc.value.status["reason"] == "Conflict"
    with pytest.raises(ApiError) as exc:
        sim.store.create(node("Not_Valid"))
    assert exc.value.code == 422
    with pytest.raises(ApiError) as exc:
        sim.store.create({"apiVersion": "v1", "kind": "Widget", "metadata": {"name": "w"}})
    assert exc.value.code == 404
    current = sim.store.get("v1", "Node", "a")
    current["status"] = {"capacity": {"cpu": "2"}}
    assert "status" not in sim.store.update(current)  # main endpoint ignores status
    assert sim.store.update_status(current)["status"] == {"capacity": {"cpu": "2"}}


async def test_subscribe_and_events_see_every_change(sim):
    seen: list[tuple[str, str]] = []
    unsubscribe = sim.store.subscribe(lambda t, o: seen.append((t, o["metadata"]["name"])))
    received: list[tuple[str, str]] = []

    async def consume() -> None:
        async for event_type, obj in sim.store.events():
            received.append((event_type, obj["metadata"]["name"]))
            if len(received) == 3:
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await anyio.lowlevel.checkpoint()  # let the consumer subscribe
        sim.store.create(node("a"))
        obj = sim.store.get("v1", "Node", "a")
        obj["metadata"]["labels"] = {"x": "1"}
        sim.store.update(obj)
        sim.store.delete("v1", "Node", "a")
    unsubscribe()
    sim.store.create(node("b"))
    expected = [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert seen == expected and received == expected


async def test_kr8s_object_classes_work_against_the_sim(sim, kube):
    from kr8s.asyncio.objects import ConfigMap, Node

    cm = await ConfigMap(
        {"metadata": {"name": "a", "namespace": "default"}, "data": {"k": "v"}}, api=kube
    )
    await cm.create()
    fetched = await ConfigMap.get("a", namespace="default", api=kube)
    assert fetched.raw["data"] == {"k": "v"}
    await fetched.patch({"data": {"k": "w"}})
    await fetched.label({"team": "a"})
    again = await ConfigMap.get("a", namespace="default", api=kube)
    assert again.raw["data"] == {"k": "w"} and again.labels == {"team": "a"}
    await again.delete()
    assert sim.store.get("v1", "ConfigMap", "a", "default") is None

    for name, zone in (("n1", "x"), ("n2", "y")):
        sim.store.create(node(name, zone=zone))
    found = [n.name async for n in kube.get(Node, label_selector={"zone": "x"})]
    assert found == ["n1"]
