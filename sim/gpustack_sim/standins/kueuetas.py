"""A stand-in for Kueue's Topology-Aware Scheduling (TAS) admission (a test double).

Pure functions of plain objects, called by the Kueue stand-in (``standins/kueue.py``) once
quota fits a pod set into a TAS flavor (one with ``spec.topologyName``). They follow Kueue's
documented rules (docs/simulator.md, "TAS admission stand-in", cites each):

* capacity: only Nodes that match the flavor's ``nodeLabels``, carry every level label of
  its Topology, are Ready and not ``spec.unschedulable``, and whose ``NoSchedule``/
  ``NoExecute`` taints the pod's plus the flavor's tolerations tolerate; per Node
  ``status.allocatable`` minus the pods Kueue's TAS does not manage (no
  ``kueue.x-k8s.io/tas`` label) and minus the pods of TAS workloads already admitted;
* ``kueue.x-k8s.io/podset-required-topology: <level>``: all pods in one domain of that
  level (the fullest that fits, Kueue's BestFit), else the workload waits with Kueue's
  message ``topology "<name>" allows to fit only N out of M pod(s)``;
* ``podset-preferred-topology``: that level, then each coarser one, then spread;
* ``podset-unconstrained-topology: "true"``, and any pod set without an annotation in a
  TAS queue (Kueue's implicit default): any Ready nodes, the least free capacity first;
* the placement is at the hostname level: (node, pods) pairs, written into the admission as
  Kueue writes ``topologyAssignment`` and pinned onto the Job's pods.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from gpustack_operator.domain.nodeview import labels_of, name_of, status_field
from gpustack_operator.domain.quantities import parse_quantity

REQUIRED: Final = "kueue.x-k8s.io/podset-required-topology"
PREFERRED: Final = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
TAS_LABEL: Final = "kueue.x-k8s.io/tas"
"""On the pods of a TAS workload; pods without it are capacity TAS subtracts."""
PIN_ANNOTATION: Final = "sim.gpustack.ai/topology-assignment"
"""On an admitted TAS Job's pod template: the chosen nodes, ``[[node, pods], ...]``; the
scheduler stand-in binds pod *i* to the *i*-th slot (Kueue's topology ungater does the same
through each pod's node selector)."""
HOSTNAME: Final = "kubernetes.io/hostname"
_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})

Placement = list[tuple[str, int]]


@dataclass(frozen=True)
class TasRequest:
    """What one pod set asks of TAS."""

    name: str
    count: int
    per_pod: Mapping[str, Fraction]
    pod_spec: Mapping[str, Any]
    annotations: Mapping[str, str]


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether one of *tolerations* tolerates *taint* (``Exists`` or an equal value), as
    kube-scheduler's taint filter and Kueue's TAS judge it."""
    for t in tolerations:
        if t.get("effect") not in (None, "", taint.get("effect")):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and (t.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def excluded(
    node: Mapping[str, Any],
    flavor: Mapping[str, Any],
    levels: Sequence[str],
    pod_spec: Mapping[str, Any],
) -> str:
    """Why TAS does not offer *node* to this pod set (``""``: it does)."""
    labels = labels_of(node)
    spec = flavor.get("spec") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeLabels") or {}).items()):
        return "flavor nodeLabels"
    if any(not labels.get(level) for level in levels):
        return "missing level label"
    if not _ready(node):
        return "not Ready"
    if (node.get("spec") or {}).get("unschedulable"):
        return "unschedulable"
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return "node selector"
    tolerations = [*(pod_spec.get("tolerations") or []), *(spec.get("tolerations") or [])]
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in _EFFECTS and not tolerates(tolerations, taint):
            return "taint"
    return ""


def requests_of(pod_spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """One pod's requests (a limit stands in for a missing request), summed over containers."""
    total: dict[str, Fraction] = {}
    for container in pod_spec.get("containers") or ():
        resources = container.get("resources") or {}
        amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for resource, raw in amounts.items():
            value = parse_quantity(raw)
            if value is not None:
                total[resource] = total.get(resource, Fraction(0)) + value
    return total


