"""Label selectors: the one implementation of Kubernetes' matching, for the product and the
simulator's stand-ins and API-server double.

Two forms: a ``metav1.LabelSelector`` (``matchLabels`` and ``matchExpressions`` with ``In``,
``NotIn``, ``Exists``, ``DoesNotExist``; kubernetes/apimachinery
``pkg/apis/meta/v1/helpers.go`` ``LabelSelectorAsSelector``: every requirement must hold, an
empty selector selects everything), and a plain map of labels (a ``nodeSelector``, a
ResourceFlavor's ``nodeLabels``, a pool's node selector: every pair must be present). What a
missing selector means differs per API (Kueue's ``namespaceSelector``: nothing; a flavor's
``nodeLabels``: every node), so callers decide that before asking. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")
"""The operators of a label selector's ``matchExpressions``."""


def labels_match(
    wanted: Mapping[str, str] | Iterable[tuple[str, str]], labels: Mapping[str, str]
) -> bool:
    """Whether *labels* carry every (key, value) of *wanted* (``{}``: always)."""
    pairs = wanted.items() if isinstance(wanted, Mapping) else wanted
    return all(labels.get(key) == value for key, value in pairs)


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` against *labels*; an unknown operator matches nothing."""
    if not labels_match(selector.get("matchLabels") or {}, labels):
        return False
    for expr in selector.get("matchExpressions") or ():
        key, op = expr.get("key"), expr.get("operator")
        values = expr.get("values") or ()
        present = key in labels
        if op == "In":
            ok = present and labels[key] in values
        elif op == "NotIn":
            ok = not (present and labels[key] in values)
        elif op == "Exists":
            ok = present
        elif op == "DoesNotExist":
            ok = not present
        else:
            ok = False
        if not ok:
            return False
    return True
