"""Teams: each team's share of every pool, kept in step with the hardware (docs/teams.md).

A platform team declares its teams once (namespaces, a share of each pool or of the pools of
a model or manufacturer, whether the team lends and borrows). :func:`parse_teams` turns the
declaration into a :class:`Teams` value or refuses it with a message naming the fix. For a
pool (one ClusterQueue of the chain, rendered as today) :func:`split_pool` gives one
ClusterQueue per team in the pool's Cohort, each with its share of the pool's live quota in
whole devices, and what rounding leaves over as quota of the Cohort itself;
:func:`desired_local_queues_with_teams` points a team namespace's usual LocalQueue name at
its team's queue. Pure functions: the worker, ``plan``, ``sim`` and ``queues`` call the same
ones, so they cannot disagree.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from gpustack_operator.domain.chain.kueue import KueueVersion, LocalQueue, Meta, OwnerReference
from gpustack_operator.domain.chain.poolinfo import local_queue_metadata
from gpustack_operator.domain.declarationtext import (
    DeclarationError,
    brief,
    load_declaration,
    shorten,
)
from gpustack_operator.domain.labels import (
    CLUSTER_QUEUE_ANNOTATION,
    DEVICE_MODEL_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANUFACTURER_LABEL,
    note,
)
from gpustack_operator.domain.nodeview import annotations_of, labels_of, name_of, uid_of
from gpustack_operator.domain.profiles import TAS_QUEUE_SUFFIX, derived_name, local_queue_name
from gpustack_operator.domain.quantities import (
    format_binary_quantity,
    format_decimal_quantity,
    parse_quantity,
)
from gpustack_operator.domain.selectors import OPERATORS, selector_matches
from gpustack_operator.domain.validation import (
    is_valid_dns_label,
    is_valid_dns_subdomain,
    is_valid_label_key,
    is_valid_label_value,
)

TEAM_LABEL: Final = "gpustack.ai/team"
"""On a team's ClusterQueue: the team's name."""
POOL_ANNOTATION: Final = "gpustack.ai/pool"
"""On a team's ClusterQueue: the pool (the ClusterQueue the chain has without teams)."""
SHARE_ANNOTATION: Final = "gpustack.ai/team-share"
"""On a team's ClusterQueue: the team's share of the pool, as a percentage."""
TEAMS_CONFIGMAP: Final = "gpustack-teams"
"""The ConfigMap (in the system namespace) the worker reads the declaration from."""
TEAMS_KEY: Final = "teams.yaml"
"""The key of that ConfigMap holding the declaration."""
SELECTOR_KEYS: Final = ("pool", "model", "manufacturer")
"""What a share may select pools by, most specific first."""
RECLAIM_WITHIN_COHORT: Final = "Any"
"""A team queue's ``preemption.reclaimWithinCohort``: an owner takes back what others borrow
(docs/teams.md, "Borrowing and reclaiming")."""
_NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
_BINARY: Final = frozenset({"memory", "ephemeral-storage"})
_MI: Final = 2**20
_MAX_NAME: Final = 253
MAX_TEAMS: Final = 500
"""The most teams one declaration may hold (docs/teams.md, "Limits of a declaration")."""


class TeamsError(DeclarationError):
    """A declaration refused; the message says what is wrong and how to fix it."""


# --- the declaration -------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolSelector:
    """Which pools a share covers: one pool by name, a device model or a manufacturer."""

    key: str
    value: str

    @property
    def specificity(self) -> int:
        """A pool takes a team's share from its most specific matching entry."""
        return len(SELECTOR_KEYS) - SELECTOR_KEYS.index(self.key)

    def matches(self, pool: PoolFacts) -> bool:
        if self.key == "pool":
            return pool.name == self.value
        if self.key == "model":
            return pool.accelerated and pool.model == self.value
        return pool.accelerated and pool.manufacturer == self.value

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


@dataclass(frozen=True)
class Share:
    """A team's part of the pools *selector* picks: a fraction, or a weight among the teams
    that give weights there."""

    selector: PoolSelector
    fraction: Fraction | None = None
    weight: Fraction | None = None


