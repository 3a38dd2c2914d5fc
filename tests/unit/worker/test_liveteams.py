"""The teams declaration in force (gpustack_operator/worker/liveteams.py,
gpustack_operator/worker/declarations.py; docs/teams.md, "Refused declarations"): each
revision of the ConfigMap is validated once; a refused one (bad text, not UTF-8, the key
missing) leaves the last good declaration in force until the ConfigMap changes; a worker
that starts again takes back what its status ConfigMap says was in force."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_operator.domain.chain.teams import TEAMS_CONFIGMAP, TEAMS_KEY
from gpustack_operator.domain.declarationstatus import STATUS_CONFIGMAP, status_data
from gpustack_operator.domain.plan.plan import plan_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.worker.liveteams import LiveTeams

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[3]

TEAMS = """
teams:
  - name: research
    namespaces: [research]
    shares: [{pools: {manufacturer: nvidia}, share: 50%}]
  - name: interns
    namespaceSelector: {matchLabels: {gpustack.ai/team: interns}}
    shares: [{pools: {manufacturer: nvidia}, share: 20%}]
"""


class FakeIndexer:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects

    def list(self) -> list[dict[str, Any]]:
        return list(self.objects)

    def get(self, key: str) -> dict[str, Any] | None:
        return next((o for o in self.objects if _key(o) == key), None)


class FakeInformer:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.indexer = FakeIndexer(objects)


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


def _configmap(revision: str, **fields: Any) -> dict[str, Any]:
    meta = {"name": TEAMS_CONFIGMAP, "namespace": "ops", "resourceVersion": revision}
    return {"metadata": meta, **fields}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: Any, kind: str, reason: str, message: str, **_: Any) -> None:
        self.events.append((kind, reason, message))


def _live(
    configmaps: list[dict[str, Any]],
    namespaces: list[dict[str, Any]],
    status: list[dict[str, Any]] | None = None,
    recorder: Recorder | None = None,
) -> LiveTeams:
    return LiveTeams(
        FakeInformer(configmaps),  # type: ignore[arg-type]
        "ops",
        fallback=None,
        manufacturers=("nvidia",),
        cluster_queues=FakeInformer([]),  # type: ignore[arg-type]
        namespaces=FakeInformer(namespaces),  # type: ignore[arg-type]
        status=FakeInformer(status or []),  # type: ignore[arg-type]
        recorder=recorder,  # type: ignore[arg-type]
    )


async def test_a_refused_revision_is_validated_once_and_stays_refused_until_edited() -> None:
    configmap = _configmap("7", data={TEAMS_KEY: TEAMS})
    research = {"metadata": {"name": "research", "labels": {"gpustack.ai/team": "interns"}}}
    recorder = Recorder()
    live = _live([configmap], [research], recorder=recorder)
    calls = 0
    validator = live.validator

    def counting() -> Any:
        nonlocal calls
        calls += 1
        return validator()

    live.validator = counting
    assert not await live.refresh()
    assert live.current() is None
    assert "namespace research is in two teams" in live.error
    research["metadata"]["labels"] = {}  # the conflict is gone, the ConfigMap unchanged
    for _ in range(3):
        assert not await live.refresh()
    assert calls == 1 and live.current() is None, "a revision's verdict stands"
    assert [r for _, r, _ in recorder.events] == ["TeamsDeclarationRefused"]
    configmap["metadata"]["resourceVersion"] = "8"  # any edit: looked at again
    assert await live.refresh()
    taken = live.current()
    assert taken is not None and live.error == "" and calls == 2
    assert [t.name for t in taken.teams] == ["research", "interns"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"binaryData": {TEAMS_KEY: "//79"}}, "holds teams.yaml under binaryData"),
        ({"data": {"teams.yml": TEAMS}}, "has no key teams.yaml (it has teams.yml)"),
        ({"data": {TEAMS_KEY: TEAMS + "\x00"}}, "not valid YAML"),
        (
            {
                "data": {
                    TEAMS_KEY: TEAMS.replace(
                        "{matchLabels: {gpustack.ai/team: interns}}",
                        "[{matchLabels: {gpustack.ai/team: interns}}]",
                    )
                }
            },
            "namespaceSelector is a list of 1, not a label selector",
        ),
    ],
)
async def test_a_bad_edit_keeps_the_last_good_declaration(
    fields: dict[str, Any], message: str
) -> None:
    configmap = _configmap("1", data={TEAMS_KEY: TEAMS})
    recorder = Recorder()
    live = _live([configmap], [], recorder=recorder)
    assert await live.refresh()
    good = live.current()
    assert good is not None
    configmap.pop("data")
    configmap.update(fields, metadata={**configmap["metadata"], "resourceVersion": "2"})
    assert not await live.refresh()
    assert live.current() is good, "a refusal changes nothing in force"
    assert message in live.error, live.error
    (event,) = recorder.events
    assert event[0] == "Warning" and "the last good declaration stays in force" in event[2]
    assert live.status.in_force == ("research", "interns") and live.status.revision == "1"


async def test_a_worker_starting_again_takes_back_what_was_in_force() -> None:
    first = _live([_configmap("1", data={TEAMS_KEY: TEAMS})], [])
    assert await first.refresh()
    bad = _configmap("2", data={TEAMS_KEY: "teams: ["})
    first.configmaps = FakeInformer([bad])  # type: ignore[assignment]
    await first.refresh()
    published = {
        "metadata": {"name": STATUS_CONFIGMAP, "namespace": "ops"},
        "data": status_data(first.status),
    }
    assert published["data"]["teams.refusedRevision"] == "2"
    recorder = Recorder()
    again = _live([bad], [], status=[published], recorder=recorder)
    assert await again.refresh()
    taken = again.current()
    assert taken is not None and [t.name for t in taken.teams] == ["research", "interns"]
    assert "not valid YAML" in again.error
    assert recorder.events == [], "the refusal was said by the worker before"


async def test_a_refusal_for_oversharing_stands_while_the_pools_vanish_and_come_back() -> None:
    """A declaration refused for sharing a pool out above 100% through two selectors never
    takes effect (it used to, scaled down, once the pools had vanished for a moment)."""
    nodes = yaml.safe_load((REPO / "examples" / "cluster.yaml").read_text())["items"]
    queues = plan_state(nodes, ["default"], ChainPolicy()).cluster_queues
    over = (
        "teams:\n"
        "- {name: a, namespaces: [a], shares: [{pools: {manufacturer: nvidia}, share: 70%}]}\n"
        "- {name: b, namespaces: [b], shares: [{pools: {model: tesla-t4}, share: 40%}]}\n"
    )
    cluster_queues = FakeInformer(list(queues))
    live = LiveTeams(
        FakeInformer([_configmap("3", data={TEAMS_KEY: over})]),  # type: ignore[arg-type]
        "ops",
        fallback=None,
        manufacturers=ChainPolicy().manufacturers,
        cluster_queues=cluster_queues,  # type: ignore[arg-type]
        namespaces=FakeInformer([]),  # type: ignore[arg-type]
        status=FakeInformer([]),  # type: ignore[arg-type]
    )
    await live.refresh()
    assert "is shared out 110% (a 70%, b 40%)" in live.error
    cluster_queues.indexer.objects = []  # the pools vanish for a moment
    await live.refresh()
    cluster_queues.indexer.objects = list(queues)
    await live.refresh()
    assert live.current() is None and "shared out 110%" in live.error
