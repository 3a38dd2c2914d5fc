"""Any JSON the server sends, decoded by the client or read by the elector, ends in a typed
error or a result, never in a ``TypeError``/``AttributeError``/``OverflowError`` (docs/runtime.md,
"Failure types" and "Leader election"). The hostile-server tests hold one case per defect
found; these draw random documents over the keys those answers use."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpustack_operator.runtime.client import ApiError, WatchStream
from gpustack_operator.runtime.errors import error_from_response
from gpustack_operator.runtime.leaderelection import LeaderElectionConfig, LeaderElector
from gpustack_operator.runtime.resources import Resource

KEYS = st.sampled_from(
    [
        "type",
        "object",
        "metadata",
        "resourceVersion",
        "code",
        "reason",
        "message",
        "details",
        "retryAfterSeconds",
        "spec",
        "holderIdentity",
        "leaseDurationSeconds",
        "leaseTransitions",
        "renewTime",
        "other",
    ]
)
DOCUMENTS = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**308, max_value=10**400)
    | st.floats()
    | st.text(max_size=5)
    | st.sampled_from(["ADDED", "ERROR", "BOOKMARK", "a"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=20,
)
QUICK = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))


@QUICK
@given(DOCUMENTS)
def test_a_watch_line_is_an_event_or_a_typed_error(document: Any) -> None:
    try:
        event = WatchStream._decode(json.dumps(document).encode())
    except ApiError:
        return
    assert isinstance(event.resource_version, str)


@QUICK
@given(DOCUMENTS, st.integers(min_value=400, max_value=599))
def test_an_error_body_is_a_typed_error(document: Any, code: int) -> None:
    error = error_from_response(code, "No", json.dumps(document).encode(), None)
    assert isinstance(error, ApiError) and isinstance(error.message, str)
    assert error.retry_after is None or 0 <= error.retry_after < float("inf")


class Answers:
    """A Lease client whose every answer is *document* (what the real client returns for a
    JSON object; anything else it raises as ``InvalidResponse``)."""

    def __init__(self, document: Any) -> None:
        self.document = document

    async def _answer(self) -> dict[str, Any]:
        if not isinstance(self.document, dict):
            raise ApiError("not an object", reason="InvalidResponse")
        return self.document

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        return await self._answer()

    async def create(self, res: Resource, body: Any, namespace: str | None = None) -> Any:
        return await self._answer()

    async def replace(self, res: Resource, body: Any, *, subresource: str | None = None) -> Any:
        return await self._answer()


@pytest.mark.anyio
@QUICK
@given(DOCUMENTS)
async def test_the_elector_reads_any_lease_or_fails_the_attempt(document: Any) -> None:
    held = {"metadata": {}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 1}}
    elector = LeaderElector(Answers(held), LeaderElectionConfig("l", "default", "a"))
    assert await elector.try_acquire_or_renew()
    elector.client = Answers(document)
    assert isinstance(await elector.try_acquire_or_renew(), bool)
    await elector._release()
