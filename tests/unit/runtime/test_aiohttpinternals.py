"""The aiohttp internals the transport relies on (runtime/aiohttpinternals.py) still exist:
this fails on an aiohttp upgrade that renames or changes them. The behaviour they give is
covered by tests/integration/runtime/test_hostile_server.py (bytes after an answer) and
tests/integration/runtime/test_write_fence.py (the check after connection set-up)."""

from __future__ import annotations

import inspect

import aiohttp
import pytest
from aiohttp.client_proto import ResponseHandler

from gpustack_operator.runtime.aiohttpinternals import OneAnswerHandler, guarded_connector

pytestmark = pytest.mark.anyio


def test_the_overridden_methods_keep_their_signatures() -> None:
    params = inspect.signature(ResponseHandler.set_response_params).parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for n, p in params.items() if n != "self")
    assert list(inspect.signature(ResponseHandler.feed_data).parameters) == [
        "self",
        "data",
        "size",
    ]
    assert list(inspect.signature(ResponseHandler.data_received).parameters) == ["self", "data"]
    assert list(inspect.signature(aiohttp.TCPConnector.connect).parameters) == [
        "self",
        "req",
        "traces",
        "timeout",
    ]


async def test_the_connector_builds_the_guarded_handler() -> None:
    connector = guarded_connector(lambda code, headers: None)
    try:
        handler = connector._factory()
        assert isinstance(handler, OneAnswerHandler)
        assert handler._payload is None  # read by OneAnswerHandler.data_received
        assert handler.exception() is None  # a parse error, read after data_received
    finally:
        await connector.close()
