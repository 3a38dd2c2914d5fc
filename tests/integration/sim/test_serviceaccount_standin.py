"""The ServiceAccount stand-in keeps a ``default`` ServiceAccount in every namespace, as
kube-controller-manager does (docs/simulator.md, "ServiceAccount stand-in")."""

from __future__ import annotations

import pytest

from gpustack_sim.apiserver.server import SimServer
from gpustack_sim.standins.serviceaccounts import ServiceAccountStandIn
from tests.integration.sim.helpers import call, eventually

pytestmark = pytest.mark.anyio


def default_account(sim: SimServer, namespace: str) -> dict | None:
    return sim.store.get("v1", "ServiceAccount", "default", namespace)


async def test_every_namespace_gets_a_default_service_account(sim: SimServer, kube) -> None:
    assert default_account(sim, "default") is None
    async with ServiceAccountStandIn(sim) as stand_in:
        await eventually(lambda: default_account(sim, "default"))
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
        assert (await call(kube, "POST", "/api/v1/namespaces", namespace)).status_code == 201
        first = await eventually(lambda: default_account(sim, "team"))
        # Deleted, it comes back (a new object); a token can be requested for it.
        path = "/api/v1/namespaces/team/serviceaccounts/default"
        assert (await call(kube, "DELETE", path)).status_code == 200
        again = await eventually(
            lambda: (
                (a := default_account(sim, "team"))
                and a["metadata"]["uid"] != first["metadata"]["uid"]
                and a
            )
        )
        assert again["metadata"]["name"] == "default"
        token = await call(kube, "POST", f"{path}/token", {"spec": {}})
        assert token.status_code == 201 and token.json()["status"]["token"]
        await eventually(stand_in.idle)
        other = await call(kube, "GET", "/api/v1/namespaces/team/serviceaccounts")
        assert [a["metadata"]["name"] for a in other.json()["items"]] == ["default"]


async def test_a_terminating_namespace_gets_none(sim: SimServer) -> None:
    stand_in = ServiceAccountStandIn(sim)
    sim.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "going"}})
    sim.store.delete("v1", "Namespace", "going")  # waits for its finalizer: Terminating
    assert sim.store.get("v1", "Namespace", "going")["metadata"]["deletionTimestamp"]
    stand_in.ensure("going")
    stand_in.ensure("absent")
    assert default_account(sim, "going") is None and default_account(sim, "absent") is None
