"""Pod eviction, PodDisruptionBudget status and graceful Pod deletion
(docs/simulator.md, "Pod eviction")."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.server import SimServer
from tests.integration.sim.helpers import call, pb_envelope, pb_field, pb_number, watch_lines

pytestmark = pytest.mark.anyio

PODS = "/api/v1/namespaces/default/pods"
PDBS = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
PROTOBUF = "application/vnd.kubernetes.protobuf"


def pod(name: str, *, ready: bool = True, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": {"app": "web"}}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def budget(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }


def eviction(name: str, version: str = "policy/v1", **options: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": version, "kind": "Eviction", "metadata": {"name": name}}
    if options:
        body["deleteOptions"] = options
    return body


def status_of(sim: SimServer, name: str = "web") -> dict[str, Any]:
    pdb = sim.store.get("policy/v1", "PodDisruptionBudget", name, "default")
    assert pdb is not None
    return pdb["status"]  # type: ignore[no-any-return]


async def evict(kube: Any, name: str, body: dict[str, Any] | None = None, **params: Any) -> Any:
    return await call(
        kube, "POST", f"{PODS}/{name}/eviction", body or eviction(name), params=params
    )


async def test_an_eviction_without_a_budget_marks_and_deletes_the_pod(sim, kube):
    sim.store.create(pod("a"))
    rv = str(sim.store.resource_version)
    answer = await evict(kube, "a")
    assert answer.status_code == 201, answer.text
    assert answer.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    events = await watch_lines(kube, PODS, {"resourceVersion": rv}, stop_after=3)
    # The condition, the graceful deletion (the default 30 s grace), the kubelet's delete.
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert events[1]["object"]["metadata"]["deletionGracePeriodSeconds"] == 30
    target = next(
        c for c in events[0]["object"]["status"]["conditions"] if c["type"] == "DisruptionTarget"
    )
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )
    missing = await evict(kube, "a")
    assert missing.status_code == 404 and missing.json()["message"] == 'pods "a" not found'


async def test_eviction_bodies_are_checked_and_v1beta1_is_accepted(sim, kube):
    sim.store.create(pod("a"))
    other = await evict(kube, "a", eviction("b"))
    assert other.status_code == 400
    assert other.json()["message"] == "name in URL does not match name in Eviction object"
    both = await evict(kube, "a", eviction("a", dryRun=["All"]), dryRun="Bogus")
    assert both.status_code == 400
    assert both.json()["message"].startswith("Non-matching dry-run options")
    stale = await evict(kube, "a", eviction("a", preconditions={"uid": "not-it"}))
    assert stale.status_code == 409 and "Precondition failed: UID" in stale.json()["message"]
    dry = await evict(kube, "a", dryRun="All")
    assert dry.status_code == 201
    assert sim.store.get("v1", "Pod", "a", "default") is not None
    assert (await evict(kube, "a", eviction("a", "policy/v1beta1"))).status_code == 201
    assert sim.store.get("v1", "Pod", "a", "default") is None
    assert (await call(kube, "GET", f"{PODS}/a/eviction")).status_code == 405


async def test_the_budget_status_follows_ready_pods_and_evictions_respect_it(sim, kube):
    for name in ("a", "b"):
        sim.store.create(pod(name))
    sim.store.create(pod("c", ready=False))
    assert (await call(kube, "POST", PDBS, budget(minAvailable=1))).status_code == 201
    await sim.settle()
    status = status_of(sim)
    assert {k: status[k] for k in ("currentHealthy", "desiredHealthy", "expectedPods")} == {
        "currentHealthy": 2,
        "desiredHealthy": 1,
        "expectedPods": 3,
    }
    assert status["disruptionsAllowed"] == 1 and status["observedGeneration"] == 1
    assert status["conditions"][0]["type"] == "DisruptionAllowed"
    assert status["conditions"][0]["reason"] == "SufficientPods"

    rv = str(sim.store.resource_version)
    assert (await evict(kube, "a")).status_code == 201
    # The eviction itself takes the disruption and records the pod for the controller.
    (decremented,) = await watch_lines(kube, PDBS, {"resourceVersion": rv}, stop_after=1)
    assert decremented["object"]["status"]["disruptionsAllowed"] == 0
    assert list(decremented["object"]["status"]["disruptedPods"]) == ["a"]
    assert decremented["object"]["status"]["conditions"][0]["reason"] == "InsufficientPods"
    await sim.settle()
    status = status_of(sim)
    assert status["currentHealthy"] == 1 and status["disruptionsAllowed"] == 0
    assert "disruptedPods" not in status  # the pod is gone

    refused = await evict(kube, "b")
    assert refused.status_code == 429 and "Retry-After" not in refused.headers
    assert refused.json()["reason"] == "TooManyRequests"
    assert refused.json()["message"] == (
        "Cannot evict pod as it would violate the pod's disruption budget."
    )
    assert refused.json()["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget web needs 1 healthy pods and has 1 currently",
        }
    ]
    left = sim.store.get("v1", "Pod", "b", "default")
    assert left is not None
    assert [c["type"] for c in left["status"]["conditions"]] == ["Ready"]
    # A pod that is not Ready counts for nothing: it may go while the budget is met.
    assert (await evict(kube, "c")).status_code == 201


async def test_expected_pods_come_from_the_controllers_replicas(sim, kube):
    owner = sim.store.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
            },
        }
    )
    for name in ("a", "b"):
        sim.store.create(pod(name, owner=owner))
    sim.store.create(budget(maxUnavailable="34%"))
    await sim.settle()
    status = status_of(sim)
    assert (status["expectedPods"], status["desiredHealthy"], status["currentHealthy"]) == (3, 1, 2)
    assert status["disruptionsAllowed"] == 1
    sim.store.create(budget("second", minAvailable=0))
    await sim.settle()
    two = await evict(kube, "a")
    assert two.status_code == 500
    assert two.json()["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
        "not support."
    )


async def test_a_grace_period_keeps_the_pod_until_the_kubelet_stand_in_deletes_it(sim, kube):
    sim.store.create(pod("a"))
    rv = str(sim.store.resource_version)
    assert (await evict(kube, "a", eviction("a", gracePeriodSeconds=30))).status_code == 201
    events = await watch_lines(kube, PODS, {"resourceVersion": rv}, stop_after=3)
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    meta = events[1]["object"]["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 30 and meta["deletionTimestamp"]
    # A Pod on no Node goes at once whatever the grace period.
    unbound = pod("b")
    del unbound["spec"]["nodeName"]
    sim.store.create(unbound)
    deleted = await call(kube, "DELETE", f"{PODS}/b", params={"gracePeriodSeconds": "30"})
    assert deleted.status_code == 200
    assert sim.store.get("v1", "Pod", "b", "default") is None


async def test_protobuf_evictions_and_delete_options_are_decoded(sim, kube):
    sim.store.create(pod("a"))
    sim.store.create(pod("b"))
    # Eviction{metadata{name: a}, deleteOptions{dryRun: [All]}}, as client-go encodes it
    raw = pb_field(1, pb_field(1, b"a")) + pb_field(2, pb_field(5, b"All"))
    body = pb_envelope("policy/v1", "Eviction", raw)
    answer = await call(kube, "POST", f"{PODS}/a/eviction", raw=body, content_type=PROTOBUF)
    assert answer.status_code == 201, answer.text
    assert sim.store.get("v1", "Pod", "a", "default") is not None  # a dry run
    # DeleteOptions{gracePeriodSeconds: 20} on a DELETE
    options = pb_envelope("meta.k8s.io/v1", "DeleteOptions", pb_number(1, 20))
    deleting = await call(kube, "DELETE", f"{PODS}/b", raw=options, content_type=PROTOBUF)
    assert deleting.status_code == 200, deleting.text
    assert deleting.json()["metadata"]["deletionGracePeriodSeconds"] == 20


async def test_a_budget_not_yet_observed_refuses_with_a_retry() -> None:
    sim = SimServer(namespaces=["default"])  # not started: no disruption controller runs
    sim.store.create(pod("a"))
    sim.store.create(budget(minAvailable=0))
    pod_info = sim.store.info_for("v1", "Pod")
    with pytest.raises(ApiError) as refused:
        sim.evictions.evict(pod_info, "default", "a", {})
    assert refused.value.code == 429 and refused.value.headers == {"Retry-After": "10"}
    assert refused.value.status["details"] == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget web is still being processed by the server.",
            }
        ],
        "retryAfterSeconds": 10,
    }
