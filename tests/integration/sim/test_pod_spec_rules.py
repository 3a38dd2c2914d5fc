"""A Pod (or Pod template) must list containers (docs/simulator.md, "Built-in kinds")."""

from __future__ import annotations

import pytest

from tests.integration.sim.helpers import call

pytestmark = pytest.mark.anyio


async def test_a_pod_without_containers_is_refused(kube):
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": []}}  # fmt: skip
    refused = await call(kube, "POST", "/api/v1/namespaces/default/pods", body)
    assert refused.status_code == 422
    assert refused.json()["message"] == 'Pod "p" is invalid: spec.containers: Required value'
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {"spec": {"restartPolicy": "Never"}}}}  # fmt: skip
    resp = await call(kube, "POST", "/apis/batch/v1/namespaces/default/jobs", job)
    assert resp.status_code == 422
    assert "spec.template.spec.containers: Required value" in resp.json()["message"]
