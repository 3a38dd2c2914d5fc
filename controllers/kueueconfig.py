"""Kueue's configuration check (docs/workloads.md, "Kueue's configuration"), one reconciler.

Key: Kueue's ConfigMap (``kueue-system/kueue-manager-config`` by default), watched by name;
ClusterQueue changes map to the same key, since what the chain needs follows the resources
the queues cover. The reconciler reads both caches, asks ``missing_pieces`` what Kueue's
configuration lacks, and reports each change of that answer once: a Warning Event on the
ConfigMap, one log line per missing piece, and the gauge
``gpustack_kueue_configuration_missing{piece}``. It also reports, either way, whether Kueue's
fair sharing is on (a log line on each change and the gauge ``gpustack_kueue_fair_sharing``;
docs/teams.md, "Fair sharing"). It never writes Kueue's configuration.
"""

from __future__ import annotations

from typing import Any, Final

import structlog
from prometheus_client import Gauge

from gpustack_operator.domain.chain.kueueconfig import (
    FairSharing,
    Finding,
    fair_sharing,
    missing_pieces,
    parse_configuration,
)
from gpustack_operator.domain.chain.queues import is_owned
from gpustack_operator.runtime.controller import (
    Controller,
    ControllerBuilder,
    EventRecorderLike,
    Request,
)
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_operator.runtime.resources import CONFIGMAPS
from gpustack_operator.worker.caches import KueueCaches

NAME: Final = "kueueconfig"
REASON: Final = "KueueConfigurationIncomplete"

log = structlog.get_logger(__name__)

CONFIGURATION_MISSING = Gauge(
    "gpustack_kueue_configuration_missing",
    "1 for each piece of Kueue's configuration the queues need and do not get "
    "(docs/workloads.md); 0 once it is there.",
    ["piece"],
    registry=REGISTRY,
)

FAIR_SHARING = Gauge(
    "gpustack_kueue_fair_sharing",
    "1 when Kueue's configuration turns fair sharing on (preemption between team queues "
    "follows their fairSharing.weight; docs/teams.md), else 0.",
    registry=REGISTRY,
)


def covered_resources(cluster_queues: Any) -> set[str]:
    """Resources the worker's own ClusterQueues cover."""
    covered: set[str] = set()
    for queue in cluster_queues:
        if not is_owned(queue):
            continue
        for group in (queue.get("spec") or {}).get("resourceGroups") or []:
            covered.update(group.get("coveredResources") or [])
    return covered


class KueueConfigReconciler:
    def __init__(
        self,
        caches: KueueCaches,
        configmaps: Informer,
        recorder: EventRecorderLike | None,
        *,
        namespace: str,
        name: str,
    ) -> None:
        self.caches = caches
        self.configmaps = configmaps
        self.recorder = recorder
        self.namespace = namespace
        self.name = name
        self.reported: tuple[Finding, ...] | None = None
        """The findings last reported (None: nothing reported yet)."""
        self.fair_sharing: FairSharing | None = None
        """Kueue's fair sharing setting last reported (None: not yet)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def __call__(self, request: Request) -> None:
        configmap = self.configmaps.indexer.get(self.key)
        config = parse_configuration(configmap)
        covered = covered_resources(self.caches.cluster_queues.indexer.list())
        findings = tuple(missing_pieces(config, covered, self.caches.manufacturers))
        sharing = fair_sharing(config)
        if sharing != self.fair_sharing:
            self.fair_sharing = sharing
            FAIR_SHARING.set(1 if sharing.enabled else 0)
            log.info(
                sharing.describe(),
                configmap=self.key,
                fair_sharing=sharing.enabled,
                preemption_strategies=list(sharing.preemption_strategies),
            )
        if findings == self.reported:
            return
        previous = {f.piece for f in self.reported or ()}
        self.reported = findings
        for piece in previous - {f.piece for f in findings}:
            CONFIGURATION_MISSING.labels(piece).set(0)
        if not findings:
            log.info(
                "Kueue's configuration has what the queues need",
                configmap=self.key,
                default=config.is_default,
            )
            return
        for finding in findings:
            CONFIGURATION_MISSING.labels(finding.piece).set(1)
            log.warning(finding.message, piece=finding.piece, configmap=self.key)
        if self.recorder is not None:
            involved = configmap or {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": self.name, "namespace": self.namespace},
            }
            message = "; ".join(f.message for f in findings)
            self.recorder.event(involved, "Warning", REASON, message, resource=CONFIGMAPS)


def kueue_configmap_informer(manager: Manager, namespace: str, name: str) -> Informer:
    """The shared informer of Kueue's one ConfigMap (by name: nothing else is read)."""
    return manager.informer(CONFIGMAPS, namespace=namespace, field_selector=f"metadata.name={name}")


def build_kueue_config_controller(
    builder: ControllerBuilder,
    caches: KueueCaches,
    configmaps: Informer,
    recorder: EventRecorderLike | None,
    *,
    namespace: str,
    name: str,
) -> Controller:
    """Register the check; *configmaps* is :func:`kueue_configmap_informer`."""
    reconciler = KueueConfigReconciler(caches, configmaps, recorder, namespace=namespace, name=name)
    key = reconciler.key

    def to_key(_: dict[str, Any]) -> list[str]:
        return [key]

    return (
        builder.for_(CONFIGMAPS, namespace=namespace, field_selector=f"metadata.name={name}")
        .watches(caches.kueue.cluster_queues, to_key)
        .with_options(max_concurrent_reconciles=1)
        .complete(reconciler)
    )
