"""Error ``Status`` bodies byte for byte as kube-apiserver writes them: clients such as the
official Python client's ``create_from_yaml`` quote them verbatim (docs/simulator.md, "What
it implements")."""

from __future__ import annotations

import pytest

from tests.integration.sim.helpers import call

pytestmark = pytest.mark.anyio

CMS = "/api/v1/namespaces/default/configmaps"


async def test_already_exists_and_not_found_bodies(kube):
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert (await call(kube, "POST", CMS, body)).status_code == 201
    again = await call(kube, "POST", CMS, body)
    assert again.text == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        '"message":"configmaps \\"c\\" already exists","reason":"AlreadyExists",'
        '"details":{"name":"c","kind":"configmaps"},"code":409}\n'
    )
    missing = await call(kube, "GET", "/apis/apps/v1/namespaces/default/deployments/d")
    assert missing.text == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        '"message":"deployments.apps \\"d\\" not found","reason":"NotFound",'
        '"details":{"name":"d","group":"apps","kind":"deployments"},"code":404}\n'
    )
