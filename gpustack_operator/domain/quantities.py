"""Kubernetes resource quantities: lenient parsing and canonical formatting.

Parsing never raises: a malformed quantity (or one too large to be real) is ``None`` and the
caller treats it as absent. Formatting produces the canonical form the API server would print
(``"16"``, ``"32Gi"``, ``"1Ti"``), so desired objects compare equal to what is stored.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from fractions import Fraction
from typing import Final

GI: Final = 2**30

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))"
)
_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_MAX_TEXT: Final = 64
_MAX_EXPONENT: Final = 64
# Kubernetes reads quantities into an int64 (Quantity.Value()); anything beyond is not a real
# capacity, and letting it through would produce quotas no API server can store.
_MAX_MAGNITUDE: Final = 2**63 - 1
_BINARY_SUFFIXES: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES: Final = ("", "k", "M", "G", "T", "P", "E")


def parse_quantity(value: object) -> Fraction | None:
    """The exact value of a quantity (``"16"``, ``"500m"``, ``"31Gi"``, ``"32G"``, ``"1e3"``).

    Accepts the strings Kubernetes accepts, and ints/finite floats (YAML may hold them).
    Returns ``None`` for anything else, including magnitudes beyond int64.
    """
    number = _parse_exact(value)
    if number is None or abs(number) > _MAX_MAGNITUDE:
        return None
    return number


def _parse_exact(value: object) -> Fraction | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value) if math.isfinite(value) else None
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        return None
    return _parse_text(value)


@functools.lru_cache(maxsize=8192)
def _parse_text(value: str) -> Fraction | None:
    """A quantity string's exact value. Memoised: the same strings (``"8"``, ``"64Gi"``,
    ``"true"``) come back for every node, and a ``Fraction`` is immutable."""
    match = _QUANTITY.fullmatch(value.strip())
    if match is None:
        return None
    number = Fraction(match["number"])
    if match["binary"]:
        number *= _BINARY[match["binary"]]
    else:
        exponent = int(match["exp"]) if match["exp"] is not None else _DECIMAL[match["decimal"]]
        if abs(exponent) > _MAX_EXPONENT:
            return None
        number *= Fraction(10) ** exponent
    return -number if match["sign"] == "-" else number


def ceil_value(quantity: Fraction) -> int:
    """Kubernetes ``Quantity.Value()``: the value rounded up to an integer."""
    # Integer arithmetic on the exact numerator and denominator: the same result as
    # math.ceil, without building an intermediate Fraction.
    return -(-quantity.numerator // quantity.denominator)


def floor_gi(quantity: Fraction) -> int:
    """Whole GiB in a byte quantity, rounded down."""
    return quantity.numerator // (quantity.denominator * GI)


def parse_count(value: object) -> int | None:
    """A positive integer count written as plain ASCII digits (``"2"``); else ``None``."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return None
    if len(value) > 18:
        return None
    count = int(value)
    return count if count > 0 else None


def _canonical(value: int, base: int, suffixes: tuple[str, ...]) -> str:
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    index = 0
    while index + 1 < len(suffixes) and magnitude % base == 0:
        magnitude //= base
        index += 1
    return f"{sign}{magnitude}{suffixes[index]}"


def format_binary_quantity(value: int) -> str:
    """Canonical binary-SI form of an integer byte count: ``34359738368`` -> ``32Gi``."""
    return _canonical(value, 1024, _BINARY_SUFFIXES)


def format_decimal_quantity(value: int) -> str:
    """Canonical decimal-SI form of an integer: ``16`` -> ``16``, ``2000`` -> ``2k``."""
    return _canonical(value, 1000, _DECIMAL_SUFFIXES)


CANONICAL_QUANTITY: Final = re.compile(r"-?(0|[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")


def is_canonical_quantity(text: str) -> bool:
    """Whether *text* is an integer quantity in canonical binary- or decimal-SI form."""
    if CANONICAL_QUANTITY.fullmatch(text) is None:
        return False
    value = parse_quantity(text)
    if value is None or value.denominator != 1:
        return False
    number = int(value)
    return text in (format_binary_quantity(number), format_decimal_quantity(number))


def _format(total: Fraction, binary: bool) -> str:
    """A canonical quantity for *total*: binary-SI when the inputs were, milli-units if needed."""
    if total.denominator == 1:
        value = int(total)
        return format_binary_quantity(value) if binary else format_decimal_quantity(value)
    milli = total * 1000
    if milli.denominator == 1:
        return f"{int(milli)}m"
    return str(float(total))


def sum_quantities(pairs: Iterable[tuple[str, object]]) -> dict[str, str]:
    """Sum ``(resource, quantity)`` pairs per resource; unparsable quantities are skipped."""
    totals: dict[str, Fraction] = {}
    binary: dict[str, bool] = {}
    for resource, raw in pairs:
        value = parse_quantity(raw)
        if value is None:
            continue
        totals[resource] = totals.get(resource, Fraction(0)) + value
        is_binary = isinstance(raw, str) and raw.endswith(_BINARY_SUFFIXES[1:])
        binary[resource] = binary.get(resource, True) and is_binary
    return {name: _format(total, binary[name]) for name, total in sorted(totals.items())}
