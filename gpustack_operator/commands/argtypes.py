"""Argument types shared by the subcommands: parse one flag value or say what was expected.

Each raises ``argparse.ArgumentTypeError`` with a message naming the accepted form, which
argparse prints as ``argument --flag: <message>`` (a plain ``ValueError`` would print only
"invalid <function name> value").
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_UNITS = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0))


def duration(raw: str) -> float:
    """``15``, ``15s``, ``500ms``, ``2m``, ``1h`` -> seconds (positive, finite)."""
    value = parse_duration(raw)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive, finite duration, got {raw!r}")
    return value


def parse_duration(raw: str) -> float:
    """``15``, ``15s``, ``500ms``, ``2m``, ``1h`` -> finite seconds, of any sign."""
    text = raw.strip()
    scale = 1.0
    for suffix, factor in _UNITS:
        if text.endswith(suffix):
            text, scale = text.removesuffix(suffix), factor
            break
    value = _converted(text, float, "a duration like 15s", raw) * scale
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite duration, got {raw!r}")
    return value


def positive_int(raw: str) -> int:
    """An integer of at least 1."""
    value = _converted(raw, int, "an integer", raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {raw!r}")
    return value


def positive_number(raw: str) -> float:
    """A positive, finite number (a rate, a count of seconds without unit)."""
    value = _converted(raw, float, "a number", raw)
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive, finite number, got {raw!r}")
    return value


def _converted(text: str, convert: Callable[[str], T], expected: str, raw: str) -> T:
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {raw!r}") from None


def comma_list(raw: str) -> list[str]:
    """``a, b,,c`` -> ``["a", "b", "c"]``."""
    return [item.strip() for item in raw.split(",") if item.strip()]
