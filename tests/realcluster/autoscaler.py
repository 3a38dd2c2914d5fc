"""A stand-in for the autoscaler that answers ProvisioningRequests (docs/realcluster.md).

Kueue's provisioning admission check (real, in the tier) creates a ProvisioningRequest for a
Workload of a pool at zero and waits for the autoscaler's answer in its conditions. This
stand-in is that autoscaler for one node group: it answers each new request either by adding
the nodes the request asks for, registered through the node agents as a kubelet would, and
setting ``Provisioned=True`` (cluster-autoscaler's ``best-effort-atomic-scale-up`` and GKE's
queued provisioning both answer that way), or, when told to fail, by setting ``Failed=True``.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
from collections.abc import Mapping
from typing import Any

import anyio
import httpx

from tests.realcluster.nodes import NodeAgents

PROVISIONING_REQUESTS = "/apis/autoscaling.x-k8s.io/v1/provisioningrequests"


def _condition(kind: str, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


class AutoscalerStandIn:
    """Answers ProvisioningRequests with nodes of *template*, or with a failure."""

    def __init__(
        self, agents: NodeAgents, template: Mapping[str, Any], *, fail: bool = False
    ) -> None:
        self.agents = agents
        self.template = template
        self.fail = fail
        self.answered: list[str] = []
        self._made = 0

    async def run(self, period: float = 0.3) -> None:
        while True:
            # A server restarting or a race: the next round retries.
            with contextlib.suppress(httpx.HTTPError):
                await self._answer_new_requests()
            await anyio.sleep(period)

    async def _answer_new_requests(self) -> None:
        http = self.agents._http
        response = await http.get(PROVISIONING_REQUESTS)
        response.raise_for_status()
        for request in response.json().get("items") or []:
            meta = request["metadata"]
            conditions = (request.get("status") or {}).get("conditions") or []
            if any(c.get("type") in ("Provisioned", "Failed") for c in conditions):
                continue
            generation = int(meta.get("generation") or 1)
            if self.fail:
                answer = _condition(
                    "Failed", "ScaleUpFailed", "the node group has no capacity left", generation
                )
            else:
                await self.agents.register(self._nodes_for(request))
                answer = _condition(
                    "Provisioned", "Provisioned", "the nodes were added", generation
                )
            path = (
                f"/apis/autoscaling.x-k8s.io/v1/namespaces/{meta['namespace']}"
                f"/provisioningrequests/{meta['name']}/status"
            )
            patched = await http.patch(
                path,
                json={"status": {"conditions": [*conditions, answer]}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            patched.raise_for_status()
            self.answered.append(meta["name"])

    async def add_nodes(self, count: int) -> None:
        """*count* nodes of the template without a request: where no ProvisioningRequest is
        written (the simulator, docs/simulator.md), the test plays the autoscaler's scale-up."""
        await self.agents.register(self._new_nodes(count))

    def _nodes_for(self, request: Mapping[str, Any]) -> list[dict[str, Any]]:
        count = sum(int(p.get("count") or 1) for p in request["spec"].get("podSets") or [])
        return self._new_nodes(count)

    def _new_nodes(self, count: int) -> list[dict[str, Any]]:
        nodes = []
        for _ in range(count):
            self._made += 1
            node = copy.deepcopy(dict(self.template))
            node["metadata"]["name"] = f"{self.template['metadata']['name']}-{self._made}"
            nodes.append(node)
        return nodes