@dataclass(frozen=True)
class Team:
    name: str
    namespaces: tuple[str, ...] = ()
    namespace_selector: Mapping[str, Any] | None = None
    shares: tuple[Share, ...] = ()
    lend: bool = True
    borrow: bool = True

    def share_for(self, pool: PoolFacts) -> Share | None:
        """The team's most specific share entry matching *pool*, if any."""
        matching = [s for s in self.shares if s.selector.matches(pool)]
        return max(matching, key=lambda s: s.selector.specificity) if matching else None

    def has_namespace(self, name: str, labels: Mapping[str, str]) -> bool:
        if name in self.namespaces:
            return True
        return self.namespace_selector is not None and selector_matches(
            self.namespace_selector, labels
        )


@dataclass(frozen=True)
class Teams:
    """A declaration accepted by :func:`parse_teams`, teams in declaration order."""

    teams: tuple[Team, ...] = ()

    def team_of(self, namespace: str, labels: Mapping[str, str] | None = None) -> Team | None:
        """The team a namespace belongs to: one naming it, else the first whose selector
        matches it (docs/teams.md, "Declaring teams")."""
        for team in self.teams:
            if namespace in team.namespaces:
                return team
        labels = {_NAMESPACE_NAME_LABEL: namespace, **(labels or {})}
        for team in self.teams:
            if team.namespace_selector is not None and selector_matches(
                team.namespace_selector, labels
            ):
                return team
        return None

    def shares_of(self, pool: PoolFacts) -> list[tuple[Team, Fraction]]:
        """Each team's fraction of *pool* (docs/teams.md, "Shares"): fractions as declared,
        weights splitting what the fractions leave; scaled down to 100% in all when a pool
        that appeared after the declaration was checked would be oversubscribed."""
        entries = [(t, s) for t in self.teams if (s := t.share_for(pool)) is not None]
        fixed = {t.name: s.fraction for t, s in entries if s.fraction is not None}
        weights = {t.name: s.weight for t, s in entries if s.weight is not None}
        taken = sum(fixed.values(), Fraction(0))
        if taken > 1:
            fixed = {n: f / taken for n, f in fixed.items()}
            taken = Fraction(1)
        total_weight = sum(weights.values(), Fraction(0))
        out: list[tuple[Team, Fraction]] = []
        for team, _ in entries:
            if team.name in fixed:
                out.append((team, fixed[team.name]))
            elif total_weight:
                out.append((team, (1 - taken) * weights[team.name] / total_weight))
        return out

    def oversubscribed(self, pools: Iterable[PoolFacts]) -> list[str]:
        """Pools whose declared fractions add up to more than 100%, as messages."""
        problems = []
        for pool in pools:
            entries = [(t, s) for t in self.teams if (s := t.share_for(pool)) is not None]
            fractions = [(t.name, s.fraction) for t, s in entries if s.fraction is not None]
            total = sum((f for _, f in fractions), Fraction(0))
            if total > 1:
                parts = ", ".join(f"{n} {_percent(f)}" for n, f in fractions)
                problems.append(
                    f"pool {pool.name} is shared out {_percent(total)} ({parts}): lower the "
                    "shares to 100% in all, or give weights instead"
                )
        return problems


_TEAM_FIELDS: Final = ("name", "namespaces", "namespaceSelector", "shares", "lend", "borrow")
_SELECTOR_FIELDS: Final = ("matchLabels", "matchExpressions")
_EXPRESSION_FIELDS: Final = ("key", "operator", "values")