def pod_usage(pods: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Fraction]]:
    """Per node, what bound pods without the TAS label request (DaemonSets, static pods,
    anything Kueue's TAS does not place)."""
    used: dict[str, dict[str, Fraction]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or labels_of(pod).get(TAS_LABEL) or phase in ("Succeeded", "Failed"):
            continue
        bucket = used.setdefault(str(node), {})
        for resource, value in requests_of(pod.get("spec") or {}).items():
            bucket[resource] = bucket.get(resource, Fraction(0)) + value
    return used


def _fit(
    node: Mapping[str, Any], used: Mapping[str, Fraction], per_pod: Mapping[str, Fraction]
) -> int:
    free = status_field(node, "allocatable")
    count: int | None = None
    for resource, amount in per_pod.items():
        if amount <= 0:
            continue
        left = (parse_quantity(free.get(resource)) or Fraction(0)) - used.get(resource, Fraction(0))
        n = max(0, int(left // amount))
        count = n if count is None else min(count, n)
    return count if count is not None else 0


def _fill(leaves: list[tuple[str, int]], count: int) -> Placement:
    out: Placement = []
    for node, fit in leaves:
        if count <= 0:
            break
        take = min(fit, count)
        if take:
            out.append((node, take))
            count -= take
    return out


def place(
    request: TasRequest,
    flavor: Mapping[str, Any],
    topology: str,
    levels: Sequence[str],
    nodes: Iterable[Mapping[str, Any]],
    used: Mapping[str, Mapping[str, Fraction]],
) -> Placement | str:
    """Where TAS puts *request*'s pods in *flavor* (Topology *topology* with *levels*):
    (node, pods) pairs, or Kueue's message why it does not fit. *used*: per node, what
    non-TAS pods and admitted TAS workloads already take."""
    annotations = request.annotations
    level = annotations.get(REQUIRED) or annotations.get(PREFERRED) or ""
    if level and level not in levels:
        return f'Flavor "{name_of(flavor)}" does not contain the requested level'
    leaves: dict[str, tuple[tuple[str, ...], int]] = {}
    for node in nodes:
        if excluded(node, flavor, levels, request.pod_spec):
            continue
        fit = _fit(node, used.get(name_of(node), {}), request.per_pod)
        labels = labels_of(node)
        leaves[name_of(node)] = (tuple(labels.get(k, "") for k in levels), fit)

    def in_one_domain(depth: int) -> Placement | int:
        domains: dict[tuple[str, ...], list[tuple[str, int]]] = {}
        for node, (path, fit) in leaves.items():
            domains.setdefault(path[: depth + 1], []).append((node, fit))
        best: tuple[int, tuple[str, ...]] | None = None
        largest = 0
        for path, members in domains.items():
            total = sum(f for _, f in members)
            largest = max(largest, total)
            if total >= request.count and (best is None or (total, path) < best):
                best = (total, path)  # BestFit: the fullest domain that still fits
        if best is None:
            return largest
        members = sorted(domains[best[1]], key=lambda m: (-m[1], m[0]))
        return _fill(members, request.count)

    def spread() -> Placement | int:
        # LeastFreeCapacity: the fullest nodes first, so free room stays together
        members = sorted(
            ((n, f) for n, (_, f) in leaves.items() if f > 0), key=lambda m: (m[1], m[0])
        )
        total = sum(f for _, f in members)
        return _fill(members, request.count) if total >= request.count else total

    result: Placement | int
    if annotations.get(REQUIRED):
        result = in_one_domain(levels.index(level))
    elif annotations.get(PREFERRED):
        result = 0
        for depth in range(levels.index(level), -1, -1):
            result = in_one_domain(depth)
            if not isinstance(result, int):
                break
        if isinstance(result, int):
            result = spread()
    else:  # unconstrained, stated or implicit (TAS-only ClusterQueue)
        result = spread()
    if isinstance(result, int):
        if result == 0:
            return f'topology "{topology}" doesn\'t allow to fit any of {request.count} pod(s)'
        return f'topology "{topology}" allows to fit only {result} out of {request.count} pod(s)'
    return result


def requests_tas(annotations: Mapping[str, str]) -> bool:
    """Whether a pod set asks for TAS itself (a required, preferred or unconstrained
    topology; Kueue's ``IsExplicitlyRequestingTAS``)."""
    return bool(
        annotations.get(REQUIRED)
        or annotations.get(PREFERRED)
        or annotations.get(UNCONSTRAINED) == "true"
    )


def flavor_check(
    annotations: Mapping[str, str],
    pod_spec: Mapping[str, Any],
    flavor: Mapping[str, Any] | None,
    flavor_name: str,
    covered: Sequence[str],
    topologies: Mapping[str, Sequence[str]],
    tas_only: bool,
) -> str | None:
    """Why *flavor* cannot serve a pod set for TAS reasons, judged before its quota, or None
    (Kueue v0.19.2 ``pkg/scheduler/flavorassigner/tas_flavorassigner.go``,
    ``checkPodSetAndFlavorMatchForTAS``). *tas_only*: every flavor of the ClusterQueue is a
    TAS flavor, so a pod set without an annotation is scheduled by TAS implicitly."""
    spec = (flavor or {}).get("spec") or {}
    topology = spec.get("topologyName")
    explicit = requests_tas(annotations)
    if explicit or tas_only:
        if not explicit:
            return None  # implied: every flavor of the queue supports TAS
        if not topology:
            # A flavor that serves none of the pod's resources may still give quota-only ones.
            if not set(requests_of(pod_spec)) & set(covered):
                return None
            return f'Flavor "{flavor_name}" does not support TopologyAwareScheduling'
        levels = topologies.get(str(topology))
        level = annotations.get(REQUIRED) or annotations.get(PREFERRED) or ""
        if levels is not None and level and level not in levels:
            return f'Flavor "{flavor_name}" does not contain the requested level'
        return None
    if topology:
        return f'Flavor "{flavor_name}" supports only TopologyAwareScheduling'
    return None


def charge(
    used: dict[str, dict[str, Fraction]], placement: Placement, per_pod: Mapping[str, Fraction]
) -> None:
    """Add a placement's pods to *used*."""
    for node, pods in placement:
        bucket = used.setdefault(node, {})
        for resource, amount in per_pod.items():
            bucket[resource] = bucket.get(resource, Fraction(0)) + amount * pods


def topology_assignment(placement: Placement, api_version: str) -> dict[str, Any]:
    """Kueue's ``topologyAssignment`` at the hostname level, in the Workload's version:
    v1beta1 ``domains``, v1beta2 ``slices`` ([K] apis/kueue/*/workload_types.go)."""
    if api_version.endswith("/v1beta1"):
        return {
            "levels": [HOSTNAME],
            "domains": [{"values": [node], "count": pods} for node, pods in placement],
        }
    return {
        "levels": [HOSTNAME],
        "slices": [
            {
                "domainCount": len(placement),
                "valuesPerLevel": [{"individual": {"roots": [n for n, _ in placement]}}],
                "podCounts": {"individual": [p for _, p in placement]},
            }
        ],
    }


def assignment_placement(assignment: Mapping[str, Any]) -> Placement:
    """The (node, pods) pairs of a hostname-level ``topologyAssignment`` (either version)."""
    levels = list(assignment.get("levels") or [])
    if not levels or levels[-1] != HOSTNAME:
        return []
    out: Placement = []
    for domain in assignment.get("domains") or ():
        out.append((str(domain["values"][-1]), int(domain.get("count", 0))))
    for piece in assignment.get("slices") or ():
        values = piece.get("valuesPerLevel") or []
        roots = ((values[-1] if values else {}).get("individual") or {}).get("roots") or []
        counts = piece.get("podCounts") or {}
        pods = counts.get("individual") or [counts.get("universal", 0)] * len(roots)
        out.extend((str(n), int(p)) for n, p in zip(roots, pods, strict=False))
    return out


def pin(template: dict[str, Any], placement: Placement) -> None:
    """Mark a Job's pod template with its placement and the TAS label."""
    meta = template.setdefault("metadata", {})
    meta.setdefault("labels", {})[TAS_LABEL] = "true"
    meta.setdefault("annotations", {})[PIN_ANNOTATION] = json.dumps(placement)


def pinned_node(template: Mapping[str, Any], index: int) -> str | None:
    """The node TAS chose for pod *index* of a Job whose template :func:`pin` marked."""
    raw = ((template.get("metadata") or {}).get("annotations") or {}).get(PIN_ANNOTATION)
    if not raw:
        return None
    for node, pods in json.loads(raw):
        if index < pods:
            return str(node)
        index -= pods
    return None


class TasPass:
    """TAS state for one admission pass of the Kueue stand-in: the Nodes, the Topologies'
    levels and the capacity already taken, charged as workloads are admitted in order."""

    def __init__(
        self,
        nodes: Sequence[Mapping[str, Any]],
        topologies: Mapping[str, Sequence[str]],
        used: dict[str, dict[str, Fraction]],
    ) -> None:
        self.nodes = nodes
        self.topologies = topologies
        self.used = used

    @classmethod
    def of(
        cls,
        nodes: Sequence[Mapping[str, Any]],
        topologies: Iterable[Mapping[str, Any]],
        pods: Iterable[Mapping[str, Any]],
        admitted: Iterable[Mapping[str, Any]],
    ) -> TasPass:
        """From the store's Nodes, Topologies, Pods and admitted Workloads."""
        levels = {
            name_of(t): [
                str(level.get("nodeLabel")) for level in (t.get("spec") or {}).get("levels") or []
            ]
            for t in topologies
        }
        used = pod_usage(pods)
        for wl in admitted:
            sets = {p.get("name"): p for p in (wl.get("spec") or {}).get("podSets") or []}
            for assignment in ((wl.get("status") or {}).get("admission") or {}).get(
                "podSetAssignments"
            ) or []:
                placement = assignment_placement(assignment.get("topologyAssignment") or {})
                template = (sets.get(assignment.get("name")) or {}).get("template") or {}
                if placement:
                    charge(used, placement, requests_of(template.get("spec") or {}))
        return cls(nodes, levels, used)

    def place(
        self,
        wl: Mapping[str, Any],
        podsets: Sequence[Any],
        assigned: Mapping[str, Mapping[str, str]],
        flavors: Mapping[str, Mapping[str, Any]],
    ) -> dict[str, Placement] | str:
        """Each pod set's placement in its TAS flavor (pod sets in non-TAS flavors have
        none), or the first one's reason for waiting, phrased as Kueue phrases it."""
        out: dict[str, Placement] = {}
        trial = {n: dict(r) for n, r in self.used.items()}
        for podset in podsets:
            names = sorted(set((assigned.get(podset.name) or {}).values()))
            flavor = flavors.get(names[0]) if names else None
            topology = ((flavor or {}).get("spec") or {}).get("topologyName")
            if flavor is None or not topology:
                continue
            if topology not in self.topologies:
                return f'there is no Topology "{topology}" for TAS flavor "{names[0]}"'
            templates = {
                p.get("name"): p.get("template") or {}
                for p in (wl.get("spec") or {}).get("podSets") or []
            }
            template = templates.get(podset.name) or {}
            request = TasRequest(
                name=podset.name,
                count=podset.count,
                per_pod=requests_of(podset.spec),
                pod_spec=podset.spec,
                annotations=(template.get("metadata") or {}).get("annotations") or {},
            )
            result = place(request, flavor, topology, self.topologies[topology], self.nodes, trial)
            if isinstance(result, str):
                return f"couldn't assign flavors to pod set {podset.name}: {result}"
            charge(trial, result, request.per_pod)
            out[podset.name] = result
        return out

    def admitted(self, podsets: Sequence[Any], placements: Mapping[str, Placement]) -> None:
        """Charge an admitted workload's placements."""
        for podset in podsets:
            if podset.name in placements:
                charge(self.used, placements[podset.name], requests_of(podset.spec))
