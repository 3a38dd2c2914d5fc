"""Incremental decoding of large LIST bodies (docs/performance.md, "Decoding large lists")."""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_operator.runtime.jsondecode import INCREMENTAL_BYTES, decode_object, loads

pytestmark = pytest.mark.anyio

SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)


def padded(doc: dict[str, Any], indent: int | None = None) -> str:
    """*doc* as JSON, made large enough to take the incremental path."""
    doc = {**doc, "padding": "x" * INCREMENTAL_BYTES}
    return json.dumps(doc, indent=indent)


@settings(max_examples=25, deadline=None)
@given(
    items=st.lists(VALUES, max_size=6),
    rest=st.dictionaries(st.text(max_size=8).filter(lambda k: k != "items"), VALUES, max_size=3),
    indent=st.sampled_from([None, 1]),
)
def test_decodes_exactly_what_json_loads_does(
    items: list[Any], rest: dict[str, Any], indent: int | None
) -> None:
    text = padded({**rest, "items": items}, indent)
    decoded = anyio.run(lambda: decode_object(text.encode()))
    assert decoded == json.loads(text)


async def test_yields_to_the_loop_while_decoding_many_items() -> None:
    items = [{"metadata": {"name": f"node-{i}"}, "labels": {"a": "b" * 50}} for i in range(3000)]
    body = json.dumps({"kind": "NodeList", "items": items}).encode()
    assert len(body) >= INCREMENTAL_BYTES
    ticks = 0
    clock = iter(range(10**6))  # every item "takes" one unit: the budget is two items

    async def count_ticks() -> None:
        nonlocal ticks
        while True:
            await anyio.lowlevel.checkpoint()
            ticks += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(count_ticks)
        decoded = await decode_object(body, budget=2, clock=lambda: float(next(clock)))
        tg.cancel_scope.cancel()
    assert decoded["items"] == items
    assert ticks >= 100, "the decoder never gave the loop back"


async def test_invalid_bodies_raise_value_error() -> None:
    good = padded({"items": [1, 2]})
    for bad in (good[:-1], good + "x", good.replace("[1, 2]", "[1 2]")):
        with pytest.raises(ValueError):
            await decode_object(bad.encode())


@pytest.mark.parametrize("size", [10_000, INCREMENTAL_BYTES])
async def test_nesting_too_deep_to_decode_is_a_value_error(size: int) -> None:
    """``json`` raises ``RecursionError`` there; callers map ``ValueError`` to typed errors."""
    nested = "[" * size + "]" * size
    with pytest.raises(ValueError, match="nests too deeply"):
        loads(nested)
    with pytest.raises(ValueError, match="nests too deeply"):
        await decode_object(nested)
    items = '{"items":[' + nested + "]}"
    with pytest.raises(ValueError, match="nests too deeply"):
        await decode_object(items)
