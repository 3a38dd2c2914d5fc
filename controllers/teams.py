"""The ``teams`` controller: reads each new revision of the teams ConfigMap and publishes
what is in force (docs/teams.md, "Where the declaration lives"); the declaration in force
itself is :class:`~gpustack_operator.worker.liveteams.LiveTeams`.
"""

from __future__ import annotations

from typing import Any, Final

from gpustack_operator.domain.chain.teams import TEAMS_CONFIGMAP
from gpustack_operator.domain.declarationstatus import STATUS_CONFIGMAP
from gpustack_operator.domain.nodeview import name_of
from gpustack_operator.runtime.controller import Controller, ControllerBuilder, Request
from gpustack_operator.runtime.resources import CONFIGMAPS, NAMESPACES
from gpustack_operator.worker.common import Writer
from gpustack_operator.worker.liveteams import LiveTeams

NAME: Final = "teams"


class TeamsReader:
    """Reads each new revision of the ConfigMap (a Warning Event when refused) and publishes
    what is in force."""

    def __init__(self, live: LiveTeams, writer: Writer) -> None:
        self.live = live
        self.writer = writer

    async def __call__(self, request: Request) -> None:
        await self.live.refresh()
        await self.live.publish(self.writer)


def build_teams_controller(
    builder: ControllerBuilder, live: LiveTeams, writer: Writer
) -> Controller:
    """The reader, keyed by the ConfigMap (docs/teams.md, "Refused declarations"); the
    system namespace and the status ConfigMap bring its key too, so it runs once at start
    even without a teams ConfigMap."""
    key = live.key

    def the_key(_: dict[str, Any]) -> list[str]:
        return [key]

    def system_namespace(obj: dict[str, Any]) -> list[str]:
        return [key] if name_of(obj) == live.namespace else []

    return (
        builder.for_(
            CONFIGMAPS,
            namespace=live.namespace,
            field_selector=f"metadata.name={TEAMS_CONFIGMAP}",
        )
        .watches(
            CONFIGMAPS,
            the_key,
            namespace=live.namespace,
            field_selector=f"metadata.name={STATUS_CONFIGMAP}",
        )
        .watches(NAMESPACES, system_namespace)
        .with_options(max_concurrent_reconciles=1)
        .complete(TeamsReader(live, writer))
    )
