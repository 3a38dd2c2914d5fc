"""String shaping shared by every label and name (docs/labels.md).

``sanitize_label_value`` turns free text (product names, versions) into a label value;
``normalize_name`` turns a CPU or product name into the slug used inside label keys and object
names; ``format_binary_si`` renders byte counts the way the device manager labels memory.
"""

from __future__ import annotations

from typing import Final

from gpustack_operator.domain.validation import LABEL_VALUE_MAX_LEN

_SEPARATORS: Final = frozenset("-_.")
_ASCII_ALNUM: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_TRADEMARKS: Final = ("(R)", "(r)", "(TM)", "(tm)")
_BINARY_UNITS: Final = (
    ("Ei", 2**60),
    ("Pi", 2**50),
    ("Ti", 2**40),
    ("Gi", 2**30),
    ("Mi", 2**20),
    ("Ki", 2**10),
)


def sanitize_label_value(value: str) -> str:
    """Make *value* a valid label value (docs/labels.md).

    ASCII letters and digits are kept (case preserved), a space becomes ``-``; ``-_.`` are
    kept unless leading or following another separator; anything else is dropped. The result
    is cut at 63 characters and a trailing separator is trimmed.
    """
    out: list[str] = []
    for ch in value:
        if len(out) >= LABEL_VALUE_MAX_LEN:
            break
        if ch in _ASCII_ALNUM:
            out.append(ch)
            continue
        sep = "-" if ch == " " else ch
        if sep in _SEPARATORS and out and out[-1] not in _SEPARATORS:
            out.append(sep)
    while out and out[-1] in _SEPARATORS:
        out.pop()
    return "".join(out)


def _strip_cpu_noise(name: str) -> str:
    """docs/naming.md rule 1: cut the clock suffix and drop trademark markers of a CPU name."""
    cut = name.find(" @ ")
    if cut >= 0:
        name = name[:cut]
        if name.endswith(" CPU"):
            name = name[: -len(" CPU")]
    for mark in _TRADEMARKS:
        name = name.replace(mark, "")
    return name


def normalize_name(name: str, prefix: str, max_len: int, *, cpu_name: bool = False) -> str:
    """Slug *name* into a key part (docs/naming.md).

    Lower-cases ASCII letters, keeps digits, turns spaces into ``-``, keeps ``-_.`` except
    leading or doubled, drops everything else. Whenever the slug so far equals *prefix*
    (case-insensitively) it is cleared, so a name repeating its manufacturer loses it
    (``NVIDIA A10G`` with prefix ``nvidia`` gives ``a10g``). Stops at *max_len* characters
    and drops one trailing separator.
    """
    if cpu_name:
        name = _strip_cpu_noise(name)
    prefix_lower = prefix.lower()
    limit = max(max_len, 0)
    buf: list[str] = []
    for ch in name:
        if len(buf) >= limit:
            break
        if ch in _ASCII_ALNUM:
            buf.append(ch.lower())
        else:
            sep = "-" if ch == " " else ch
            if sep not in _SEPARATORS or not buf or buf[-1] in _SEPARATORS:
                continue
            buf.append(sep)
        if prefix_lower and len(buf) == len(prefix_lower) and "".join(buf) == prefix_lower:
            buf.clear()
    if buf and buf[-1] in _SEPARATORS:
        buf.pop()
    return "".join(buf)


def format_binary_si(value: int) -> str:
    """Bytes as a binary-SI quantity at the largest unit not above the value, rounded half-up.

    ``15360 MiB`` -> ``15Gi``; ``23028 MiB`` -> ``22Gi``; values under 1 KiB stay plain.
    """
    if value < 0:
        return "-" + format_binary_si(-value)
    for suffix, unit in _BINARY_UNITS:
        if value >= unit:
            return f"{(value + unit // 2) // unit}{suffix}"
    return str(value)
