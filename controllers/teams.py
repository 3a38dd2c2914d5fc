"""The teams declaration in force (docs/teams.md, "Where the declaration lives").

The worker reads the ConfigMap ``gpustack-teams`` (key ``teams.yaml``) in its system
namespace through one informer, watched by name. :class:`LiveTeams` answers every
reconciler's question "which teams now?": the ConfigMap's declaration when it parses and
passes the checks against the pools and namespaces in the caches, else the last good one;
without the ConfigMap, the declaration of ``--teams FILE`` (the policy's), if any. Each
revision of the ConfigMap is parsed once. The Cohort, ClusterQueue and LocalQueue
controllers watch the ConfigMap (:func:`watch_teams`) and reconcile every key when it
changes; the ``teams`` controller only reports: a Warning Event on the ConfigMap and a log
line when a declaration is refused, an info line when one is taken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

import structlog

from gpustack_operator.domain.nodeview import metadata
from gpustack_operator.domain.teams import (
    TEAMS_CONFIGMAP,
    TEAMS_KEY,
    PoolFacts,
    Teams,
    TeamsState,
    pool_of,
)
from gpustack_operator.runtime.controller import (
    Controller,
    ControllerBuilder,
    EventRecorderLike,
    Request,
)
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.resources import CONFIGMAPS

NAME: Final = "teams"
REFUSED: Final = "TeamsDeclarationRefused"
log = structlog.get_logger(__name__)


def teams_configmap_informer(manager: Manager, namespace: str) -> Informer:
    """The shared informer of the one teams ConfigMap (by name: nothing else is read)."""
    return manager.informer(
        CONFIGMAPS, namespace=namespace, field_selector=f"metadata.name={TEAMS_CONFIGMAP}"
    )


class LiveTeams:
    """The declaration in force; see the module docstring."""

    def __init__(
        self,
        configmaps: Informer,
        namespace: str,
        *,
        fallback: Teams | None,
        manufacturers: Iterable[str],
        cluster_queues: Informer,
        namespaces: Informer,
    ) -> None:
        self.configmaps = configmaps
        self.namespace = namespace
        self.fallback = fallback
        self.manufacturers = tuple(manufacturers)
        self.cluster_queues = cluster_queues
        self.namespaces = namespaces
        self.state = TeamsState()
        self._seen: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{TEAMS_CONFIGMAP}"

    def configmap(self) -> dict[str, Any] | None:
        return self.configmaps.indexer.get(self.key)

    def current(self) -> Teams | None:
        """The teams in force now (parsing a new revision of the ConfigMap first)."""
        configmap = self.configmap()
        if configmap is None:
            return self.fallback
        revision = str(metadata(configmap).get("resourceVersion", ""))
        # A refused declaration is looked at again on every call: a conflict of namespaces
        # can go away with a namespace's labels, the ConfigMap unchanged.
        if revision != self._seen or self.state.error:
            self._seen = revision
            data = configmap.get("data") or {}
            text = data.get(TEAMS_KEY) if isinstance(data, dict) else None
            self.state.offer(
                text if isinstance(text, str) else None,
                self.manufacturers,
                self._pools(),
                self.namespaces.indexer.list(),
                revision=revision,
            )
        if self.state.teams is None and self.state.error:
            return self.fallback  # nothing good from the ConfigMap yet
        return self.state.teams

    def _pools(self) -> list[PoolFacts]:
        pools: dict[str, PoolFacts] = {}
        for queue in self.cluster_queues.indexer.list():
            facts = PoolFacts.of(queue)
            pool = pool_of(queue) or facts.name
            pools[pool] = PoolFacts(pool, facts.accelerated, facts.model, facts.manufacturer)
        return list(pools.values())


def watch_teams(
    builder: ControllerBuilder, live: LiveTeams | None, every_key: Callable[[], list[str]]
) -> ControllerBuilder:
    """*builder* also reconciling every key (*every_key*) when the teams ConfigMap changes."""
    if live is None:
        return builder

    def all_keys(_: dict[str, Any]) -> list[str]:
        return every_key()

    return builder.watches(
        CONFIGMAPS,
        all_keys,
        namespace=live.namespace,
        field_selector=f"metadata.name={TEAMS_CONFIGMAP}",
    )


class TeamsReporter:
    """Says, once per revision, whether the declaration was taken or refused and why."""

    def __init__(self, live: LiveTeams, recorder: EventRecorderLike | None) -> None:
        self.live = live
        self.recorder = recorder
        self.reported: tuple[str, str] | None = None

    async def __call__(self, request: Request) -> None:
        teams = self.live.current()
        configmap = self.live.configmap()
        # Keyed by the ConfigMap's own revision: a second bad edit with the same error is said
        # again, a refused one looked at again is not.
        revision = str(metadata(configmap).get("resourceVersion", "")) if configmap else ""
        outcome = (revision, self.live.state.error)
        if outcome == self.reported:
            return
        self.reported = outcome
        if configmap is None:
            log.info("no teams ConfigMap; teams from --teams", teams=_names(teams))
            return
        if self.live.state.error:
            log.warning(
                "teams declaration refused; the last good one stays in force",
                configmap=self.live.key,
                error=self.live.state.error,
                in_force=_names(teams),
            )
            if self.recorder is not None:
                message = f"{self.live.state.error} (the last good declaration stays in force)"
                self.recorder.event(configmap, "Warning", REFUSED, message, resource=CONFIGMAPS)
            return
        log.info("teams declaration in force", configmap=self.live.key, teams=_names(teams))


def _names(teams: Teams | None) -> list[str]:
    return [t.name for t in teams.teams] if teams is not None else []


def build_teams_controller(
    builder: ControllerBuilder, live: LiveTeams, recorder: EventRecorderLike | None
) -> Controller:
    """The reporter, keyed by the ConfigMap (docs/teams.md, "Refused declarations")."""
    reporter = TeamsReporter(live, recorder)
    return (
        builder.for_(
            CONFIGMAPS,
            namespace=live.namespace,
            field_selector=f"metadata.name={TEAMS_CONFIGMAP}",
        )
        .with_options(max_concurrent_reconciles=1)
        .complete(reporter)
    )
