"""The LocalQueue reconciler: which failed applies mean "the namespace went away" (logged at info
instead of retried) and what it reads before each write (docs/worker.md, "Writes and
ownership")."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gpustack_operator.apis import kueue_resources
from gpustack_operator.controllers.localqueue import LocalQueueReconciler, namespace_went_away
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.labels import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    RESOURCE_TYPE_INSTANCETYPES,
    RESOURCE_TYPE_LABEL,
)
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.runtime.cache import Indexer, namespace_index
from gpustack_operator.runtime.client import Client, Forbidden, NotFound
from gpustack_operator.runtime.controller import Request
from gpustack_operator.worker.caches import BY_NAMESPACE, KueueCaches
from gpustack_operator.worker.common import Writer

LOCAL_QUEUES = kueue_resources().local_queues


def test_a_missing_or_terminating_namespace_went_away() -> None:
    gone = NotFound(
        'namespaces "team-b" not found', details={"name": "team-b", "kind": "namespaces"}
    )
    assert namespace_went_away(gone, "team-b")
    terminating = Forbidden(
        "unable to create new content in namespace team-b because it is being terminated",
        details={"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]},
    )
    assert namespace_went_away(terminating, "team-b")


def test_other_refusals_are_not_a_vanished_namespace() -> None:
    other_namespace = NotFound("", details={"name": "team-c", "kind": "namespaces"})
    assert not namespace_went_away(other_namespace, "team-b")
    missing_crd = NotFound("the server could not find the requested resource")
    assert not namespace_went_away(missing_crd, "team-b")
    rbac = Forbidden('localqueues.kueue.x-k8s.io is forbidden: User "x" cannot patch')
    assert not namespace_went_away(rbac, "team-b")


class _Informer:
    """A LocalQueue informer whose watch events are delivered by hand."""

    def __init__(self) -> None:
        self.indexer = Indexer()
        self.indexer.add_index(BY_NAMESPACE, namespace_index)
        self.last_resource_version = "10"

    def deliver(self, obj: dict[str, Any]) -> None:
        self.indexer.upsert(obj)
        self.last_resource_version = obj["metadata"]["resourceVersion"]


class _Server:
    """Answers each apply at the next revision; the watch events of the answered applies
    reach the informer only when :meth:`flush` or a chosen apply delivers them."""

    def __init__(self, informer: _Informer) -> None:
        self.informer = informer
        self.revision = 10
        self.applied: list[str] = []
        self.undelivered: list[dict[str, Any]] = []
        self.deliver_during: str | None = None

    async def apply(self, resource: object, want: dict[str, Any], **_: object) -> dict[str, Any]:
        target = want["spec"]["clusterQueue"]
        self.applied.append(target)
        if target == self.deliver_during:
            self.flush()  # the watch catches up while this write is on its way
        self.revision += 1
        result = copy.deepcopy(want)
        result["metadata"]["resourceVersion"] = str(self.revision)
        self.undelivered.append(result)
        return result

    def flush(self) -> None:
        for obj in self.undelivered:
            self.informer.deliver(obj)
        self.undelivered.clear()


def _indexer(*objs: dict[str, Any]) -> Indexer:
    indexer = Indexer()
    for obj in objs:
        indexer.upsert(obj)
    return indexer


def _cluster_queue(name: str) -> dict[str, Any]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, RESOURCE_TYPE_LABEL: RESOURCE_TYPE_INSTANCETYPES}
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels}}


@pytest.mark.anyio
async def test_a_queue_the_cache_received_during_the_reconcile_is_not_created_again() -> None:
    """The reconcile's earlier write awaits; meanwhile the cache receives the last reconcile's
    queue, with the informer past its write: read then, it is there and nothing is sent."""
    informer = _Informer()
    server = _Server(informer)
    queues = _indexer(_cluster_queue("cq-a"), _cluster_queue("cq-b"))
    caches = SimpleNamespace(
        namespaces=SimpleNamespace(indexer=_indexer({"metadata": {"name": "team"}})),
        cluster_queues=SimpleNamespace(indexer=queues),
        local_queues=informer,
        kueue=SimpleNamespace(local_queues=LOCAL_QUEUES, version=KueueVersion.V1BETA2),
        teams_for=lambda _: None,
    )
    writer = Writer(cast(Client, server), "gpustack-operator", None)
    reconciler = LocalQueueReconciler(cast(KueueCaches, caches), writer, ChainPolicy())
    request = Request.of("team")

    await reconciler(request)  # cq-a's and cq-b's queues, their events still on the way
    assert server.applied == ["cq-a", "cq-b"]
    # A queue that sorts between them appears; the next reconcile writes its LocalQueue
    # while the watch delivers the other two.
    queues.upsert(_cluster_queue("cq-ab"))
    server.deliver_during = "cq-ab"
    await reconciler(request)
    assert server.applied == ["cq-a", "cq-b", "cq-ab"]
    server.flush()
    await reconciler(request)
    assert server.applied == ["cq-a", "cq-b", "cq-ab"]
