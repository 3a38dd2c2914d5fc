"""docs/runtime.md's example controller, run as written against the simulated API server;
and the steady-state rule: with nothing changing, a full resync makes zero writes."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any

import anyio
import pytest

from gpustack_operator.runtime.manager import Manager
from gpustack_sim.apiserver.server import SimServer
from tests.unit.runtime.polling import eventually

from .support import connected, idle, options, running, sample

pytestmark = pytest.mark.anyio

DOC = Path(__file__).resolve().parents[3] / "docs" / "runtime.md"


def load_example() -> types.ModuleType:
    """The python block between the example markers of docs/runtime.md, as a module."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(
        r"<!-- example-start -->\s*```python\n(.*?)```\s*<!-- example-end -->", text, re.S
    )
    assert found, f"{DOC} lost its example markers"
    module = types.ModuleType("runtime_doc_example")
    exec(compile(found.group(1), str(DOC), "exec"), module.__dict__)
    return module


def info_of(sim: SimServer, namespace: str) -> dict[str, Any] | None:
    return sim.store.get("v1", "ConfigMap", "namespace-info", namespace)


def namespace(name: str, team: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if team:
        meta["labels"] = {"team": team}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def reconciles() -> float:
    return sample(
        "controller_runtime_reconcile_total", controller="namespace-info", result="success"
    )


async def test_the_documented_example_converges_and_is_quiet_in_steady_state(
    sim: SimServer, sim_kubeconfig: Path
) -> None:
    example = load_example()
    sim.store.create(namespace("ml", team="vision"))
    async with connected(sim_kubeconfig) as client:
        manager = Manager(client, options(component="namespace-info"))
        example.setup(manager)
        async with running(manager) as (_, errors):

            def converged() -> bool:
                names = [n["metadata"]["name"] for n in sim.store.list("v1", "Namespace")]
                return all(info_of(sim, n) is not None for n in names) and idle(manager)

            await eventually(converged, what="a ConfigMap in every namespace")
            ml = info_of(sim, "ml")
            assert ml is not None and ml["data"] == {"team": "vision"}
            assert ml["metadata"]["ownerReferences"][0]["kind"] == "Namespace"
            default = info_of(sim, "default")
            assert default is not None and default["data"] == {"team": "unassigned"}

            # A change flows through: label update -> reconcile -> apply.
            current = sim.store.get("v1", "Namespace", "ml")
            assert current is not None
            current["metadata"]["labels"]["team"] = "speech"
            sim.store.update(current)
            await eventually(
                lambda: (info_of(sim, "ml") or {}).get("data") == {"team": "speech"},
                what="the ConfigMap to follow the label",
            )
            sim.store.create(namespace("late", team="infra"))
            await eventually(lambda: info_of(sim, "late") is not None)
            await eventually(lambda: idle(manager) and manager.recorder.pending() == 0)
            events = [
                e for e in sim.store.list("v1", "Event", "default") if e["reason"] == "InfoUpdated"
            ]
            assert {e["involvedObject"]["name"] for e in events} >= {"ml", "late"}

            # Steady state: a full resync reconciles everything and writes nothing.
            await eventually(
                lambda: all(i.last_resource_version for i in manager.informers.informers)
            )
            sim.counters.reset()
            before = reconciles()
            count = len(sim.store.list("v1", "Namespace"))
            for informer in manager.informers.informers:
                informer.resync()
            await eventually(
                lambda: reconciles() >= before + count and idle(manager),
                what="the resync's reconciles",
            )
            await anyio.wait_all_tasks_blocked()
            assert manager.recorder.pending() == 0
            assert sim.counters.writes() == 0, sim.counters.snapshot()
        assert errors == []
