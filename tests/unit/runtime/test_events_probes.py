"""Events recorder (aggregation, bounded queue) and probe plumbing (addresses, checks)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import httpx
import pytest

from gpustack_operator.runtime import metrics
from gpustack_operator.runtime.client import NotFound, ServerError
from gpustack_operator.runtime.events import EventRecorder
from gpustack_operator.runtime.fence import WriteFence
from gpustack_operator.runtime.manager import run_async
from gpustack_operator.runtime.probes import (
    HealthChecks,
    HttpServer,
    metrics_app,
    parse_bind_address,
    probes_app,
)
from gpustack_operator.runtime.resources import EVENTS, NODES, Resource

from .polling import eventually

pytestmark = pytest.mark.anyio


class FakeEventClient:
    def __init__(self) -> None:
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[str] = []
        self.fail_creates = False

    async def create(
        self,
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        *,
        fence: WriteFence | None = None,
    ) -> dict[str, Any]:
        assert res is EVENTS
        if fence is not None:
            fence.check("an event")  # as the client does once its connection is ready
        self.calls.append("create")
        if self.fail_creates:
            raise ServerError("etcd unavailable", status=500)
        self.events[(namespace or "", body["metadata"]["name"])] = body
        return body

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: dict[str, Any] | list[Any],
        *,
        namespace: str | None = None,
        fence: WriteFence | None = None,
    ) -> dict[str, Any]:
        if fence is not None:
            fence.check("an event")
        self.calls.append("patch")
        key = (namespace or "", name)
        if key not in self.events:
            raise NotFound("gone", status=404, reason="NotFound")
        assert isinstance(patch, dict)
        self.events[key].update(patch)
        return self.events[key]


class Ticking:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


NODE = {"metadata": {"name": "node-1", "uid": "u1", "resourceVersion": "7"}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}}


async def test_recorder_creates_then_aggregates_repeats() -> None:
    client = FakeEventClient()
    recorder = EventRecorder(client, "unit", host="h", wall_clock=Ticking())
    recorder.warning(NODE, "ProbeFailed", "no driver", resource=NODES)
    recorder.warning(NODE, "ProbeFailed", "no driver", resource=NODES)
    recorder.warning(NODE, "ProbeFailed", "no driver", resource=NODES)
    recorder.normal(POD, "Scheduled", "ok")
    async with anyio.create_task_group() as tg:
        tg.start_soon(recorder.run)
        await eventually(lambda: recorder.pending() == 0 and recorder.written == 4)
        tg.cancel_scope.cancel()
    assert client.calls == ["create", "patch", "patch", "create"]
    node_events = [e for (ns, _), e in client.events.items() if ns == "default"]
    assert len(node_events) == 1
    event = node_events[0]
    assert event["count"] == 3
    assert event["series"]["count"] == 3
    assert event["series"]["lastObservedTime"].endswith("Z")
    assert event["firstTimestamp"] < event["lastTimestamp"]
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "node-1",
        "uid": "u1",
        "resourceVersion": "7",
    }
    assert event["source"] == {"component": "unit", "host": "h"}
    assert event["type"] == "Warning" and event["reason"] == "ProbeFailed"
    pod_event = next(e for (ns, _), e in client.events.items() if ns == "team-a")
    assert pod_event["involvedObject"]["kind"] == "Pod"
    assert pod_event["type"] == "Normal"


class ClosingFence(WriteFence):
    """Held at the recorder's own check, closed by the time the client checks again (the
    rate limiter or a new connection took longer than the Lease was held)."""

    def __init__(self) -> None:
        self.checks = 0

    def held(self) -> bool:
        self.checks += 1
        return self.checks == 1


async def test_an_event_is_dropped_when_the_fence_closes_before_it_is_sent() -> None:
    client = FakeEventClient()
    recorder = EventRecorder(client, "unit", host="h", wall_clock=Ticking())
    recorder.fence = ClosingFence()

    def dropped() -> float:
        sample = metrics.REGISTRY.get_sample_value
        return sample("gpustack_events_dropped_total", {"reason": "not_leader"}) or 0.0

    before = dropped()
    recorder.warning(NODE, "ProbeFailed", "no driver", resource=NODES)
    async with anyio.create_task_group() as tg:
        tg.start_soon(recorder.run)
        await eventually(lambda: dropped() == before + 1)
        tg.cancel_scope.cancel()
    assert client.calls == [] and recorder.written == 0


async def test_each_object_gets_a_limited_burst_of_events() -> None:
    client = FakeEventClient()
    now = [0.0]
    recorder = EventRecorder(client, "unit", spam_burst=3, spam_qps=0.5, clock=lambda: now[0])

    def dropped() -> float:
        sample = metrics.REGISTRY.get_sample_value
        return sample("gpustack_events_dropped_total", {"reason": "rate_limited"}) or 0.0

    before = dropped()
    for i in range(5):
        recorder.warning(NODE, "Flapping", f"attempt {i}", resource=NODES)
    recorder.normal(POD, "Scheduled", "another object has its own budget")
    assert recorder.pending() == 4 and dropped() == before + 2
    now[0] += 2.0  # one token back
    recorder.warning(NODE, "Flapping", "later", resource=NODES)
    recorder.warning(NODE, "Flapping", "too soon", resource=NODES)
    assert recorder.pending() == 5 and dropped() == before + 3


async def test_recorder_recreates_an_expired_event_and_survives_write_errors() -> None:
    client = FakeEventClient()
    recorder = EventRecorder(client, "unit")
    async with anyio.create_task_group() as tg:
        tg.start_soon(recorder.run)
        recorder.warning(NODE, "R", "m", resource=NODES)
        await eventually(lambda: recorder.written == 1 and recorder.pending() == 0)
        client.events.clear()  # the server's event TTL expired it
        recorder.warning(NODE, "R", "m", resource=NODES)
        await eventually(lambda: recorder.written == 2 and recorder.pending() == 0)
        assert client.calls == ["create", "patch", "create"]
        client.fail_creates = True
        dropped = (
            metrics.REGISTRY.get_sample_value(
                "gpustack_events_dropped_total", {"reason": "write_failed"}
            )
            or 0.0
        )
        recorder.warning(NODE, "Other", "m", resource=NODES)
        await eventually(lambda: recorder.pending() == 0)
        assert (
            metrics.REGISTRY.get_sample_value(
                "gpustack_events_dropped_total", {"reason": "write_failed"}
            )
            == dropped + 1
        )
        client.fail_creates = False
        recorder.warning(NODE, "Third", "m", resource=NODES)
        await eventually(lambda: recorder.written == 3)
        tg.cancel_scope.cancel()


async def test_recorder_never_blocks_and_drops_when_full() -> None:
    client = FakeEventClient()
    recorder = EventRecorder(client, "unit", queue_size=2)
    before = (
        metrics.REGISTRY.get_sample_value("gpustack_events_dropped_total", {"reason": "queue_full"})
        or 0.0
    )
    for i in range(5):
        recorder.warning(NODE, "R", f"m{i}", resource=NODES)  # no writer running
    assert recorder.pending() == 2
    assert (
        metrics.REGISTRY.get_sample_value("gpustack_events_dropped_total", {"reason": "queue_full"})
        == before + 3
    )
    long = "x" * 5000
    recorder2 = EventRecorder(client, "unit")
    recorder2.warning(NODE, "Long", long, resource=NODES)
    async with anyio.create_task_group() as tg:
        tg.start_soon(recorder2.run)
        await eventually(lambda: recorder2.written == 1)
        tg.cancel_scope.cancel()
    assert max(len(e["message"]) for e in client.events.values()) == 1024


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":8081", ("0.0.0.0", 8081)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:8080", ("::1", 8080)),
        ("localhost:9000", ("localhost", 9000)),
        ("0", None),
        ("", None),
        (" :8080 ", ("0.0.0.0", 8080)),
    ],
)
def test_parse_bind_address(text: str, expected: tuple[str, int] | None) -> None:
    assert parse_bind_address(text) == expected


@pytest.mark.parametrize("text", ["8080", "host:port", ":70000", ":-1"])
def test_parse_bind_address_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="bind address"):
        parse_bind_address(text)


async def test_probe_server_reports_each_check() -> None:
    healthz, readyz = HealthChecks(), HealthChecks()
    state = {"ready": False}
    healthz.add("ping", lambda: True)

    async def crds_present() -> bool:
        return state["ready"]

    def broken() -> bool:
        raise RuntimeError("kueue CRDs missing")

    readyz.add("crds", crds_present)
    with pytest.raises(ValueError, match="already"):
        readyz.add("crds", crds_present)
    server = HttpServer(probes_app(healthz, readyz), "127.0.0.1", 0, name="probes")
    await server.start()
    try:
        assert server.port
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/healthz")).text == "ok"
            not_ready = await http.get("/readyz")
            assert not_ready.status_code == 500
            assert "[-]crds failed: not ready" in not_ready.text
            state["ready"] = True
            assert (await http.get("/readyz")).status_code == 200
            readyz.add("broken", broken)
            verbose = await http.get("/readyz?verbose")
            assert verbose.status_code == 500
            assert "[+]crds ok" in verbose.text
            assert "[-]broken failed: kueue CRDs missing" in verbose.text
    finally:
        await server.stop()


async def test_metrics_server_and_port_conflict() -> None:
    server = HttpServer(metrics_app(metrics.REGISTRY), "127.0.0.1", 0, name="metrics")
    await server.start()
    try:
        async with httpx.AsyncClient() as http:
            response = await http.get(f"{server.url}/metrics")
        assert response.status_code == 200
        assert "text/plain" in response.headers["content-type"]
        assert "# TYPE controller_runtime_reconcile_total counter" in response.text
        clash = HttpServer(metrics_app(metrics.REGISTRY), "127.0.0.1", server.port or 0)
        with pytest.raises(OSError, match="cannot serve"):
            await clash.start()
    finally:
        await server.stop()


def test_run_async_runs_on_uvloop_when_installed() -> None:
    async def main() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert run_async(main).startswith("uvloop")


async def test_flush_waits_for_queued_events() -> None:
    client = FakeEventClient()
    recorder = EventRecorder(client, "unit")
    for i in range(5):
        recorder.warning(NODE, f"R{i}", "m", resource=NODES)
    assert await recorder.flush(0.01) is False, "nothing writes before run() starts"
    async with anyio.create_task_group() as tg:
        tg.start_soon(recorder.run)
        assert await recorder.flush(10) is True
        assert recorder.written == 5
        tg.cancel_scope.cancel()
