"""CEL evaluation for the simulated API server, with the Kubernetes library functions.

kube-apiserver evaluates CEL (https://kubernetes.io/docs/reference/using-api/cel/) in CRD
``x-kubernetes-validations`` rules and in ValidatingAdmissionPolicies. This module is the one
place the simulator compiles and runs CEL, whatever asks for it: expressions are compiled once
and cached (:func:`compile_expression`), and run with the Kubernetes extension functions the
CEL core lacks (:data:`KUBERNETES_FUNCTIONS`, see docs/simulator.md, "CEL rules").

The evaluator is the ``common-expression-language`` package (Rust bindings of cel-rust): it
has the core CEL language and macros (``has``, ``all``, ``exists``, ``exists_one``, ``map``,
``filter``, ``size``, ``matches``, ``in``, the ternary) that the Kueue and NFD CRD rules use,
and it is fast enough to run on every write of the test suite.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

import cel

__all__ = [
    "KUBERNETES_FUNCTIONS",
    "CelError",
    "compile_expression",
    "evaluate",
]


class CelError(Exception):
    """An expression that does not compile or fails while running (no such key, bad types)."""


def _is_sorted(items: list[Any]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(items))


def _index_of(where: Any, what: Any) -> int:
    """``indexOf`` of Kubernetes' list and strings libraries (-1 when absent)."""
    if isinstance(where, str):
        return where.find(what)
    return next((i for i, item in enumerate(where) if item == what), -1)


def _last_index_of(where: Any, what: Any) -> int:
    if isinstance(where, str):
        return where.rfind(what)
    return next((i for i in range(len(where) - 1, -1, -1) if where[i] == what), -1)


def _split(text: str, separator: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    return text.split(separator, limit - 1) if limit > 0 else text.split(separator)


def _join(items: list[str], separator: str = "") -> str:
    return separator.join(items)


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None


def _find(text: str, pattern: str) -> str:
    """``find`` of Kubernetes' regex library: the first match of *pattern*, ``""`` if none."""
    match = _regex(pattern).search(text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    """``findAll``: every match (whole matches, never groups), at most *limit* when >= 0."""
    found = [m.group(0) for m in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


def _sum(items: list[Any]) -> Any:
    return sum(items, 0.0 if any(isinstance(i, float) for i in items) else 0)


KUBERNETES_FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    # Kubernetes list library (k8s.io/apiserver/pkg/cel/library/lists.go).
    "isSorted": _is_sorted,
    "sum": _sum,
    "min": min,
    "max": max,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    # CEL strings extension, as Kubernetes enables it (ext.Strings).
    "lowerAscii": lambda s: s.lower(),
    "upperAscii": lambda s: s.upper(),
    "trim": lambda s: s.strip(),
    "split": _split,
    "join": _join,
    # Kubernetes regex library (k8s.io/apiserver/pkg/cel/library/regex.go); Karpenter's
    # NodePool and NodeClaim rules call find().
    "find": _find,
    "findAll": _find_all,
}
"""Functions of the Kubernetes CEL environment that the CEL core does not have."""


@functools.lru_cache(maxsize=4096)
def compile_expression(expression: str) -> cel.Program:
    """The compiled *expression*, compiled once per process; raises :class:`CelError`."""
    try:
        return cel.compile(expression)
    except Exception as exc:  # the binding raises ValueError/RuntimeError by kind
        raise CelError(f"compilation failed: {exc}") from None


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """Run *expression* with *variables* (plain JSON values) and the Kubernetes functions.

    Raises :class:`CelError` when it does not compile or fails at run time, with the
    message kube-apiserver would give (``no such key: x``).
    """
    program = compile_expression(expression)
    context = cel.Context(dict(variables), dict(KUBERNETES_FUNCTIONS))
    try:
        return program.execute(context)
    except KeyError as exc:
        raise CelError(f"no such key: {exc.args[0] if exc.args else ''}") from None
    except Exception as exc:
        raise CelError(str(exc)) from None
