"""Label and field selectors, parsed with the grammar and semantics of kube-apiserver.

Label selectors: ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``,
``k>n``, ``k<n``, comma-joined (all must hold). ``!=`` and ``notin`` also match objects that
lack the key, as on a real cluster. Field selectors support ``=``, ``==`` and ``!=`` on
``metadata.name``, ``metadata.namespace`` and the few extra fields the real server indexes for
some kinds; any other field is a 400, as there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpustack_sim.apiserver.errors import bad_request
from gpustack_sim.apiserver.names import _LABEL_VALUE, qualified_name_errors

Matcher = Callable[[Mapping[str, Any]], bool]

_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|>|<|[^\s!=(),<>]+)")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # exists, !exists, =, !=, in, notin, gt, lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        try:
            have, want = int(labels[self.key]), int(self.values[0])
        except ValueError:
            return False
        return have > want if self.op == "gt" else have < want


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise bad_request(f"unable to parse requirement: unexpected input at {text[pos:]!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _check_key(key: str) -> None:
    errs = qualified_name_errors(key)
    if errs:
        raise bad_request(f'unable to parse requirement: key "{key}": {"; ".join(errs)}')


def _check_value(value: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise bad_request(
            f'unable to parse requirement: values[0][{value}]: Invalid value: "{value}": '
            "a valid label must be an empty string or consist of alphanumeric characters, '-', "
            "'_' or '.', and must start and end with an alphanumeric character"
        )


def parse_label_selector(text: str | None) -> list[Requirement]:
    """Parse a label selector; raises a 400 ``ApiError`` on bad syntax."""
    if not text or not text.strip():
        return []
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def take() -> str:
        nonlocal i
        if i >= len(toks):
            raise bad_request(f"unable to parse requirement: unexpected end of selector {text!r}")
        i += 1
        return toks[i - 1]

    while i < len(toks):
        tok = take()
        if tok == "!":
            key = take()
            _check_key(key)
            reqs.append(Requirement(key, "!exists"))
        else:
            key = tok
            _check_key(key)
            nxt = toks[i] if i < len(toks) else ","
            if nxt == ",":
                reqs.append(Requirement(key, "exists"))
            elif nxt in ("=", "==", "!="):
                take()
                value = toks[i] if i < len(toks) and toks[i] != "," else ""
                if value:
                    take()
                _check_value(value)
                reqs.append(Requirement(key, "!=" if nxt == "!=" else "=", (value,)))
            elif nxt in (">", "<"):
                take()
                value = take()
                try:
                    int(value)
                except ValueError:
                    raise bad_request(
                        f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must "
                        f"be an integer: {value!r}"
                    ) from None
                reqs.append(Requirement(key, "gt" if nxt == ">" else "lt", (value,)))
            elif nxt in ("in", "notin"):
                take()
                if take() != "(":
                    raise bad_request(f"unable to parse requirement: expected '(' after {nxt}")
                values: list[str] = []
                while True:
                    tok = take()
                    if tok == ")":
                        break
                    if tok == ",":
                        continue
                    _check_value(tok)
                    values.append(tok)
                if not values and nxt == "in":
                    raise bad_request(
                        "unable to parse requirement: for 'in' operator, values set can't be empty"
                    )
                reqs.append(Requirement(key, nxt, tuple(values)))
            else:
                raise bad_request(
                    f"unable to parse requirement: found '{nxt}', expected: "
                    "'=', '!=', '==', 'in', notin'"
                )
        if i < len(toks):
            if toks[i] != ",":
                raise bad_request(f"unable to parse requirement: found '{toks[i]}', expected: ','")
            i += 1
            if i >= len(toks):
                raise bad_request("unable to parse requirement: found '', expected: identifier")
    return reqs


# Fields the real server indexes beyond metadata.name/namespace, by kind.
_EXTRA_FIELDS: dict[str, frozenset[str]] = {
    "Pod": frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    "Node": frozenset({"spec.unschedulable"}),
    "Namespace": frozenset({"status.phase"}),
    "Secret": frozenset({"type"}),
    "Event": frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
}


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    value: str
    negate: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        cur: Any = obj
        for part in self.field.split("."):
            cur = cur.get(part) if isinstance(cur, Mapping) else None
        if isinstance(cur, bool):
            have = "true" if cur else "false"
        elif cur is None:
            have = ""
        else:
            have = str(cur)
        return (have == self.value) != self.negate


def parse_field_selector(text: str | None, kind: str) -> list[FieldRequirement]:
    """Parse a field selector for ``kind``; raises a 400 ``ApiError`` for unknown fields."""
    if not text or not text.strip():
        return []
    allowed = {"metadata.name", "metadata.namespace"} | _EXTRA_FIELDS.get(kind, frozenset())
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.match(r"^([^=!]+?)\s*(!=|==|=)\s*(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        field, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if field not in allowed:
            raise bad_request(
                f"field label not supported: {field} (this server supports "
                f"{', '.join(sorted(allowed))} for {kind})"
            )
        out.append(FieldRequirement(field, value, op == "!="))
    return out


def make_matcher(labels: list[Requirement], fields: list[FieldRequirement]) -> Matcher | None:
    """One predicate over whole objects, or None when nothing is selected on."""
    if not labels and not fields:
        return None

    def match(obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        lab = meta.get("labels") or {}
        return all(r.matches(lab) for r in labels) and all(f.matches(obj) for f in fields)

    return match
