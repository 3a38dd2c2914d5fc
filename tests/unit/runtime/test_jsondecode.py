"""Incremental decoding of large LIST bodies (docs/performance.md, "Decoding large lists")."""

from __future__ import annotations

import json
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_operator.runtime.jsondecode import INCREMENTAL_BYTES, decode_object, dumps, loads

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


# --- the fast library gives what the standard library gives -----------------------------------

FLOATS = st.floats(allow_nan=True, allow_infinity=True)
EVERY_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | FLOATS
    | st.text(max_size=12)  # non-ASCII and lone surrogates included
)
EVERY_VALUE = st.recursive(
    EVERY_SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
# Each of these takes the standard library's way on decoding or encoding: a mistake there
# would change a value, an order or a type.
EDGES: list[str] = [
    '{"z":1,"a":2,"m":{"y":1,"b":2}}',  # key order kept
    '{"a":1,"a":2}',  # the last duplicate wins
    '"ü日本\\u00e9\\ud83d\\ude00"',  # non-ASCII, raw and escaped
    '"\\ud800"',  # a lone surrogate
    "123456789012345678901234567890",  # beyond 64 bits
    "-9223372036854775809",
    "18446744073709551616",
    "1e400",  # beyond a double: infinity
    "-1e400",
    "NaN",
    "Infinity",
    "5e-324",
    "1.7976931348623157e308",
    "0.1",
    "-0.0",
    "-0",
    "1E5",
    "\ufeff{}",  # a byte-order mark
    '{"labels":{"nullable":"null"},"value":null}',
]


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types, dict keys in the same order, NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (a != a and b != b) or (a == b and str(a) == str(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _outcome(decode: Any, body: str | bytes) -> tuple[bool, Any]:
    try:
        return True, decode(body)
    except ValueError:
        return False, None


@pytest.mark.parametrize("text", EDGES)
def test_decoding_gives_what_json_loads_gives_at_the_edges(text: str) -> None:
    """As text and as UTF-8 bytes: the same value, or a ``ValueError`` where ``json``
    raises one (a byte-order mark at the start of text)."""
    for body in (text, text.encode("utf-8", "surrogatepass")):
        ok, value = _outcome(loads, body)
        expected_ok, expected = _outcome(json.loads, body)
        assert ok == expected_ok
        assert _same(value, expected)


@settings(max_examples=300, deadline=None)
@given(value=EVERY_VALUE)
def test_encoding_decodes_to_what_json_dumps_gives(value: Any) -> None:
    """``dumps`` may write non-ASCII as UTF-8 rather than escaped, and numbers in another
    spelling, but a decoder reads exactly the values, types and key order ``json.dumps``
    writes; and ``loads`` of either gives them."""
    expected = json.dumps(value, separators=(",", ":"))
    encoded = dumps(value)
    assert _same(json.loads(encoded), json.loads(expected))
    assert _same(loads(encoded), json.loads(expected))
    assert _same(loads(expected), json.loads(expected))


@pytest.mark.parametrize("text", EDGES)
def test_encoding_at_the_edges(text: str) -> None:
    value = json.loads(text.encode())
    assert _same(json.loads(dumps(value)), value)


def test_encoding_refuses_what_json_refuses() -> None:
    for value in ({("a", "tuple key"): 1}, {"a": object()}):
        with pytest.raises(TypeError):
            dumps(value)
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises((ValueError, RecursionError)):
        dumps(circular)