def label_selector(raw: object, where: str) -> dict[str, Any]:
    """*raw* checked as a Kubernetes ``LabelSelector`` (apimachinery's validation:
    ``matchLabels`` of label keys to label values, ``matchExpressions`` of a key, one of
    :data:`OPERATORS`, and values for ``In``/``NotIn`` only); :class:`TeamsError`
    naming the fix. An empty selector, which would select every namespace, is refused."""
    if not isinstance(raw, Mapping):
        raise TeamsError(
            f"{where} is {brief(raw)}, not a label selector: write a map with matchLabels "
            "and/or matchExpressions"
        )
    unknown = sorted(str(k) for k in raw if k not in _SELECTOR_FIELDS)
    if unknown:
        raise TeamsError(
            f"{where}: unknown field {shorten(', '.join(unknown), 80)}: a label selector has "
            "matchLabels and matchExpressions"
        )
    labels = raw.get("matchLabels")
    expressions = raw.get("matchExpressions")
    out: dict[str, Any] = {}
    if labels is not None:
        if not isinstance(labels, Mapping):
            raise TeamsError(f"{where}: matchLabels is {brief(labels)}: write a map key: value")
        for key, value in labels.items():
            if not isinstance(key, str) or not is_valid_label_key(key):
                raise TeamsError(f"{where}: matchLabels key {brief(key)} is not a label key")
            if not isinstance(value, str) or not is_valid_label_value(value):
                raise TeamsError(
                    f"{where}: matchLabels {key}: {brief(value)} is not a label value (quote "
                    "numbers and booleans)"
                )
        if labels:
            out["matchLabels"] = dict(labels)
    if expressions is not None:
        if not isinstance(expressions, list):
            raise TeamsError(
                f"{where}: matchExpressions is {brief(expressions)}: write a list of "
                "{key, operator, values}"
            )
        checked = [
            _expression(e, f"{where}.matchExpressions[{i}]") for i, e in enumerate(expressions)
        ]
        if checked:
            out["matchExpressions"] = checked
    if not out:
        raise TeamsError(
            f"{where} is empty, which selects every namespace: give matchLabels or matchExpressions"
        )
    return out


