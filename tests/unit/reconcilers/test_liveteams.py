"""The teams declaration in force (controllers/teams.py, docs/teams.md, "Refused
declarations"): a declaration refused for a namespace claimed twice is taken once the
namespace's labels no longer make it so, with the ConfigMap unchanged."""

from __future__ import annotations

from typing import Any

from controllers.teams import LiveTeams
from gpustack_operator.domain.teams import TEAMS_CONFIGMAP, TEAMS_KEY

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


def test_a_declaration_refused_for_a_namespace_conflict_is_taken_once_the_labels_change() -> None:
    configmap = {
        "metadata": {"name": TEAMS_CONFIGMAP, "namespace": "ops", "resourceVersion": "7"},
        "data": {TEAMS_KEY: TEAMS},
    }
    research = {"metadata": {"name": "research", "labels": {"gpustack.ai/team": "interns"}}}
    live = LiveTeams(
        FakeInformer([configmap]),  # type: ignore[arg-type]
        "ops",
        fallback=None,
        manufacturers=("nvidia",),
        cluster_queues=FakeInformer([]),  # type: ignore[arg-type]
        namespaces=FakeInformer([research]),  # type: ignore[arg-type]
    )
    assert live.current() is None
    assert "namespace research is in two teams" in live.state.error
    research["metadata"]["labels"] = {}
    taken = live.current()
    assert taken is not None and live.state.error == ""
    assert [t.name for t in taken.teams] == ["research", "interns"]
