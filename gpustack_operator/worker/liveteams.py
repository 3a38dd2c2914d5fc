"""The teams declaration in force (docs/teams.md, "Where the declaration lives").

The worker reads the ConfigMap ``gpustack-teams`` (key ``teams.yaml``) in its system
namespace through one informer, watched by name. :class:`LiveTeams` answers every
reconciler's question "which teams now?" as ``gpustack_operator/worker/declarations.py`` reads a
declaration: each revision once, validated off the event loop by the domain's one
validation (``validate_teams``, the same as ``plan`` and ``sim``) against the pools and
namespaces in the caches; a refused revision leaves the last good declaration in force
(without any ConfigMap, the declaration of ``--teams FILE``, the policy's, if any). The
Cohort, ClusterQueue and LocalQueue controllers wait for it before their first reconcile and
reconcile every key when it changes (:func:`watch_teams`); the ``teams`` controller
(``controllers/teams.py``) reads each new revision and publishes what is in force
(``gpustack-declarations``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from gpustack_operator.domain.chain.declaredpools import is_pool_chain_object
from gpustack_operator.domain.chain.teams import (
    TEAMS_CONFIGMAP,
    TEAMS_KEY,
    PoolFacts,
    Teams,
    parse_teams,
    pool_of,
    validate_teams,
)
from gpustack_operator.runtime.controller import (
    Controller,
    ControllerBuilder,
    EventRecorderLike,
)
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.resources import CONFIGMAPS
from gpustack_operator.worker.declarations import (
    EveryKey,
    Ignore,
    LiveDeclaration,
)

REFUSED: Final = "TeamsDeclarationRefused"


def teams_configmap_informer(manager: Manager, namespace: str) -> Informer:
    """The shared informer of the one teams ConfigMap (by name: nothing else is read)."""
    return manager.informer(
        CONFIGMAPS, namespace=namespace, field_selector=f"metadata.name={TEAMS_CONFIGMAP}"
    )


def _names(teams: Teams | None) -> tuple[str, ...]:
    return tuple(t.name for t in teams.teams) if teams is not None else ()


class LiveTeams(LiveDeclaration[Teams]):
    """The teams declaration in force; see the module docstring."""

    def __init__(
        self,
        configmaps: Informer,
        namespace: str,
        *,
        fallback: Teams | None,
        manufacturers: Iterable[str],
        cluster_queues: Informer,
        namespaces: Informer,
        status: Informer | None = None,
        recorder: EventRecorderLike | None = None,
    ) -> None:
        self.manufacturers = tuple(manufacturers)
        self.cluster_queues = cluster_queues
        self.namespaces = namespaces
        super().__init__(
            kind="teams",
            configmaps=configmaps,
            status=status,
            namespace=namespace,
            name=TEAMS_CONFIGMAP,
            key=TEAMS_KEY,
            fallback=fallback,
            validator=self._validator,
            restore=self._restore,
            names=_names,
            reason=REFUSED,
            recorder=recorder,
        )

    def _validator(self) -> Callable[[str], Teams]:
        pools = self._pools()
        namespaces = list(self.namespaces.indexer.list())
        manufacturers = self.manufacturers

        def validate(text: str) -> Teams:
            return validate_teams(text, manufacturers, pools, namespaces)

        return validate

    def _restore(self, text: str) -> Teams:
        return parse_teams(text, self.manufacturers)

    def waits_for(self) -> tuple[Informer, ...]:
        return (self.cluster_queues, self.namespaces)

    def _pools(self) -> list[PoolFacts]:
        pools: dict[str, PoolFacts] = {}
        for queue in self.cluster_queues.indexer.list():
            if is_pool_chain_object(queue):
                continue  # teams leave a declared pool whole (docs/teams.md), as plan does
            facts = PoolFacts.of(queue)
            pool = pool_of(queue) or facts.name
            pools[pool] = PoolFacts(pool, facts.accelerated, facts.model, facts.manufacturer)
        return list(pools.values())


def watch_teams(
    builder: ControllerBuilder, live: LiveTeams | None, every_key: Callable[[], list[str]]
) -> ControllerBuilder:
    """*builder* waiting for the teams in force before its first reconcile, and reconciling
    every key (*every_key*) when they change."""
    if live is None:
        return builder

    def handler(controller: Controller) -> Ignore:
        controller.watch_with(live, EveryKey(controller.queue.add, every_key))
        return Ignore()

    return builder.watches_with(
        CONFIGMAPS,
        handler,
        namespace=live.namespace,
        field_selector=f"metadata.name={TEAMS_CONFIGMAP}",
    )