def _expression(raw: object, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise TeamsError(f"{where} is {brief(raw)}: write a map with key, operator, values")
    unknown = sorted(str(k) for k in raw if k not in _EXPRESSION_FIELDS)
    if unknown:
        raise TeamsError(
            f"{where}: unknown field {shorten(', '.join(unknown), 80)}: use key, operator, values"
        )
    key, operator, values = raw.get("key"), raw.get("operator"), raw.get("values")
    if not isinstance(key, str) or not is_valid_label_key(key):
        raise TeamsError(f"{where}: key {brief(key)} is not a label key")
    if operator not in OPERATORS:
        raise TeamsError(
            f"{where}: operator {brief(operator)} is not one of {', '.join(OPERATORS)}"
        )
    if operator in ("In", "NotIn"):
        if not isinstance(values, list) or not values:
            raise TeamsError(f"{where}: operator {operator} needs a non-empty list of values")
        for value in values:
            if not isinstance(value, str) or not is_valid_label_value(value):
                raise TeamsError(
                    f"{where}: value {brief(value)} is not a label value (quote numbers and "
                    "booleans)"
                )
        return {"key": key, "operator": operator, "values": list(values)}
    if values:
        raise TeamsError(f"{where}: operator {operator} takes no values: remove them")
    return {"key": key, "operator": operator}


def _percent(value: Fraction) -> str:
    text = f"{float(value * 100):.2f}".rstrip("0").rstrip(".")
    return f"{text}%"


def _fraction(raw: object, where: str) -> Fraction:
    """``50%``, ``0.5`` or ``1/2`` -> 1/2; refused unless above 0 and at most 100%."""
    if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
        raise TeamsError(
            f"{where}: share {brief(raw)} is not a number: write a percentage (50%) or a "
            "fraction (0.5)"
        )
    text = str(raw).strip()
    try:
        value = Fraction(text[:-1]) / 100 if text.endswith("%") else Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise TeamsError(
            f"{where}: share {brief(raw)} is not a number: write a percentage (50%) or a "
            "fraction (0.5)"
        ) from None
    if not 0 < value <= 1:
        raise TeamsError(
            f"{where}: share {brief(raw)} is outside (0%, 100%]: give each team at most the "
            "whole pool"
        )
    return value


def _weight(raw: object, where: str) -> Fraction:
    value = Fraction(0)
    if isinstance(raw, (str, int, float)) and not isinstance(raw, bool):
        try:
            value = Fraction(str(raw).strip())
        except (ValueError, ZeroDivisionError):
            value = Fraction(0)
    if value <= 0 or value > 10**6:
        raise TeamsError(
            f"{where}: weight {brief(raw)} must be a number above 0 (at most 1000000), "
            "e.g. weight: 2"
        )
    return value


def _selector(raw: object, where: str, manufacturers: Iterable[str]) -> PoolSelector:
    if not isinstance(raw, Mapping):
        raise TeamsError(
            f"{where}: pools must be a map with one of {', '.join(SELECTOR_KEYS)}, "
            "e.g. pools: {model: tesla-t4}"
        )
    unknown = sorted(str(k) for k in raw if k not in SELECTOR_KEYS)
    if unknown:
        raise TeamsError(
            f"{where}: unknown pool selector {', '.join(unknown)}: select pools by "
            f"{', '.join(SELECTOR_KEYS)}"
        )
    if len(raw) != 1:
        raise TeamsError(
            f"{where}: select pools by exactly one of {', '.join(SELECTOR_KEYS)}; "
            "write one share entry per selector"
        )
    key, value = next(iter(raw.items()))
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise TeamsError(f"{where}: pools.{key} is {brief(value)}: name one {key}")
    text = str(value).strip().lower() if key != "pool" else str(value).strip()
    if not text:
        raise TeamsError(f"{where}: pools.{key} is empty: name a {key}")
    known = sorted(manufacturers)
    if key == "manufacturer" and text not in known:
        raise TeamsError(
            f"{where}: unknown manufacturer {brief(text)} in pools.manufacturer: use one of "
            f"{', '.join(known)}"
        )
    if key == "pool" and not is_valid_dns_subdomain(text):
        raise TeamsError(f"{where}: pools.pool {brief(text)} is not a ClusterQueue name")
    return PoolSelector(str(key), text)


def _bool(raw: object, where: str, name: str) -> bool:
    if raw is None:
        return True
    if not isinstance(raw, bool):
        raise TeamsError(f"{where}: {name} must be true or false, not {brief(raw)}")
    return raw


def _team(raw: object, index: int, manufacturers: Iterable[str]) -> Team:
    where = f"teams[{index}]"
    if not isinstance(raw, Mapping):
        raise TeamsError(f"{where}: a team is a map with name, namespaces and shares")
    unknown = sorted(str(k) for k in raw if k not in _TEAM_FIELDS)
    if unknown:
        raise TeamsError(
            f"{where}: unknown field {shorten(', '.join(unknown), 80)}: a team has "
            f"{', '.join(_TEAM_FIELDS)}"
        )
    raw_name = raw.get("name")
    name = raw_name if isinstance(raw_name, str) else ""
    where = f"team {name}" if is_valid_dns_label(name) else where
    if name == TAS_QUEUE_SUFFIX:
        raise TeamsError(
            f"{where}: the name {TAS_QUEUE_SUFFIX!r} is taken by the queues of topology-aware "
            "pools (<pool>-tas, docs/topology.md): choose another"
        )
    if not is_valid_dns_label(name):
        raise TeamsError(
            f"{where}: name {brief(raw_name)} must be a DNS label (lower case, digits, '-'), "
            "e.g. team-a"
        )
    namespaces = raw.get("namespaces") or []
    selector = raw.get("namespaceSelector")
    if not isinstance(namespaces, list) or not all(
        isinstance(n, str) and is_valid_dns_label(n) for n in namespaces
    ):
        raise TeamsError(f"{where}: namespaces must be a list of namespace names")
    if selector is not None:
        selector = label_selector(selector, f"{where}: namespaceSelector")
    if not namespaces and selector is None:
        raise TeamsError(f"{where}: give namespaces (names) or a namespaceSelector")
    entries = raw.get("shares") or []
    if not isinstance(entries, list):
        raise TeamsError(f"{where}: shares must be a list of entries with pools and share")
    shares: list[Share] = []
    for j, entry in enumerate(entries):
        here = f"{where}, shares[{j}]"
        if not isinstance(entry, Mapping):
            raise TeamsError(f"{here}: a share is a map with pools and share (or weight)")
        unknown = sorted(str(k) for k in entry if k not in ("pools", "share", "weight"))
        if unknown:
            raise TeamsError(
                f"{here}: unknown field {shorten(', '.join(unknown), 80)}: a share has pools and "
                "share (or weight)"
            )
        pools = _selector(entry.get("pools"), here, manufacturers)
        if ("share" in entry) == ("weight" in entry):
            raise TeamsError(f"{here}: give either share (50%) or weight (2), not both or none")
        if any(s.selector == pools for s in shares):
            raise TeamsError(f"{here}: {pools} is listed twice: keep one entry")
        if "share" in entry:
            shares.append(Share(pools, fraction=_fraction(entry["share"], here)))
        else:
            shares.append(Share(pools, weight=_weight(entry["weight"], here)))
    if not shares:
        raise TeamsError(f"{where}: no shares: give the team a share of some pools")
    return Team(
        name=name,
        namespaces=tuple(namespaces),
        namespace_selector=dict(selector) if selector is not None else None,
        shares=tuple(shares),
        lend=_bool(raw.get("lend"), where, "lend"),
        borrow=_bool(raw.get("borrow"), where, "borrow"),
    )


def parse_teams(text: str, manufacturers: Iterable[str], pools: Iterable[PoolFacts] = ()) -> Teams:
    """The declaration in *text* (YAML, docs/teams.md), checked against the manufacturers
    profiled and the *pools* known now; :class:`TeamsError` naming the fix otherwise."""
    try:
        raw = load_declaration(text, "teams declaration")
    except TeamsError:
        raise
    except DeclarationError as exc:
        raise TeamsError(str(exc)) from None
    if raw is None:
        return Teams()
    if not isinstance(raw, Mapping) or not isinstance(raw.get("teams", []), list):
        raise TeamsError("the teams declaration is a map with a list 'teams:' (docs/teams.md)")
    extra = sorted(str(k) for k in raw if k != "teams")
    if extra:
        raise TeamsError(
            f"the teams declaration has unknown fields {shorten(', '.join(extra), 80)}: keep only "
            "'teams:'"
        )
    listed = raw.get("teams") or []
    if len(listed) > MAX_TEAMS:
        raise TeamsError(
            f"the teams declaration lists {len(listed)} teams, more than {MAX_TEAMS}: merge teams"
        )
    known = list(manufacturers)
    teams = tuple(_team(t, i, known) for i, t in enumerate(listed))
    seen: dict[str, str] = {}
    for team in teams:
        if team.name in seen:
            raise TeamsError(f"team {team.name} is declared twice: merge the two entries")
        seen[team.name] = team.name
    owner: dict[str, str] = {}
    for team in teams:
        for ns in team.namespaces:
            if ns in owner:
                raise TeamsError(
                    f"namespace {ns} is in two teams ({owner[ns]} and {team.name}): keep it in one"
                )
            owner[ns] = team.name
    declared = Teams(teams)
    for selector_level in SELECTOR_KEYS:
        by_value: dict[str, Fraction] = {}
        for team in teams:
            for share in team.shares:
                if share.selector.key == selector_level and share.fraction is not None:
                    key = share.selector.value
                    by_value[key] = by_value.get(key, Fraction(0)) + share.fraction
        for value, total in sorted(by_value.items()):
            if total > 1:
                raise TeamsError(
                    f"the shares of {selector_level}={value} add up to {_percent(total)}: "
                    "lower them to 100% in all, or give weights instead"
                )
    problems = declared.oversubscribed(pools)
    if problems:
        raise TeamsError("; ".join(problems))
    return declared


def check_teams(teams: Teams, pools: Iterable[PoolFacts], namespaces: Iterable[object]) -> None:
    """Refuse (:class:`TeamsError`) *teams* when a pool of *pools* is shared out above 100%
    or a namespace of *namespaces* is in two teams: the checks against the cluster that the
    worker, ``plan`` and ``sim`` all make (docs/teams.md, "Refused declarations")."""
    problems = [*teams.oversubscribed(pools), *namespace_conflicts(teams, namespaces)]
    if problems:
        raise TeamsError("; ".join(problems))


def validate_teams(
    text: str | bytes,
    manufacturers: Iterable[str],
    pools: Iterable[PoolFacts] = (),
    namespaces: Iterable[object] = (),
) -> Teams:
    """The one validation of a teams declaration: :func:`parse_teams` then
    :func:`check_teams`; :class:`TeamsError` naming the fix, never another exception."""
    pools = list(pools)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise TeamsError("the teams declaration is not UTF-8 text: save it as UTF-8") from None
    teams = parse_teams(text, manufacturers, pools)
    check_teams(teams, pools, namespaces)
    return teams


def namespace_conflicts(teams: Teams, namespaces: Iterable[object]) -> list[str]:
    """Namespaces two teams claim (a name in one, a selector match in another, or two
    selectors), as messages."""
    problems = []
    for ns in namespaces:
        name = ns if isinstance(ns, str) else name_of(ns)
        labels = {} if isinstance(ns, str) else labels_of(ns)
        labels = {_NAMESPACE_NAME_LABEL: name, **labels}
        claim = [t.name for t in teams.teams if t.has_namespace(name, labels)]
        if len(claim) > 1:
            problems.append(
                f"namespace {name} is in two teams ({' and '.join(claim)}): keep it in one "
                "(name it in one team, or narrow a namespaceSelector)"
            )
    return problems


@dataclass
class TeamsState:
    """The declaration in force and why the latest one was refused (the worker keeps the
    last good declaration when a new one is bad; docs/teams.md, "Refused declarations")."""

    teams: Teams | None = None
    error: str = ""
    revision: str = ""

    def offer(
        self,
        text: str | None,
        manufacturers: Iterable[str],
        pools: Iterable[PoolFacts] = (),
        namespaces: Iterable[object] = (),
        revision: str = "",
    ) -> bool:
        """Take *text* if it is good (``None``: no declaration, teams off) and say whether
        what is in force changed; a bad one leaves it as it was and sets :attr:`error`."""
        if text is None:
            changed = self.teams is not None
            self.teams, self.error, self.revision = None, "", revision
            return changed
        try:
            teams = validate_teams(text, manufacturers, pools, namespaces)
        except TeamsError as exc:
            self.error = str(exc)
            return False
        changed = teams != self.teams
        self.teams, self.error, self.revision = teams, "", revision
        return changed


# --- pools -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolFacts:
    """What a share selects a pool by: its ClusterQueue name and readable labels."""

    name: str
    accelerated: bool
    model: str = ""
    manufacturer: str = ""

    @classmethod
    def of(cls, cluster_queue: Mapping[str, Any]) -> PoolFacts:
        labels, _ = local_queue_metadata(cluster_queue)
        notes = annotations_of(cluster_queue)
        return cls(
            name=name_of(cluster_queue),
            accelerated=notes.get(note("acceleratable")) == "true",
            model=labels.get(DEVICE_MODEL_LABEL, ""),
            manufacturer=labels.get(MANUFACTURER_LABEL, ""),
        )


def divides(teams: Teams | None) -> Callable[[Mapping[str, Any]], bool] | None:
    """Whether *teams* divide a pool's ClusterQueue (``None`` without teams): such a pool
    counts nodes away for maintenance (docs/node-lifecycle.md, "Team quotas through
    maintenance")."""
    if teams is None or not teams.teams:
        return None
    declared = teams

    def divided(pool_queue: Mapping[str, Any]) -> bool:
        return any(f > 0 for _, f in declared.shares_of(PoolFacts.of(pool_queue)))

    return divided


def team_queue_name(pool: str, team: str) -> str:
    """``<pool>-<team>``, shortened with a hash past 63 characters where the pool's name is
    a DNS label (past 253 otherwise): docs/naming.md, "Derived names"."""
    return derived_name(pool, team)


def is_team_queue(cluster_queue: object) -> bool:
    return bool(annotations_of(cluster_queue).get(POOL_ANNOTATION))


def pool_of(cluster_queue: object) -> str:
    """The pool a team queue belongs to (``""`` for any other queue)."""
    return annotations_of(cluster_queue).get(POOL_ANNOTATION, "")


@dataclass
class PoolSplit:
    """A pool divided among teams: their queues and the Cohort's own quota."""

    pool: str
    cohort: str
    team_queues: list[dict[str, Any]] = field(default_factory=list)
    shares: dict[str, Fraction] = field(default_factory=dict)
    remainder: list[dict[str, Any]] = field(default_factory=list)
    """Resource groups (manifest shape) of what the teams' whole devices leave over."""


def _measure(covered: Sequence[str], accelerated: bool) -> str:
    """The resource shares are counted in: the device resource (last covered), else cpu."""
    return covered[-1] if accelerated and covered else "cpu"


def _part(resource: str, total: Fraction, units: int, of: int) -> Fraction:
    """*total* scaled by units/of, rounded down to whole cores, whole Mi or whole units."""
    if of == 0:
        return Fraction(0)
    exact = total * units / of
    if resource in _BINARY:
        return Fraction(int(exact // _MI) * _MI)
    return Fraction(int(exact))


def _render(resource: str, amount: Fraction) -> str:
    value = int(amount)
    if resource in _BINARY or resource.startswith("hugepages-"):
        return format_binary_quantity(value)
    return format_decimal_quantity(value)


def split_pool(
    pool_queue: Mapping[str, Any],
    teams: Teams,
    *,
    namespaces_of: Mapping[str, Mapping[str, Any]] | None = None,
) -> PoolSplit | None:
    """The pool's ClusterQueue divided among the teams with a share of it (docs/teams.md,
    "What the operator builds"); ``None`` when no team has one (the pool stays as it is).

    Per flavor, a team gets ``floor(share x devices)`` whole devices (CPU pools: cores) and
    the same fraction of the flavor's cpu, memory and storage, rounded down; the Cohort
    holds the rest. *namespaces_of* (team -> namespaceSelector) overrides the selector a
    team queue admits from (default: from the declaration).
    """
    facts = PoolFacts.of(pool_queue)
    shares = [(t, f) for t, f in teams.shares_of(facts) if f > 0]
    if not shares:
        return None
    spec = pool_queue.get("spec") or {}
    cohort = str(spec.get("cohortName") or spec.get("cohort") or "")
    split = PoolSplit(pool=facts.name, cohort=cohort)
    team_groups: dict[str, list[dict[str, Any]]] = {t.name: [] for t, _ in shares}
    for group in spec.get("resourceGroups") or []:
        covered = list(group.get("coveredResources") or [])
        measure = _measure(covered, facts.accelerated)
        per_team: dict[str, list[dict[str, Any]]] = {t.name: [] for t, _ in shares}
        rest: list[dict[str, Any]] = []
        for flavor in group.get("flavors") or []:
            quotas = {
                str(r["name"]): parse_quantity(r.get("nominalQuota")) or Fraction(0)
                for r in flavor.get("resources") or []
            }
            units = int(quotas.get(measure, Fraction(0)))
            given = dict.fromkeys(quotas, Fraction(0))
            for team, fraction in shares:
                mine = int(fraction * units)
                resources = []
                for resource, total in quotas.items():
                    amount = _part(resource, total, mine, units)
                    given[resource] += amount
                    entry: dict[str, Any] = {
                        "name": resource,
                        "nominalQuota": _render(resource, amount),
                    }
                    # Only the team's own ``borrow`` limits borrowing: the pool's
                    # ``borrowingLimit: 0`` (sliced pools) would leave the Cohort's remainder
                    # of the pool to no one (docs/teams.md, "What the operator builds").
                    if not team.borrow:
                        entry["borrowingLimit"] = "0"
                    if not team.lend:
                        entry["lendingLimit"] = "0"
                    resources.append(entry)
                per_team[team.name].append({"name": flavor["name"], "resources": resources})
            leftover = [
                {"name": r, "nominalQuota": _render(r, quotas[r] - given[r])} for r in quotas
            ]
            rest.append({"name": flavor["name"], "resources": leftover})
        for team_name, flavors in per_team.items():
            team_groups[team_name].append({"coveredResources": covered, "flavors": flavors})
        split.remainder.append({"coveredResources": covered, "flavors": rest})
    for team, fraction in shares:
        split.shares[team.name] = fraction
        split.team_queues.append(
            _team_queue(pool_queue, team, fraction, team_groups[team.name], namespaces_of)
        )
    return split


def _team_queue(
    pool_queue: Mapping[str, Any],
    team: Team,
    fraction: Fraction,
    groups: list[dict[str, Any]],
    namespaces_of: Mapping[str, Mapping[str, Any]] | None,
) -> dict[str, Any]:
    queue = copy.deepcopy(dict(pool_queue))
    pool = name_of(pool_queue)
    meta = queue["metadata"]
    meta["name"] = team_queue_name(pool, team.name)
    meta["labels"] = {**(meta.get("labels") or {}), TEAM_LABEL: team.name}
    meta["annotations"] = dict(
        sorted(
            {
                **(meta.get("annotations") or {}),
                POOL_ANNOTATION: pool,
                SHARE_ANNOTATION: _percent(fraction),
            }.items()
        )
    )
    spec = queue["spec"]
    spec["resourceGroups"] = groups
    spec["preemption"] = {**(spec.get("preemption") or {}), "reclaimWithinCohort": "Any"}
    spec["fairSharing"] = {"weight": fair_sharing_weight(fraction)}
    selector = (namespaces_of or {}).get(team.name) or team_namespace_selector(team)
    spec["namespaceSelector"] = dict(selector)
    return queue


def fair_sharing_weight(fraction: Fraction) -> str:
    """A team queue's ``fairSharing.weight``: its share of the pool as a quantity in
    thousandths (``500m`` for 50%, ``1`` for 100%; at least ``1m``), so that where Kueue's
    fair sharing is on, what a team borrows counts against it in proportion to its share
    (docs/teams.md, "Fair sharing"). Kueue reads it only when fair sharing is on."""
    milli = max(1, int(fraction * 1000))
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def team_namespace_selector(team: Team) -> dict[str, Any]:
    """The ``namespaceSelector`` of a team's queues: its named namespaces, or its selector
    (both: the selector, the names being in the LocalQueues anyway)."""
    if team.namespace_selector is not None:
        return dict(team.namespace_selector)
    return {
        "matchExpressions": [
            {"key": _NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(team.namespaces)}
        ]
    }


def cohort_resource_groups(splits: Iterable[PoolSplit]) -> list[dict[str, Any]]:
    """A Cohort's own quota: the remainders of its split pools, one group per set of covered
    resources, flavors in name order (a flavor belongs to one pool, so never twice)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for split in splits:
        for group in split.remainder:
            groups.setdefault(tuple(group["coveredResources"]), []).extend(group["flavors"])
    return [
        {"coveredResources": list(c), "flavors": sorted(f, key=lambda x: x["name"])}
        for c, f in sorted(groups.items())
    ]


def with_cohort_quota(cohort: Mapping[str, Any], groups: list[dict[str, Any]]) -> dict[str, Any]:
    """*cohort* holding *groups* as its own quota (none: no ``resourceGroups``)."""
    out = copy.deepcopy(dict(cohort))
    spec = dict(out.get("spec") or {})
    if groups:
        spec["resourceGroups"] = groups
    else:
        spec.pop("resourceGroups", None)
    out["spec"] = spec
    return out


# --- the whole chain -------------------------------------------------------------------------


def desired_local_queues_with_teams(
    cluster_queues: Iterable[Mapping[str, Any]],
    namespaces: Iterable[str | Mapping[str, Any]],
    teams: Teams | None,
    *,
    plain: Mapping[tuple[str, str], dict[str, Any]],
    version: KueueVersion = KueueVersion.V1BETA2,
    active: Iterable[str] = (),
) -> dict[tuple[str, str], dict[str, Any]]:
    """*plain* (the LocalQueues of queues without teams, as ``desired_local_queues`` built
    them) plus, in each team's *active* namespaces, one LocalQueue per team queue of that
    team, under the pool's usual LocalQueue name (docs/workloads.md, "Teams: what a team
    sees")."""
    result = dict(plain)
    if teams is None:
        return result
    labels_by_name = {
        (ns if isinstance(ns, str) else name_of(ns)): ({} if isinstance(ns, str) else labels_of(ns))
        for ns in namespaces
    }
    team_queues: dict[str, list[Mapping[str, Any]]] = {}
    for cq in cluster_queues:
        owner = labels_of(cq).get(TEAM_LABEL, "")
        if owner and is_team_queue(cq):
            team_queues.setdefault(owner, []).append(cq)
    for namespace in sorted(set(active)):
        team = teams.team_of(namespace, labels_by_name.get(namespace, {}))
        if team is None:
            continue
        for cq in sorted(team_queues.get(team.name, []), key=name_of):
            pool = pool_of(cq)
            lq_name = local_queue_name(pool)
            labels, annotations = local_queue_metadata(cq)
            uid = uid_of(cq)
            owners = (
                (
                    OwnerReference(
                        api_version=version.api_version,
                        kind="ClusterQueue",
                        name=name_of(cq),
                        uid=uid,
                    ),
                )
                if uid
                else ()
            )
            local = LocalQueue(
                metadata=Meta(
                    name=lq_name,
                    namespace=namespace,
                    labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE, **labels, TEAM_LABEL: team.name},
                    annotations={CLUSTER_QUEUE_ANNOTATION: name_of(cq), **annotations},
                    owner_references=owners,
                ),
                cluster_queue=name_of(cq),
            )
            result[(namespace, lq_name)] = local.manifest(version)
    return dict(sorted(result.items()))
