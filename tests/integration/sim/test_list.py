"""LIST: label selectors (every operator), field selectors, paging, resourceVersion."""

from __future__ import annotations

import httpx
import pytest

from gpustack_sim.apiserver.server import SimServer
from tests.integration.sim.helpers import call

pytestmark = pytest.mark.anyio

NODES = {
    "a": {"zone": "x", "gpu": "nvidia", "count": "2"},
    "b": {"zone": "y", "gpu": "amd", "count": "8"},
    "c": {"zone": "x"},
    "d": {},
}


@pytest.fixture
def seeded(sim):
    for name, labels in NODES.items():
        sim.store.create(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        )
    return sim


async def names(kube, path: str, **params) -> list[str]:
    resp = await call(kube, "GET", path, params=params)
    assert resp.status_code == 200, resp.text
    return [i["metadata"]["name"] for i in resp.json()["items"]]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("zone=x", ["a", "c"]),
        ("zone==x", ["a", "c"]),
        ("zone!=x", ["b", "d"]),
        ("zone in (x, y)", ["a", "b", "c"]),
        ("gpu notin (amd)", ["a", "c", "d"]),
        ("gpu", ["a", "b"]),
        ("!gpu", ["c", "d"]),
        ("zone=x,gpu", ["a"]),
        ("zone=x, !gpu", ["c"]),
        ("count>4", ["b"]),
        ("count<4", ["a"]),
        ("", ["a", "b", "c", "d"]),
    ],
)
async def test_label_selector_operators(seeded, kube, selector, expected):
    assert await names(kube, "/api/v1/nodes", labelSelector=selector) == expected


@pytest.mark.parametrize("bad", ["zone=x,", "zone in x", "zone in ()", "Bad Key", "k=v=w", "!"])
async def test_bad_label_selector_is_400(seeded, kube, bad):
    resp = await call(kube, "GET", "/api/v1/nodes", params={"labelSelector": bad})
    assert resp.status_code == 400, (bad, resp.text)
    assert resp.json()["reason"] == "BadRequest"


async def test_field_selectors(sim, kube):
    for ns in ("default", "kube-system"):
        for name in ("one", "two"):
            sim.store.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns},
                }
            )
    assert await names(kube, "/api/v1/configmaps", fieldSelector="metadata.name=one") == [
        "one",
        "one",
    ]
    found = (
        await call(
            kube,
            "GET",
            "/api/v1/configmaps",
            params={"fieldSelector": "metadata.namespace!=default"},
        )
    ).json()["items"]
    assert {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in found} == {
        ("kube-system", "one"),
        ("kube-system", "two"),
    }
    both = "metadata.name==two,metadata.namespace=default"
    assert await names(kube, "/api/v1/configmaps", fieldSelector=both) == ["two"]
    resp = await call(kube, "GET", "/api/v1/configmaps", params={"fieldSelector": "spec.x=1"})
    assert resp.status_code == 400 and "field label not supported" in resp.json()["message"]


async def test_namespaced_list_and_all_namespaces(sim, kube):
    sim.store.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "kube-system"},
        }
    )
    sim.store.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "default"}}
    )
    assert await names(kube, "/api/v1/namespaces/default/configmaps") == ["b"]
    assert sorted(await names(kube, "/api/v1/configmaps")) == ["a", "b"]


async def test_paging_with_limit_and_continue(sim, kube):
    for i in range(7):
        sim.store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}})
    seen: list[str] = []
    token = None
    list_rvs = set()
    while True:
        params = {"limit": "3"}
        if token:
            params["continue"] = token
        body = (await call(kube, "GET", "/api/v1/nodes", params=params)).json()
        seen += [i["metadata"]["name"] for i in body["items"]]
        list_rvs.add(body["metadata"]["resourceVersion"])
        token = body["metadata"].get("continue")
        if not token:
            break
        assert body["metadata"]["remainingItemCount"] == 7 - len(seen)
        # changes between pages do not show up: the pages are one snapshot
        sim.store.create(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"late{len(seen)}"}}
        )
        sim.store.delete("v1", "Node", "n6") if len(seen) == 3 else None
    assert seen == [f"n{i}" for i in range(7)]
    assert len(list_rvs) == 1


async def test_list_resource_version_is_current(sim, kube):
    sim.store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
    body = (await call(kube, "GET", "/api/v1/nodes")).json()
    assert body["metadata"]["resourceVersion"] == str(sim.store.resource_version)
    assert body["kind"] == "NodeList" and body["apiVersion"] == "v1"


async def test_expired_continue_token_is_410():
    async with SimServer(watch_history=3) as small, httpx.AsyncClient(base_url=small.url) as client:
        for i in range(4):
            small.store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}})
        first = (await client.get("/api/v1/nodes", params={"limit": "2"})).json()
        for i in range(5):
            small.store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"m{i}"}})
        resp = await client.get(
            "/api/v1/nodes", params={"limit": "2", "continue": first["metadata"]["continue"]}
        )
        assert resp.status_code == 410
        assert resp.json()["reason"] == "Expired"
        garbage = await client.get("/api/v1/nodes", params={"continue": "!!"})
        assert garbage.status_code == 400
