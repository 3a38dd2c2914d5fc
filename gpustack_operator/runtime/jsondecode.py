"""Decoding large LIST bodies without stalling the event loop.

``json.loads`` of a multi-megabyte list (an unpaged re-LIST of thousands of Nodes) holds the
event loop for tens of milliseconds, next to Lease renewals and probe answers. A thread does
not help: the C decoder keeps the GIL for the whole call. :func:`decode_object` instead
decodes the top-level object key by key and the ``items`` array item by item
(``JSONDecoder.raw_decode``), handing the loop back whenever it has run for ``budget``
seconds. Bodies under :data:`INCREMENTAL_BYTES` are decoded in one call. What still holds the
loop in one piece is the UTF-8 decoding of the whole body into one string (about 1 ms per
10 MiB, several when that memory is touched for the first time).

Both decoders here report every undecodable body as ``ValueError``, nesting too deep for the
decoder (a ``RecursionError`` from ``json``) included, so the client maps any body to its
own typed error (docs/runtime.md, "Failure types").

Bodies, watch events and answers are decoded, and request bodies encoded, with msgspec, 3-15x
faster than the standard library per Node-sized object (docs/performance.md, "The third
cuts: JSON, the writer's record, the view"). What msgspec refuses and ``json`` accepts (a
number beyond a double's range, ``NaN``, a lone surrogate, a byte-order mark) is decoded by
``json``, and a body msgspec would write differently (``NaN`` or an infinity, which it
writes as ``null``) or cannot write is encoded by ``json``: the values are those the
standard library gives, keys in their order, integers of any size exact.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, Final

import anyio
import anyio.lowlevel
import msgspec

__all__ = ["INCREMENTAL_BYTES", "decode_object", "dumps", "loads"]

INCREMENTAL_BYTES: Final = 256 * 1024
"""Bodies at least this large are decoded incrementally (smaller ones take well under 1 ms)."""
_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_DECODER: Final = json.JSONDecoder()
_FAST_DECODE: Final = msgspec.json.Decoder().decode
_FAST_ENCODE: Final = msgspec.json.Encoder().encode


def _skip(text: str, at: int) -> int:
    found = _WHITESPACE.match(text, at)
    return found.end() if found is not None else at


def _expect(text: str, at: int, char: str) -> int:
    if text[at : at + 1] != char:
        raise ValueError(f"expected {char!r} at offset {at} of the JSON body")
    return _skip(text, at + 1)


def loads(body: bytes | str) -> Any:
    """``json.loads``, raising ``ValueError`` for nesting too deep to decode as for any other
    invalid JSON (``json`` raises ``RecursionError`` there)."""
    try:
        return _loads(body)
    except RecursionError as exc:
        raise ValueError("the JSON nests too deeply to decode") from exc


def _loads(body: bytes | str) -> Any:
    try:
        return _FAST_DECODE(body)
    except ValueError:  # msgspec.DecodeError, or invalid UTF-8: json decides, as before
        return json.loads(body)


def dumps(value: Any) -> bytes:
    """*value* as compact UTF-8 JSON (``json.dumps(value, separators=(",", ":"))`` decodes to
    the same values in the same order). Raises ``TypeError``, ``ValueError`` or
    ``RecursionError`` for what ``json`` cannot encode."""
    try:
        encoded = _FAST_ENCODE(value)
    except (TypeError, ValueError, RecursionError):
        encoded = b"null"  # json decides below, raising as it always did
    if b"null" in encoded:  # maybe a NaN or infinity msgspec wrote as null: json keeps them
        return json.dumps(value, separators=(",", ":")).encode()
    return encoded


async def decode_object(
    body: bytes | str,
    *,
    budget: float = 0.002,
    clock: Callable[[], float] = time.perf_counter,
) -> Any:
    """Decode *body* (UTF-8 JSON), yielding to the event loop every *budget* seconds while it
    decodes a large object's ``items``. Raises ``ValueError`` on invalid JSON."""
    try:
        return await _decode(body, budget, clock)
    except RecursionError as exc:
        raise ValueError("the JSON nests too deeply to decode") from exc


async def _decode(body: bytes | str, budget: float, clock: Callable[[], float]) -> Any:
    if len(body) < INCREMENTAL_BYTES:
        return _loads(body)
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    at = _skip(text, 0)
    if text[at : at + 1] != "{":
        return _loads(text)
    deadline = clock() + budget
    result: dict[str, Any] = {}
    at = _skip(text, at + 1)
    if text[at : at + 1] == "}":
        at += 1
    else:
        while True:
            key, at = _DECODER.raw_decode(text, at)
            if not isinstance(key, str):
                raise ValueError(f"an object key at offset {at} is not a string")
            at = _expect(text, _skip(text, at), ":")
            if key == "items" and text[at : at + 1] == "[":
                items: list[Any] = []
                at = _skip(text, at + 1)
                if text[at : at + 1] == "]":
                    at += 1
                else:
                    while True:
                        item, at = _DECODER.raw_decode(text, at)
                        items.append(item)
                        if clock() >= deadline:
                            await anyio.lowlevel.checkpoint()
                            deadline = clock() + budget
                        at = _skip(text, at)
                        if text[at : at + 1] == "]":
                            at += 1
                            break
                        at = _expect(text, at, ",")
                result[key] = items
            else:
                result[key], at = _DECODER.raw_decode(text, at)
            at = _skip(text, at)
            if text[at : at + 1] == "}":
                at += 1
                break
            at = _expect(text, at, ",")
    if _skip(text, at) != len(text):
        raise ValueError(f"extra data after the JSON object at offset {at}")
    return result
