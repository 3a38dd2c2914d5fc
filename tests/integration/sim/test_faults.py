"""Fault injection and request counters."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.integration.sim.helpers import call

pytestmark = pytest.mark.anyio

CM = "/api/v1/namespaces/default/configmaps"


def cm(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


async def test_count_limits_a_fault_to_the_first_requests(sim, kube):
    fault = sim.faults.add(verb="list", kind="ConfigMap", status=500, count=2)
    codes = [(await call(kube, "GET", CM)).status_code for _ in range(3)]
    assert codes == [500, 500, 200]
    assert fault.fired == 2
    # other verbs and kinds are untouched
    sim.faults.add(verb="list", kind="ConfigMap", status=500)
    assert (await call(kube, "GET", "/api/v1/nodes")).status_code == 200
    assert (await call(kube, "POST", CM, cm("a"))).status_code == 201


@pytest.mark.parametrize(
    ("status", "reason"),
    [(409, "Conflict"), (410, "Expired"), (500, "InternalError"), (503, "ServiceUnavailable")],
)
async def test_status_codes_answer_with_a_status_body(sim, kube, status, reason):
    sim.faults.add(verb="get", status=status, message="boom")
    resp = await call(kube, "GET", "/api/v1/namespaces/default")
    body = resp.json()
    assert resp.status_code == status
    assert body["kind"] == "Status" and body["reason"] == reason and body["message"] == "boom"


async def test_429_carries_retry_after(sim, kube):
    sim.faults.add(verb="*", kind="Node", status=429, retry_after=3, count=1)
    resp = await call(kube, "GET", "/api/v1/nodes")
    assert resp.status_code == 429
    assert resp.headers["Retry-After"] == "3"
    assert resp.json()["details"]["retryAfterSeconds"] == 3
    assert (await call(kube, "GET", "/api/v1/nodes")).status_code == 200


async def test_share_is_reproducible_with_a_seed():
    async def run(seed: int) -> list[int]:
        async with SimServer(seed=seed) as sim, httpx.AsyncClient(base_url=sim.url) as client:
            sim.faults.add(verb="list", status=500, share=0.5)
            return [(await client.get("/api/v1/nodes")).status_code for _ in range(40)]

    first, second = await run(7), await run(7)
    assert first == second
    assert 5 < first.count(500) < 35  # some fail, some pass


async def test_failed_write_changes_nothing(sim, kube):
    await call(kube, "POST", CM, cm("a"))
    before = sim.store.resource_version
    for verb in ("create", "update", "patch", "delete", "apply"):
        sim.faults.add(verb=verb, status=500)
    current = (await call(kube, "GET", f"{CM}/a")).json()
    assert (await call(kube, "POST", CM, cm("b"))).status_code == 500
    assert (await call(kube, "PUT", f"{CM}/a", dict(current, data={"k": "w"}))).status_code == 500
    assert (
        await call(
            kube,
            "PATCH",
            f"{CM}/a",
            {"data": {"k": "x"}},
            content_type="application/merge-patch+json",
        )
    ).status_code == 500
    assert (
        await call(
            kube,
            "PATCH",
            f"{CM}/a",
            raw=json.dumps(cm("a")),
            params={"fieldManager": "m"},
            content_type="application/apply-patch+yaml",
        )
    ).status_code == 500
    assert (await call(kube, "DELETE", f"{CM}/a")).status_code == 500
    assert sim.store.resource_version == before
    assert sim.store.get("v1", "ConfigMap", "a", "default")["data"] == {"k": "v"}
    assert sim.store.get("v1", "ConfigMap", "b", "default") is None


async def test_delay_holds_the_answer(sim, kube):
    sim.faults.add(verb="get", kind="Namespace", status=None, delay=0.3, count=1)
    started = time.monotonic()
    resp = await call(kube, "GET", "/api/v1/namespaces/default")
    assert resp.status_code == 200
    assert time.monotonic() - started >= 0.3  # a lower bound only: the fault really waited


async def test_cut_watch_closes_the_stream_abruptly(sim, kube):
    sim.store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}})
    sim.store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"}})
    sim.faults.add(verb="watch", kind="Node", cut_watch=True, count=1)
    lines: list[str] = []
    async with httpx.AsyncClient(base_url=sim.url) as client:
        with pytest.raises(httpx.HTTPError):
            async with client.stream(
                "GET", "/api/v1/nodes", params={"watch": "1", "resourceVersion": "0"}
            ) as resp:
                async for line in resp.aiter_lines():
                    lines.append(line)
    assert [json.loads(x)["object"]["metadata"]["name"] for x in lines] == ["a", "b"]

    sim.faults.add(verb="watch", kind="Node", cut_watch=True, after_events=1, count=1)
    lines.clear()
    async with httpx.AsyncClient(base_url=sim.url) as client:
        with pytest.raises(httpx.HTTPError):
            async with client.stream(
                "GET", "/api/v1/nodes", params={"watch": "1", "resourceVersion": "0"}
            ) as resp:
                async for line in resp.aiter_lines():
                    lines.append(line)
    assert len(lines) == 1


async def test_watch_410_fault_is_sent_in_stream(sim, kube):
    sim.faults.add(verb="watch", status=410, count=1)
    resp = await call(kube, "GET", "/api/v1/nodes", params={"watch": "1"})
    assert resp.status_code == 200
    event = json.loads(resp.text.splitlines()[0])
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    sim.faults.add(verb="watch", status=500, count=1)
    assert (await call(kube, "GET", "/api/v1/nodes", params={"watch": "1"})).status_code == 500


async def test_request_counters(sim, kube):
    sim.counters.reset()
    await call(kube, "POST", CM, cm("a"))
    await call(kube, "GET", f"{CM}/a")
    await call(kube, "GET", CM)
    await call(kube, "GET", CM, params={"watch": "1", "timeoutSeconds": "0"})
    await call(kube, "PATCH", f"{CM}/a", {"data": {}}, content_type="application/merge-patch+json")
    await call(
        kube,
        "PATCH",
        f"{CM}/a",
        raw=json.dumps(cm("a")),
        params={"fieldManager": "m"},
        content_type="application/apply-patch+yaml",
    )
    current = (await call(kube, "GET", f"{CM}/a")).json()
    await call(kube, "PUT", f"{CM}/a", current)
    await call(
        kube,
        "PUT",
        "/api/v1/nodes/x/status",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}},
    )
    await call(kube, "DELETE", f"{CM}/a")
    await call(kube, "DELETE", CM)
    c = sim.counters
    assert c.get("create", "ConfigMap") == 1
    assert c.get("get", "ConfigMap") == 2
    assert c.get("list", "ConfigMap") == 1
    assert c.get("watch", "ConfigMap") == 1
    assert c.get("patch", "ConfigMap") == 2 and c.get("apply", "ConfigMap") == 1
    assert c.get("update", "ConfigMap") == 1
    assert c.get("update", "Node") == 1  # /status counts under the kind
    assert c.get("delete", "ConfigMap") == 1 and c.get("deletecollection", "ConfigMap") == 1
    assert c.writes() == 1 + 2 + 2 + 1 + 1
    assert c.snapshot()[("get", "ConfigMap")] == 2
    # the store's direct API is not counted
    sim.store.create(cm("direct"))
    assert c.get("create", "ConfigMap") == 1
    c.reset()
    assert c.snapshot() == {}


def test_unknown_fault_verb_is_rejected():
    sim = SimServer()
    with pytest.raises(ValueError, match="unknown verb"):
        sim.faults.add(verb="frobnicate")
