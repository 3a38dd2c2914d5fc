"""The worker's Writer does not send an apply again while the cache lags its last one
(docs/worker.md, "Writes and ownership")."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest

from gpustack_operator.apis import kueue_resources
from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.worker.common import Writer

pytestmark = [pytest.mark.anyio]

LOCAL_QUEUES = kueue_resources().local_queues
COHORTS = kueue_resources().cohorts


class FakeClient:
    """Answers each apply with the object at the next storage revision."""

    def __init__(self) -> None:
        self.revision = 10
        self.applies: list[dict[str, Any]] = []
        self.patches: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    async def patch(
        self, resource: object, name: str, patch: dict[str, Any], **options: Any
    ) -> dict[str, Any]:
        self.patches.append((name, patch, options))
        self.revision += 1
        return {"metadata": {"name": name, "resourceVersion": str(self.revision)}}

    async def apply(self, resource: object, want: dict[str, Any], **_: object) -> dict[str, Any]:
        self.applies.append(want)
        self.revision += 1
        result = copy.deepcopy(want)
        result["metadata"]["resourceVersion"] = str(self.revision)
        return result

    async def delete(self, *_: object, **__: object) -> None:
        return None


class FakeCache:
    """An informer that has seen the watch up to ``last_resource_version``."""

    def __init__(self, last_resource_version: str) -> None:
        self.last_resource_version = last_resource_version


def queue(target: str = "cq-a") -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {
            "name": "lq",
            "namespace": "team",
            "labels": {"app.kubernetes.io/managed-by": "gpustack-operator"},
        },
        "spec": {"clusterQueue": target},
    }


def writer() -> tuple[Writer, FakeClient]:
    client = FakeClient()
    return Writer(cast(Client, client), "gpustack-operator", None), client


async def test_the_same_apply_waits_for_the_cache_to_see_the_first() -> None:
    w, client = writer()
    cache = FakeCache("10")
    informer = cast(Informer, cache)
    first = await w.apply(LOCAL_QUEUES, queue(), existed=False, cache=informer)
    assert await w.apply(LOCAL_QUEUES, queue(), existed=False, cache=informer) == first
    assert len(client.applies) == 1
    # Something else than the last apply is sent at once.
    await w.apply(LOCAL_QUEUES, queue("cq-b"), existed=False, cache=informer)
    assert len(client.applies) == 2
    # Once the cache has seen the write, what it shows is judged again: the object was
    # deleted or edited since, and the caller wants it back.
    cache.last_resource_version = "12"
    await w.apply(LOCAL_QUEUES, queue("cq-b"), existed=False, cache=informer)
    assert len(client.applies) == 3


async def test_without_a_cache_or_after_a_delete_every_apply_is_sent() -> None:
    w, client = writer()
    informer = cast(Informer, FakeCache("10"))
    await w.apply(LOCAL_QUEUES, queue(), existed=False)
    await w.apply(LOCAL_QUEUES, queue(), existed=False)
    assert len(client.applies) == 2
    await w.apply(LOCAL_QUEUES, queue(), existed=False, cache=informer)
    await w.delete(LOCAL_QUEUES, queue(), "test")
    await w.apply(LOCAL_QUEUES, queue(), existed=False, cache=informer)
    assert len(client.applies) == 4
    # Another cache (another informer of the kind) knows nothing of this writer's applies.
    await w.apply(LOCAL_QUEUES, queue(), existed=False, cache=cast(Informer, FakeCache("10")))
    assert len(client.applies) == 5


async def test_a_resource_version_that_is_no_revision_never_holds_an_apply_back() -> None:
    w, client = writer()
    cache = FakeCache("")  # not synced yet
    informer = cast(Informer, cache)
    await w.apply(LOCAL_QUEUES, queue(), existed=False, cache=informer)
    await w.apply(LOCAL_QUEUES, queue(), existed=False, cache=informer)
    assert len(client.applies) == 2


async def test_a_removal_is_a_merge_patch_to_null_sent_once_while_the_cache_lags() -> None:
    """docs/worker.md, "Writes and ownership": a Cohort's own quota is removed by a JSON
    merge patch (an apply of ``spec: {}`` would be refused as ``spec: null``), as the worker's
    field manager, and not sent again before the cache has seen it."""
    w, client = writer()
    cache = FakeCache("10")
    cohort = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": {"name": "c", "labels": {"app.kubernetes.io/managed-by": "gpustack-operator"}},
        "spec": {},
    }
    field = ("spec", "resourceGroups")
    await w.remove(COHORTS, cohort, field, cache=cast(Informer, cache))
    await w.remove(COHORTS, cohort, field, cache=cast(Informer, cache))
    assert len(client.patches) == 1 and client.applies == []
    name, patch, options = client.patches[0]
    assert name == "c" and patch == {"spec": {"resourceGroups": None}}
    assert options["patch_type"] == "merge"
    assert options["field_manager"] == "gpustack-operator"
    cache.last_resource_version = "11"  # seen: a quota applied again since is removed again
    await w.remove(COHORTS, cohort, field, cache=cast(Informer, cache))
    assert len(client.patches) == 2


async def test_the_writer_remembers_an_answer_without_its_managed_fields() -> None:
    """What a skipped apply returns is the last answer less ``managedFields`` (the largest part
    of it, read by no caller), and the memo holds no reference to the caller's object."""
    w, client = writer()
    informer = cast(Informer, FakeCache("10"))
    answer = {**queue(), "metadata": {**queue()["metadata"], "resourceVersion": "11"}}
    answer["metadata"]["managedFields"] = [{"manager": "gpustack-operator", "fieldsV1": {}}]

    async def apply(resource: object, want: dict[str, Any], **_: object) -> dict[str, Any]:
        client.applies.append(want)
        return copy.deepcopy(answer)

    client.apply = apply  # type: ignore[method-assign]
    sent = queue()
    first = await w.apply(LOCAL_QUEUES, sent, existed=False, cache=informer)
    assert "managedFields" in first["metadata"]  # the caller gets the whole answer
    sent["spec"]["clusterQueue"] = "changed after the call"
    again = await w.apply(LOCAL_QUEUES, queue(), existed=False, cache=informer)
    assert len(client.applies) == 1  # skipped: the cache has not seen revision 11
    assert "managedFields" not in again["metadata"]
    assert again == {k: v for k, v in first.items() if k != "metadata"} | {
        "metadata": {k: v for k, v in first["metadata"].items() if k != "managedFields"}
    }
