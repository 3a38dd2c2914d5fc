"""The API client against the simulated API server, over real sockets."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gpustack_operator.runtime import client as client_mod
from gpustack_operator.runtime.backoff import TokenBucket
from gpustack_operator.runtime.client import (
    AlreadyExists,
    ApiUnavailable,
    BadRequest,
    Client,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    TooManyRequests,
    WatchEvent,
)
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_operator.runtime.resources import CONFIGMAPS, LEASES, NAMESPACES, NODES, Resource
from gpustack_sim.apiserver.server import SimServer

pytestmark = pytest.mark.anyio

REPO_ROOT = Path(__file__).resolve().parents[3]
IN_POD = Path("/var/run/secrets/kubernetes.io/serviceaccount").is_dir()
CRDS = Path(os.environ.get("GPUSTACK_SHARED_CRDS", REPO_ROOT / ".." / "shared" / "crds"))


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with SimServer(watch_history=20) as server:
        yield server


@pytest.fixture
async def client(sim: SimServer, tmp_path: Path) -> AsyncIterator[Client]:
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    c = await Client.connect(kubeconfig, timeout=5.0)
    try:
        yield c
    finally:
        await c.close()


def cm(name: str, namespace: str = "default", **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "data": dict(data)}


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels)}}


# --- connection ---------------------------------------------------------------------------


async def test_connect_picks_the_named_context(sim: SimServer, tmp_path: Path) -> None:
    kubeconfig = sim.write_kubeconfig(tmp_path / "kc", context="other")
    async with await Client.connect(kubeconfig, context="other") as c:
        assert c.host == sim.url.removeprefix("http://")
        assert (await c.get(NAMESPACES, "default"))["metadata"]["name"] == "default"


async def test_connect_reads_kubeconfig_env(
    sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(sim.write_kubeconfig(tmp_path / "env-kc")))
    async with await Client.connect() as c:
        await c.create(NODES, node("n1"))
        assert (await c.get(NODES, "n1"))["metadata"]["name"] == "n1"


async def test_connect_to_unknown_context_says_so(sim: SimServer, tmp_path: Path) -> None:
    kubeconfig = sim.write_kubeconfig(tmp_path / "kc")
    with pytest.raises(ValueError, match="no context 'nope'"):
        await Client.connect(kubeconfig, context="nope")


async def test_unreachable_server_is_api_unavailable(tmp_path: Path) -> None:
    server = SimServer()
    await server.start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kc")
    await server.stop()
    with pytest.raises(ApiUnavailable):
        await Client.connect(kubeconfig, timeout=2.0)


# --- verbs --------------------------------------------------------------------------------


async def test_create_get_replace_delete_roundtrip(client: Client) -> None:
    created = await client.create(CONFIGMAPS, cm("a", x="1"))
    assert created["kind"] == "ConfigMap" and created["metadata"]["uid"]
    got = await client.get(CONFIGMAPS, "a", "default")
    assert got["data"] == {"x": "1"}
    got["data"]["x"] = "2"
    replaced = await client.replace(CONFIGMAPS, got)
    assert replaced["data"] == {"x": "2"}
    assert replaced["metadata"]["resourceVersion"] != got["metadata"]["resourceVersion"]
    await client.delete(CONFIGMAPS, "a", "default")
    with pytest.raises(NotFound) as info:
        await client.get(CONFIGMAPS, "a", "default")
    assert info.value.status == 404
    assert "not found" in str(info.value)


async def test_typed_errors_carry_the_servers_message(client: Client) -> None:
    await client.create(CONFIGMAPS, cm("a"))
    with pytest.raises(AlreadyExists) as exists:
        await client.create(CONFIGMAPS, cm("a"))
    assert isinstance(exists.value, Conflict)
    assert exists.value.reason == "AlreadyExists"
    assert '"a" already exists' in str(exists.value)

    stale = await client.get(CONFIGMAPS, "a", "default")
    await client.replace(CONFIGMAPS, {**stale, "data": {"v": "1"}})
    with pytest.raises(Conflict) as conflict:
        await client.replace(CONFIGMAPS, {**stale, "data": {"v": "2"}})
    assert conflict.value.status == 409 and not isinstance(conflict.value, AlreadyExists)

    with pytest.raises(Invalid) as invalid:
        await client.create(CONFIGMAPS, cm("Not_A_Valid_Name"))
    assert invalid.value.status == 422 and "Not_A_Valid_Name" in str(invalid.value)

    with pytest.raises(BadRequest):
        await client.list(CONFIGMAPS, label_selector="a in (")

    with pytest.raises(NotFound):
        await client.list(Resource("example.com", "v1", "Thing", "things", True))


async def test_injected_status_codes_map_to_error_types(sim: SimServer, client: Client) -> None:
    sim.faults.add(verb="get", kind="Node", status=403, count=1, message="nodes is forbidden")
    with pytest.raises(Forbidden, match="nodes is forbidden"):
        await client.get(NODES, "x")
    # kr8s would re-read credentials and retry a 403 three times; we send it once.
    assert sim.counters.get("get", "Node") == 1

    sim.faults.add(verb="get", kind="Node", status=429, retry_after=7, count=1)
    with pytest.raises(TooManyRequests) as throttled:
        await client.get(NODES, "x")
    assert throttled.value.retry_after == 7.0

    sim.faults.add(verb="list", kind="Node", status=500, count=1)
    with pytest.raises(ServerError) as failed:
        await client.list(NODES)
    assert failed.value.status == 500 and str(failed.value)

    sim.faults.add(verb="list", kind="Node", status=410, count=1)
    with pytest.raises(Gone):
        await client.list(NODES)


async def test_request_timeout_is_enforced(sim: SimServer, tmp_path: Path) -> None:
    kubeconfig = sim.write_kubeconfig(tmp_path / "kc")
    # A timeout no ordinary request reaches even on a loaded machine; a delay well beyond it.
    async with await Client.connect(kubeconfig, timeout=1.0) as c:
        sim.faults.add(verb="get", kind="Node", status=None, delay=1.5, count=1)
        with pytest.raises(ApiUnavailable) as info:
            await c.get(NODES, "x")
        assert info.value.reason == "Timeout"


async def test_list_pages_share_the_first_pages_resource_version(client: Client) -> None:
    for i in range(7):
        await client.create(NODES, node(f"n{i}", pool="a" if i % 2 else "b"))
    first = await client.list(NODES, limit=3)
    assert len(first.items) == 3 and first.continue_token
    assert all(item["kind"] == "Node" and item["apiVersion"] == "v1" for item in first.items)
    await client.create(NODES, node("late"))  # not part of the snapshot
    everything = await client.list_all(NODES, page_size=3)
    assert len(everything.items) == 8
    assert everything.continue_token is None
    snapshot = await client.list_all(NODES, page_size=2, label_selector="pool=a")
    assert sorted(i["metadata"]["name"] for i in snapshot.items) == ["n1", "n3", "n5"]
    by_name = await client.list(NODES, field_selector="metadata.name=n4")
    assert [i["metadata"]["name"] for i in by_name.items] == ["n4"]
    assert int(by_name.resource_version) >= int(first.resource_version)


async def test_server_side_apply_creates_then_updates(client: Client) -> None:
    body = {
        "metadata": {"name": "lease-a", "namespace": "default"},
        "spec": {"holderIdentity": "x"},
    }
    created = await client.apply(LEASES, body, field_manager="gpustack-test")
    assert created["spec"]["holderIdentity"] == "x"
    body["spec"]["holderIdentity"] = "y"
    updated = await client.apply(LEASES, body, field_manager="gpustack-test", force=True)
    assert updated["spec"]["holderIdentity"] == "y"
    managers = {m["manager"] for m in updated["metadata"].get("managedFields", [])}
    assert "gpustack-test" in managers


async def test_merge_and_json_patches(client: Client) -> None:
    await client.create(NODES, node("n1", a="1"))
    merged = await client.patch(NODES, "n1", {"metadata": {"labels": {"b": "2", "a": None}}})
    assert merged["metadata"]["labels"] == {"b": "2"}
    patched = await client.patch(
        NODES,
        "n1",
        [{"op": "add", "path": "/metadata/labels/c", "value": "3"}],
        patch_type="json",
    )
    assert patched["metadata"]["labels"] == {"b": "2", "c": "3"}
    with pytest.raises(ValueError, match="unknown patch type"):
        await client.patch(NODES, "n1", {}, patch_type="yaml")  # type: ignore[arg-type]


async def test_status_subresource_writes_only_status(client: Client) -> None:
    await client.create(NODES, node("n1"))
    status = {
        "status": {"allocatable": {"example.com/gpu": "2"}},
        "metadata": {"labels": {"x": "y"}},
    }
    patched = await client.patch(NODES, "n1", status, subresource="status")
    assert patched["status"]["allocatable"] == {"example.com/gpu": "2"}
    assert "x" not in (patched["metadata"].get("labels") or {})
    applied = await client.apply(
        NODES,
        {"metadata": {"name": "n1"}, "status": {"capacity": {"example.com/gpu": "2"}}},
        field_manager="dm",
        subresource="status",
    )
    assert applied["status"]["capacity"] == {"example.com/gpu": "2"}


async def test_delete_preconditions_and_propagation(client: Client) -> None:
    created = await client.create(CONFIGMAPS, cm("a"))
    with pytest.raises(Conflict):
        await client.delete(CONFIGMAPS, "a", "default", preconditions={"uid": "not-the-uid"})
    answer = await client.delete(
        CONFIGMAPS,
        "a",
        "default",
        preconditions={"uid": created["metadata"]["uid"]},
        propagation_policy="Foreground",
    )
    assert isinstance(answer, dict)
    with pytest.raises(NotFound):
        await client.delete(CONFIGMAPS, "a", "default")


async def test_served_versions_discovers_groups(sim: SimServer, client: Client) -> None:
    assert "v1" in await client.served_versions("apps")
    assert await client.served_versions("") == ["v1"]
    assert await client.served_versions("nothing.example.com") == []
    kueue = CRDS / "kueue-v0.19.2" / "kueue.x-k8s.io_resourceflavors.yaml"
    if not kueue.is_file():
        pytest.skip(f"real Kueue CRDs not found at {kueue.parent} (set GPUSTACK_SHARED_CRDS)")
    import yaml

    sim.load_crds([yaml.safe_load(kueue.read_text())])
    versions = await client.served_versions("kueue.x-k8s.io")
    # Kubernetes version priority: v1beta2 is preferred over v1beta1.
    assert versions == ["v1beta2", "v1beta1"]


# --- watch --------------------------------------------------------------------------------


async def test_watch_streams_events_from_a_resource_version(client: Client) -> None:
    listed = await client.list(CONFIGMAPS, "default")
    events: list[WatchEvent] = []
    async with client.watch(
        CONFIGMAPS, "default", resource_version=listed.resource_version, timeout_seconds=30
    ) as stream:
        await client.create(CONFIGMAPS, cm("a"))
        await client.patch(CONFIGMAPS, "a", {"data": {"k": "v"}}, namespace="default")
        await client.delete(CONFIGMAPS, "a", "default")
        with anyio.fail_after(30):
            async for event in stream:
                if event.type != "BOOKMARK":
                    events.append(event)
                if len(events) == 3:
                    break
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[1].object["data"] == {"k": "v"}
    assert int(events[2].resource_version) > int(events[0].resource_version)


async def test_watch_from_expired_version_raises_gone(client: Client) -> None:
    listed = await client.list(CONFIGMAPS, "default")
    for i in range(30):  # the simulator keeps 20 events per resource
        await client.create(CONFIGMAPS, cm(f"c{i}"))
    with pytest.raises(Gone) as info:
        async with client.watch(
            CONFIGMAPS, "default", resource_version=listed.resource_version
        ) as stream:
            with anyio.fail_after(30):
                async for _ in stream:
                    pass
    assert info.value.status == 410


async def test_watch_http_error_is_typed(sim: SimServer, client: Client) -> None:
    sim.faults.add(verb="watch", kind="ConfigMap", status=429, retry_after=2, count=1)
    with pytest.raises(TooManyRequests) as info:
        async with client.watch(CONFIGMAPS, resource_version="1"):
            pass
    assert info.value.retry_after == 2.0


async def test_watch_stall_and_cut_are_reported(tmp_path: Path) -> None:
    quiet = SimServer(bookmark_interval=3600.0)
    async with quiet:
        kubeconfig = quiet.write_kubeconfig(tmp_path / "kc")
        async with await Client.connect(kubeconfig, watch_inactivity_timeout=0.2) as c:
            rv = (await c.list(CONFIGMAPS)).resource_version
            with pytest.raises(client_mod.WatchStalled):
                async with c.watch(CONFIGMAPS, resource_version=rv) as stream:
                    async for _ in stream:
                        pass
            quiet.faults.add(verb="watch", status=None, cut_watch=True, after_events=1, count=1)
            with pytest.raises(client_mod.WatchInterrupted):
                async with c.watch(CONFIGMAPS, resource_version=rv, inactivity_timeout=None) as s:
                    await c.create(CONFIGMAPS, cm("a"))
                    with anyio.fail_after(30):
                        async for _ in s:
                            pass


async def test_request_metrics_are_recorded(sim: SimServer, client: Client) -> None:
    labels = {"code": "404", "method": "GET", "host": client.host}
    before = REGISTRY.get_sample_value("rest_client_requests_total", labels) or 0.0
    with pytest.raises(NotFound):
        await client.get(NODES, "missing")
    after = REGISTRY.get_sample_value("rest_client_requests_total", labels)
    assert after == before + 1
    count = REGISTRY.get_sample_value(
        "rest_client_request_duration_seconds_count", {"verb": "GET", "host": client.host}
    )
    assert count is not None and count >= 1


async def test_client_side_rate_limit_paces_requests(sim: SimServer, client: Client) -> None:
    slept: list[float] = []

    async def record(delay: float) -> None:
        slept.append(delay)

    limited = Client(
        client.credentials,
        rate_limiter=TokenBucket(qps=0.5, burst=2, clock=lambda: 0.0, sleep=record),
    )
    for _ in range(4):
        await limited.list(NODES)
    # Two requests ride the burst; the next two wait 2 s and 4 s (reserved, not slept here).
    assert slept == pytest.approx([2.0, 4.0])
    assert sim.counters.get("list", "Node") == 4


async def test_errors_raised_inside_a_watch_block_pass_through(client: Client) -> None:
    rv = (await client.list(CONFIGMAPS)).resource_version
    with pytest.raises(TimeoutError):
        async with client.watch(CONFIGMAPS, resource_version=rv) as stream:
            with anyio.fail_after(0.05):
                async for _ in stream:
                    pass


async def test_unauthorized_rereads_credentials_and_retries_once(
    sim: SimServer, client: Client
) -> None:
    await client.create(NODES, node("n1"))
    sim.faults.add(verb="get", kind="Node", status=401, count=1)
    assert (await client.get(NODES, "n1"))["metadata"]["name"] == "n1"
    assert sim.counters.get("get", "Node") == 2
    sim.faults.add(verb="get", kind="Node", status=401, count=2)
    with pytest.raises(client_mod.Unauthorized):
        await client.get(NODES, "n1")
    assert sim.counters.get("get", "Node") == 4


@pytest.mark.skipif(IN_POD, reason="in a Pod the in-cluster service account would be used")
async def test_missing_credentials_say_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ValueError, match="fix KUBECONFIG or pass an existing kubeconfig"):
        await Client.connect()


async def test_expired_continue_token_falls_back_to_one_unpaged_list(
    sim: SimServer, client: Client
) -> None:
    for i in range(5):
        await client.create(CONFIGMAPS, cm(f"c{i}"))
    first = await client.list(CONFIGMAPS, "default", limit=2)
    for i in range(25):  # churn beyond the 20 events the simulator keeps
        await client.patch(CONFIGMAPS, "c0", {"data": {"n": str(i)}}, namespace="default")
    assert first.continue_token
    with pytest.raises(Gone):
        await client.list(CONFIGMAPS, "default", limit=2, continue_token=first.continue_token)

    original = client.list
    pages = 0

    async def churn_after_first_page(*args: Any, **kwargs: Any) -> Any:
        nonlocal pages
        pages += 1
        result = await original(*args, **kwargs)
        if pages == 1:
            for i in range(25):
                sim.store.update({**result.items[0], "data": {"n": str(i)}})
                result.items[0] = sim.store.get("v1", "ConfigMap", "c0", "default")
        return result

    client.list = churn_after_first_page  # type: ignore[method-assign]
    everything = await client.list_all(CONFIGMAPS, "default", page_size=2)
    assert pages == 3  # first page, expired continue, one unpaged list
    assert sorted(i["metadata"]["name"] for i in everything.items) == [f"c{i}" for i in range(5)]
    assert everything.resource_version == str(sim.store.resource_version)
