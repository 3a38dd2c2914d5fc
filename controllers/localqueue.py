"""LocalQueues (docs/worker.md): one per managed ClusterQueue in every eligible namespace.

Key: the namespace name. A reconcile compares the namespace's LocalQueues (namespace index)
with ``desired_local_queues`` for the managed ClusterQueues in the cache, each LocalQueue
owned by its ClusterQueue. A new Namespace is reconciled when it appears; a ClusterQueue
appearing or going enqueues every namespace.

Deletion, decided here: LocalQueues normally go with their ClusterQueue through owner
garbage collection. The reconciler also deletes a managed LocalQueue itself when its
ClusterQueue is no longer in the cache (faster than GC, same result), and when its namespace
became ineligible (the system namespace or one added to ``--excluded-namespaces``), because
the exclusion list is the operator's statement that the namespace gets no queues. It never
deletes LocalQueues of a ClusterQueue that still exists, even one being deleted (Kueue may
still hold workloads there), nor anything in a terminating namespace (the namespace
controller is removing it), nor LocalQueues without the managed-by label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import structlog

from gpustack_operator.domain.chain.queues import active_namespaces, desired_local_queues
from gpustack_operator.domain.chain.teams import desired_local_queues_with_teams, pool_of
from gpustack_operator.domain.labels import RESOURCE_TYPE_INSTANCETYPES, RESOURCE_TYPE_LABEL
from gpustack_operator.domain.nodeview import is_deleting, labels_of, metadata, name_of
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.runtime.client import ApiError, Forbidden, NotFound
from gpustack_operator.runtime.coalesce import Coalesce
from gpustack_operator.runtime.controller import Controller, ControllerBuilder, Request
from gpustack_operator.runtime.predicates import Predicate
from gpustack_operator.runtime.resources import NAMESPACES
from gpustack_operator.worker.caches import BY_NAMESPACE, KueueCaches
from gpustack_operator.worker.common import (
    METADATA_OR_SPEC_CHANGED,
    Writer,
    is_managed_object,
    is_up_to_date,
)
from gpustack_operator.worker.liveteams import watch_teams

NAME: Final = "localqueue"

log = structlog.get_logger(__name__)


def _is_our_queue(cluster_queue: object) -> bool:
    return (
        is_managed_object(cluster_queue)
        and labels_of(cluster_queue).get(RESOURCE_TYPE_LABEL) == RESOURCE_TYPE_INSTANCETYPES
    )


def _terminating(namespace: object) -> bool:
    status = namespace.get("status") if isinstance(namespace, dict) else None
    return is_deleting(namespace) or (
        isinstance(status, dict) and status.get("phase") == "Terminating"
    )


class _QueueSetChanged(Predicate):
    """ClusterQueue events that change which LocalQueues should exist: creation, deletion,
    the start of a deletion and a change of the managed-by or type label."""

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return (
            _is_our_queue(old) != _is_our_queue(new)
            or bool(metadata(old).get("deletionTimestamp"))
            != bool(metadata(new).get("deletionTimestamp"))
            or metadata(old).get("uid") != metadata(new).get("uid")
        )


class _NamespaceStateChanged(Predicate):
    """Terminating or not; labels (a team's namespaceSelector may select by them)."""

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return _terminating(old) != _terminating(new) or labels_of(old) != labels_of(new)


def _target(local_queue: dict[str, Any]) -> object:
    spec = local_queue.get("spec")
    return spec.get("clusterQueue") if isinstance(spec, dict) else None


class LocalQueueReconciler:
    def __init__(
        self,
        caches: KueueCaches,
        writer: Writer,
        policy: ChainPolicy,
    ) -> None:
        self.caches = caches
        self.writer = writer
        self.resource = caches.kueue.local_queues
        self.policy = policy

    async def __call__(self, request: Request) -> None:
        namespace_name = request.name
        namespace = self.caches.namespaces.indexer.get(namespace_name)
        if namespace is None or _terminating(namespace):
            return  # the namespace controller removes what is inside
        queues = [q for q in self.caches.cluster_queues.indexer.list() if _is_our_queue(q)]
        plain = [q for q in queues if not pool_of(q)]
        wanted = desired_local_queues(
            plain,
            [namespace],
            system_namespace=self.policy.system_namespace,
            excluded=self.policy.excluded_namespaces,
            version=self.caches.kueue.version,
        )
        teams = self.caches.teams_for(self.policy)
        if teams is not None and len(plain) < len(queues):  # docs/teams.md
            active = active_namespaces(
                [namespace],
                system_namespace=self.policy.system_namespace,
                excluded=self.policy.excluded_namespaces,
            )
            wanted = desired_local_queues_with_teams(
                queues,
                [namespace],
                teams,
                plain=wanted,
                version=self.caches.kueue.version,
                active=active,
            )
        cached = self.caches.local_queues.indexer
        present = [name_of(lq) for lq in cached.by_index(BY_NAMESPACE, namespace_name)]
        for (_, lq_name), want in wanted.items():
            # Read at the write, not at the reconcile's start: the writes before this one
            # await, and meanwhile the cache can receive this reconcile's or the last one's
            # LocalQueues; a snapshot would call them missing and create them again
            # (docs/worker.md, "Writes and ownership").
            have = cached.get(f"{namespace_name}/{lq_name}")
            if have is not None and not is_managed_object(have):
                self.writer.not_ours(self.resource, have)
            elif have is not None and _target(have) != _target(want):
                # Kueue keeps spec.clusterQueue immutable: a namespace joining or leaving a
                # team swaps its LocalQueue by deleting it first (docs/teams.md); the
                # deletion event brings the namespace back here to create the new one.
                if not is_deleting(have):
                    await self.writer.delete(self.resource, have, "its ClusterQueue changed")
            elif have is None or not is_up_to_date(have, want):
                try:
                    await self.writer.apply(
                        self.resource,
                        want,
                        existed=have is not None,
                        cache=self.caches.local_queues,
                    )
                except (NotFound, Forbidden) as err:
                    if not namespace_went_away(err, namespace_name):
                        raise
                    log.info(
                        "namespace went away under a LocalQueue apply; nothing to do",
                        namespace=namespace_name,
                        local_queue=lq_name,
                        reason=err.reason,
                    )
                    return
        for lq_name in present:
            have = cached.get(f"{namespace_name}/{lq_name}")
            if have is None or (namespace_name, lq_name) in wanted or not is_managed_object(have):
                continue
            if is_deleting(have) or self._queue_still_there(have):
                continue
            await self.writer.delete(self.resource, have, "its ClusterQueue or namespace is gone")

    def _queue_still_there(self, local_queue: dict[str, Any]) -> bool:
        """The LocalQueue's ClusterQueue exists (being deleted or not) in an eligible namespace."""
        namespace = metadata(local_queue).get("namespace")
        if namespace in self.policy.namespaces_without_queues:
            return False
        spec = local_queue.get("spec") or {}
        target = spec.get("clusterQueue") if isinstance(spec, dict) else None
        return (
            isinstance(target, str) and self.caches.cluster_queues.indexer.get(target) is not None
        )


def namespace_went_away(err: ApiError, namespace: str) -> bool:
    """The write failed because *namespace* is gone (404 on the Namespace) or terminating
    (403 ``NamespaceTerminating``): the Namespace's own events end the matter, so this is
    logged at info, not retried (docs/worker.md, "Writes and ownership")."""
    details = err.details
    if isinstance(err, NotFound):
        return details.get("kind") == "namespaces" and details.get("name") == namespace
    causes = details.get("causes")
    return isinstance(err, Forbidden) and any(
        isinstance(c, Mapping) and c.get("reason") == "NamespaceTerminating"
        for c in (causes if isinstance(causes, list) else [])
    )


def build_local_queue_controller(
    builder: ControllerBuilder,
    caches: KueueCaches,
    writer: Writer,
    *,
    workers: int,
    policy: ChainPolicy,
    coalesce: Coalesce,
) -> Controller:
    """*coalesce*: the ClusterQueue watch's preset (deletes at once)."""

    def every_namespace(_: dict[str, Any]) -> list[str]:
        return caches.namespaces.indexer.keys()

    def own_namespace(local_queue: dict[str, Any]) -> list[str]:
        namespace = metadata(local_queue).get("namespace")
        return [namespace] if isinstance(namespace, str) and namespace else []

    reconciler = LocalQueueReconciler(caches, writer, policy)
    builder = watch_teams(builder, caches.teams, caches.namespaces.indexer.keys)
    # New queues are coalesced (a burst of them reaches every namespace once); a deleted
    # queue's LocalQueues are removed at once rather than waiting for the garbage collector.
    return (
        builder.for_(NAMESPACES, _NamespaceStateChanged())
        .watches(caches.kueue.local_queues, own_namespace, METADATA_OR_SPEC_CHANGED)
        .watches(
            caches.kueue.cluster_queues,
            every_namespace,
            _QueueSetChanged(),
            coalesce=coalesce,
        )
        .with_options(max_concurrent_reconciles=workers)
        .complete(reconciler)
    )
