"""Kueue's admission rules as the simulator's Kueue stand-in applies them (a test double).

Pure functions of plain objects (ClusterQueues, ResourceFlavors, Workloads, a Kueue
Configuration): what a pod set requests after Kueue's resource transformations, and which
flavor of a ClusterQueue it is assigned, or why it cannot be. Only what the operator's chain
uses is modelled; each rule and its Kueue source is listed in docs/simulator.md, "Kueue
admission stand-in". Messages follow Kueue v0.19's wording so tests read what a real
cluster says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpustack_operator.domain.chain.kueueusage import STOPPED
from gpustack_operator.domain.quantities import (
    format_binary_quantity,
    parse_quantity,
)

__all__ = [
    "Assignment",
    "ClusterQueueView",
    "FlavorCheck",
    "PodSet",
    "Transformation",
    "assign",
    "format_amount",
    "pod_requests",
    "podset_requests",
    "transformations_from_config",
]

Usage = dict[tuple[str, str], Fraction]
"""(flavor, resource) -> amount reserved."""
FlavorCheck = Callable[[str, str, tuple[str, ...]], str | None]
"""(pod set, flavor, the resource group's covered resources) -> why the flavor cannot serve
the pod set before any quota is counted (Kueue's ``checkFlavorForPodSets``), or None."""

_BINARY_RESOURCES = frozenset({"memory", "ephemeral-storage"})


def format_amount(resource: str, amount: Fraction) -> str:
    """An amount as a Kubernetes quantity (``2``, ``500m``, ``16Gi``)."""
    if amount.denominator == 1:
        value = int(amount)
        if resource in _BINARY_RESOURCES or resource.startswith("hugepages-"):
            return format_binary_quantity(value)
        return str(value)
    return f"{int(amount * 1000)}m"


# --- requests -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Transformation:
    """One entry of a Kueue Configuration's ``resources.transformations``."""

    input: str
    outputs: Mapping[str, Fraction]
    replace: bool = False  # strategy Replace (default Retain)
    multiply_by: str | None = None


def transformations_from_config(config: Mapping[str, Any] | None) -> dict[str, Transformation]:
    """The transformations of a Kueue ``Configuration`` object, by input resource name."""
    out: dict[str, Transformation] = {}
    items = ((config or {}).get("resources") or {}).get("transformations") or []
    for item in items:
        outputs = {}
        for name, value in (item.get("outputs") or {}).items():
            amount = parse_quantity(value)
            if amount is None:
                raise ValueError(f"transformation of {item.get('input')}: bad quantity {value!r}")
            outputs[str(name)] = amount
        out[str(item["input"])] = Transformation(
            input=str(item["input"]),
            outputs=outputs,
            replace=item.get("strategy") == "Replace",
            multiply_by=item.get("multiplyBy") or None,
        )
    return out


def _container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    """A container's requests; limits stand in for missing requests, as Kubernetes defaults."""
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    out = {}
    for name, value in merged.items():
        amount = parse_quantity(value)
        if amount is not None:
            out[str(name)] = amount
    return out


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """One pod's requests: the containers' sum, raised to any larger init container's."""
    total: dict[str, Fraction] = {}
    for container in pod_spec.get("containers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = total.get(name, Fraction(0)) + amount
    for container in pod_spec.get("initContainers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = max(total.get(name, Fraction(0)), amount)
    for name, value in (pod_spec.get("overhead") or {}).items():
        extra = parse_quantity(value)
        if extra is not None:
            total[str(name)] = total.get(str(name), Fraction(0)) + extra
    return total


def apply_transformations(
    requests: Mapping[str, Fraction], transforms: Mapping[str, Transformation]
) -> dict[str, Fraction]:
    """*requests* after Kueue's resource transformations (outputs summed, Retain/Replace)."""
    kept: dict[str, Fraction] = {}
    made: dict[str, Fraction] = {}
    for name, amount in requests.items():
        rule = transforms.get(name)
        if rule is None:
            kept[name] = amount
            continue
        base = amount
        if rule.multiply_by and rule.multiply_by in requests:
            base = amount * requests[rule.multiply_by]
        for out_name, factor in rule.outputs.items():
            made[out_name] = made.get(out_name, Fraction(0)) + base * factor
        if not rule.replace:
            kept[name] = amount
    for name, amount in made.items():
        kept[name] = kept.get(name, Fraction(0)) + amount
    return {k: max(v, Fraction(0)) for k, v in kept.items()}


@dataclass(frozen=True)
class PodSet:
    """A Workload pod set: name, pod count, the pod spec."""

    name: str
    count: int
    spec: Mapping[str, Any]


def podset_requests(
    podset: PodSet, transforms: Mapping[str, Transformation], count_pods: bool
) -> dict[str, Fraction]:
    """What a pod set charges against quota: transformed per-pod requests times the count,
    plus ``pods`` when the ClusterQueue covers that resource."""
    per_pod = apply_transformations(pod_requests(podset.spec), transforms)
    total = {name: amount * podset.count for name, amount in per_pod.items() if amount}
    if count_pods:
        total["pods"] = Fraction(podset.count)
    return total


# --- ClusterQueues --------------------------------------------------------------------------


@dataclass(frozen=True)
class Quota:
    nominal: Fraction
    borrowing_limit: Fraction | None = None
    lending_limit: Fraction | None = None

    @property
    def guaranteed(self) -> Fraction:
        """The part never lent to the cohort."""
        return self.nominal - self.lending_limit if self.lending_limit is not None else Fraction(0)

    @property
    def lendable(self) -> Fraction:
        return self.lending_limit if self.lending_limit is not None else self.nominal


@dataclass(frozen=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[tuple[str, Mapping[str, Quota]], ...]


@dataclass(frozen=True)
class ClusterQueueView:
    """What admission reads of one ClusterQueue."""

    name: str
    cohort: str | None
    groups: tuple[ResourceGroup, ...]
    try_next_when_borrowing: bool = False
    stopped: bool = False
    namespace_selector: Mapping[str, Any] | None = field(default_factory=dict)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ClusterQueueView:
        spec = obj.get("spec") or {}
        groups = []
        for group in spec.get("resourceGroups") or []:
            flavors = []
            for flavor in group.get("flavors") or []:
                quotas = {}
                for res in flavor.get("resources") or []:
                    quotas[str(res["name"])] = Quota(
                        parse_quantity(res.get("nominalQuota", 0)) or Fraction(0),
                        _optional(res.get("borrowingLimit")),
                        _optional(res.get("lendingLimit")),
                    )
                flavors.append((str(flavor["name"]), quotas))
            groups.append(ResourceGroup(tuple(group.get("coveredResources") or ()), tuple(flavors)))
        fungibility = spec.get("flavorFungibility") or {}
        return cls(
            name=str(obj["metadata"]["name"]),
            cohort=spec.get("cohortName") or spec.get("cohort") or None,
            groups=tuple(groups),
            try_next_when_borrowing=fungibility.get("whenCanBorrow") == "TryNextFlavor",
            stopped=spec.get("stopPolicy") in STOPPED,
            namespace_selector=spec.get("namespaceSelector"),
        )

    def covers(self, resource: str) -> bool:
        return any(resource in g.covered for g in self.groups)

    def quota(self, flavor: str, resource: str) -> Quota | None:
        for group in self.groups:
            for name, quotas in group.flavors:
                if name == flavor and resource in quotas:
                    return quotas[resource]
        return None


def _optional(value: Any) -> Fraction | None:
    return None if value is None else parse_quantity(value)


# --- flavor assignment ----------------------------------------------------------------------


@dataclass
class Assignment:
    """The outcome for one Workload: flavors per pod set, or why it does not fit."""

    flavors: dict[str, dict[str, str]] = field(default_factory=dict)  # podset -> res -> flavor
    usage: dict[str, dict[str, Fraction]] = field(default_factory=dict)  # podset -> res -> amount
    message: str = ""  # empty when every pod set fits

    @property
    def fits(self) -> bool:
        return not self.message


def _capacity(
    cq: ClusterQueueView,
    members: Iterable[ClusterQueueView],
    usage: Mapping[str, Usage],
    flavor: str,
    resource: str,
    cohort_quota: Usage | None = None,
) -> tuple[Fraction, Fraction]:
    """(available now, maximum ever) of *resource* in *flavor* for *cq* (Kueue's
    ``Available`` / ``PotentialAvailable``): own nominal quota, plus what the cohort lends
    (its members' and *cohort_quota*, the Cohort's own; ``sim.kueuecohort``), within
    ``borrowingLimit``."""
    own = cq.quota(flavor, resource)
    assert own is not None
    used = usage.get(cq.name, {}).get((flavor, resource), Fraction(0))
    if cq.cohort is None:
        return own.nominal - used, own.nominal
    pool_total = (cohort_quota or {}).get((flavor, resource), Fraction(0))
    pool_used = Fraction(0)
    for member in members:
        quota = member.quota(flavor, resource)
        if quota is None:
            continue
        member_used = usage.get(member.name, {}).get((flavor, resource), Fraction(0))
        pool_total += quota.lendable
        pool_used += max(Fraction(0), member_used - quota.guaranteed)
    guaranteed_left = max(Fraction(0), own.guaranteed - used)
    available = guaranteed_left + max(Fraction(0), pool_total - pool_used)
    maximum = own.guaranteed + pool_total
    if own.borrowing_limit is not None:
        cap = own.nominal + own.borrowing_limit
        available = min(available, cap - used)
        maximum = min(maximum, cap)
    return available, maximum


def assign(
    cq: ClusterQueueView,
    members: Iterable[ClusterQueueView],
    usage: Mapping[str, Usage],
    podsets: Iterable[tuple[str, Mapping[str, Fraction]]],
    cohort_quota: Usage | None = None,
    check: FlavorCheck | None = None,
) -> Assignment:
    """Assign a flavor to every requested resource of every pod set, as Kueue's flavor
    assigner does without preemption: resources of one resource group share a flavor, tried
    in the ClusterQueue's order; a flavor that fits without borrowing wins at once; one that
    fits by borrowing wins unless ``whenCanBorrow: TryNextFlavor`` asks to look further (the
    first borrowing fit is taken when none fits without). *members* is every ClusterQueue of
    *cq*'s cohort, *cq* included; *cohort_quota* the Cohort's own quota. *check* judges
    each flavor for a pod set before its quota, as Kueue's flavor assigner does (a flavor it
    refuses is skipped with its reason; ``kueuetas.flavor_check`` is the TAS one).
    """
    members = list(members) if cq.cohort is not None else [cq]
    result = Assignment()
    assumed: Usage = {}  # what earlier pod sets of this Workload already take
    problems: list[str] = []
    for podset, requests in podsets:
        reasons: list[str] = []
        chosen: dict[str, str] = {}
        for resource in sorted(requests):
            if not cq.covers(resource):
                reasons.append(f"resource {resource} unavailable in ClusterQueue")
        failed = bool(reasons)
        for group in cq.groups if not failed else ():
            wanted = {r: requests[r] for r in group.covered if r in requests}
            if not wanted:
                continue
            flavor = _pick_flavor(
                cq,
                members,
                usage,
                assumed,
                group,
                wanted,
                reasons,
                cohort_quota,
                check,
                podset,
            )
            if flavor is None:
                failed = True
                break
            chosen.update(dict.fromkeys(wanted, flavor))
        if failed:
            problems.append(
                f"couldn't assign flavors to pod set {podset}: " + ", ".join(sorted(reasons))
            )
            continue
        result.flavors[podset] = chosen
        result.usage[podset] = dict(requests)
        for resource, flavor in chosen.items():
            key = (flavor, resource)
            assumed[key] = assumed.get(key, Fraction(0)) + requests[resource]
    result.message = "; ".join(problems)
    return result


def _pick_flavor(
    cq: ClusterQueueView,
    members: list[ClusterQueueView],
    usage: Mapping[str, Usage],
    assumed: Usage,
    group: ResourceGroup,
    wanted: Mapping[str, Fraction],
    reasons: list[str],
    cohort_quota: Usage | None = None,
    check: FlavorCheck | None = None,
    podset: str = "",
) -> str | None:
    borrowing_fit: str | None = None
    for flavor, quotas in group.flavors:
        refused = check(podset, flavor, group.covered) if check else None
        if refused:  # flavorassigner.go: checkFlavorForPodSets runs before fitsResourceQuota
            reasons.append(refused)
            continue
        fits, borrows = True, False
        for resource, amount in wanted.items():
            if resource not in quotas:
                fits = False
                continue
            before = assumed.get((flavor, resource), Fraction(0))
            available, maximum = _capacity(cq, members, usage, flavor, resource, cohort_quota)
            needed = before + amount
            if needed > maximum:
                reasons.append(
                    f"insufficient quota for {resource} in flavor {flavor}, previously "
                    f"considered podsets requests ({format_amount(resource, before)}) + current "
                    f"podset request ({format_amount(resource, amount)}) > maximum capacity "
                    f"({format_amount(resource, maximum)})"
                )
                fits = False
            elif needed > available:
                more = format_amount(resource, needed - available)
                reasons.append(
                    f"insufficient unused quota for {resource} in flavor {flavor}, {more} "
                    "more needed"
                )
                fits = False
            else:
                used = usage.get(cq.name, {}).get((flavor, resource), Fraction(0))
                if used + needed > quotas[resource].nominal:
                    borrows = True
        if not fits:
            continue
        if not borrows:
            return flavor
        if not cq.try_next_when_borrowing:
            return flavor
        borrowing_fit = borrowing_fit or flavor
    return borrowing_fit
