"""Why a node feeds the pools it does: the explanations ``plan`` prints (docs/plan.md).

For every node, its outcome (the ResourceFlavors it feeds) and, when it feeds none or fewer
than its hardware suggests, one :class:`Reason` per cause: a stable code for tools and a
one-line message for people that names the fix. Each cause is found by one check function
(:data:`CHECKS`); a new source of node facts adds its own check to the tuple.

The checks read the node as the cluster would hold it after every NodeFeature is merged
(``DesiredState.nodes``); they only report, the chain itself is computed elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Final

from gpustack_operator.domain.chain.queues import advertises, pool_amount, pool_resource
from gpustack_operator.domain.labels import (
    ACCELERATABLE_PREFIX,
    CPU_NAME_ANNOTATION,
    MANAGED_LABEL,
    NFD_CPU_FAMILY_LABEL,
    SUFFIX_COUNT,
    accelerated_key,
)
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.capacity import MAX_SPEC_NUMBER, device_keys
from gpustack_operator.domain.node.devicesources import node_device_diagnostics
from gpustack_operator.domain.node.devicesources.dra import node_slices
from gpustack_operator.domain.node.keys import cpu_node_key
from gpustack_operator.domain.node.nodefeature import can_publish_for
from gpustack_operator.domain.node.nodeprofiles import is_managed, node_profiles
from gpustack_operator.domain.nodeview import (
    annotations_of,
    is_deleting,
    labels_of,
    name_of,
    status_field,
)
from gpustack_operator.domain.quantities import parse_count, parse_quantity
from gpustack_operator.domain.validation import LABEL_VALUE_MAX_LEN

GI: Final = 2**30
CAPACITY_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage")
_FALLBACKS: Final = {
    "cpu": "counted as 1 CPU (1 per card in device pools)",
    "memory": "RAM taken as 2 GiB per CPU (1 GiB per card in device pools)",
    "ephemeral-storage": "storage taken as 15 GiB per CPU (per card in device pools)",
}


@dataclass(frozen=True)
class Reason:
    """One cause: *code* (stable, kebab-case) and a one-line *message* naming the fix."""

    code: str
    message: str


@dataclass(frozen=True)
class NodeExplanation:
    """A node's outcome (flavors it feeds) and the reasons it feeds none or fewer."""

    node: str
    managed: bool
    flavors: tuple[str, ...]
    reasons: tuple[Reason, ...]
    topology: str = ""
    """The Topology the node is in, or why none (docs/topology.md); ``""``: not asked."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON/YAML shape ``plan`` prints (docs/plan.md, "Output")."""
        shape: dict[str, Any] = {
            "node": self.node,
            "managed": self.managed,
            "flavors": list(self.flavors),
            "reasons": [{"code": r.code, "message": r.message} for r in self.reasons],
        }
        if self.topology:
            shape["topology"] = self.topology
        return shape


Check = Callable[[Mapping[str, Any], Mapping[str, Manufacturer]], list[Reason]]
"""One cause: the reasons it finds on a merged node (empty when it does not apply)."""


def check_deleting(node: Mapping[str, Any], _: Mapping[str, Manufacturer]) -> list[Reason]:
    if not is_deleting(node):
        return []
    return [
        Reason(
            "being-deleted",
            "the node is being deleted (metadata.deletionTimestamp is set): it counts for "
            "nothing; it comes back once re-created",
        )
    ]


def check_name_length(node: Mapping[str, Any], _: Mapping[str, Manufacturer]) -> list[Reason]:
    name = name_of(node)
    if can_publish_for(name):
        return []
    return [
        Reason(
            "name-too-long",
            f"the node name has {len(name)} characters; NFD attributes a NodeFeature to its "
            f"node by a label value (at most {LABEL_VALUE_MAX_LEN}), so no capacity labels "
            "can reach it: give the node a shorter name",
        )
    ]


def check_managed(node: Mapping[str, Any], _: Mapping[str, Manufacturer]) -> list[Reason]:
    if is_managed(node) or is_deleting(node) or not can_publish_for(name_of(node)):
        return []
    value = labels_of(node).get(MANAGED_LABEL)
    if value == "false":
        return [
            Reason(
                "opted-out",
                f"opted out with {MANAGED_LABEL}=false: remove the label (or set it to "
                "true) to give the node pools",
            )
        ]
    return [
        Reason(
            "not-managed",
            f"{MANAGED_LABEL}={value}: only 'true' (or no label) is managed; remove the label "
            "and the worker sets it to true",
        )
    ]


def check_cpu_identity(
    node: Mapping[str, Any], manufacturers: Mapping[str, Manufacturer]
) -> list[Reason]:
    labels = labels_of(node)
    if cpu_node_key(labels, annotations_of(node)):
        return []
    # Say what the missing identity does to this node: only a node with device pools has
    # pools named 'generic'.
    devices = ", device pools are named 'generic'" if device_keys(labels, manufacturers) else ""
    return [
        Reason(
            "no-cpu-identity",
            f"no CPU identity (NFD's {NFD_CPU_FAMILY_LABEL}/.id labels and the "
            f"{CPU_NAME_ANNOTATION} annotation are missing): no CPU pool{devices}; run NFD "
            "on the node",
        )
    ]


def _candidate_device_keys(labels: Mapping[str, str]) -> list[str]:
    """``acceleratable.feature.gpustack.ai/<x>=true`` keys that look like a device key
    (a dash, no suffix), whether or not the worker can use them."""
    keys = []
    for key, value in labels.items():
        if value != "true" or not key.startswith(ACCELERATABLE_PREFIX):
            continue
        akey = key[len(ACCELERATABLE_PREFIX) :]
        if "-" in akey and "." not in akey:
            keys.append(akey)
    return sorted(keys)


def check_devices(
    node: Mapping[str, Any], manufacturers: Mapping[str, Manufacturer]
) -> list[Reason]:
    labels = labels_of(node)
    usable = set(device_keys(labels, manufacturers))
    reasons: list[Reason] = []
    for akey in _candidate_device_keys(labels):
        vendor = akey.partition("-")[0]
        if vendor not in manufacturers:
            reasons.append(
                Reason(
                    "unknown-vendor",
                    f"device {akey}: vendor {vendor!r} is not one of "
                    f"{', '.join(sorted(manufacturers))}: no pool for it",
                )
            )
            continue
        if akey not in usable:
            reasons.append(
                Reason(
                    "invalid-device-key",
                    f"device key {akey!r} holds characters outside [a-z0-9-] or is too long "
                    "for its labels: no pool for it; relabel with the device manager",
                )
            )
            continue
        count_label = accelerated_key(akey, SUFFIX_COUNT)
        if parse_count(labels.get(count_label)) is None:
            reasons.append(
                Reason(
                    "device-without-count",
                    f"device {akey}: no valid {count_label} label (a positive integer): no "
                    "pool for it",
                )
            )
            continue
        resource = pool_resource(node, akey, manufacturers[vendor])
        if pool_amount(node, akey, resource) > 0:
            continue
        if advertises(node, akey, resource):
            reported = status_field(node, "allocatable").get(resource, "absent")
            reasons.append(
                Reason(
                    "device-allocatable-zero",
                    f"device {akey}: status.allocatable[{resource}] is {reported} (its device "
                    "plugin is down or every card unhealthy): the flavor stays in its queue "
                    "with no devices from this node; check the device plugin's pods on the node",
                )
            )
        else:
            reasons.append(
                Reason(
                    "device-without-allocatable",
                    f"device {akey}: status.allocatable has no {resource}: its pool gets no "
                    "quota; run the vendor's device plugin on the node",
                )
            )
    return reasons


def _capacity_problem(resource: str, raw: object) -> str:
    if raw is None:
        return "is missing"
    quantity = parse_quantity(raw)
    if quantity is None:
        return f"is not a quantity ({raw!r})"
    if quantity <= 0:
        return f"is not positive ({raw})"
    limit = Fraction(MAX_SPEC_NUMBER) * (1 if resource == "cpu" else GI)
    if quantity > limit:
        unit = "cores" if resource == "cpu" else "GiB"
        return f"is absurd ({raw}, over {MAX_SPEC_NUMBER:,} {unit}; capped there)"
    return ""


def check_capacity(node: Mapping[str, Any], _: Mapping[str, Manufacturer]) -> list[Reason]:
    """Bad ``status.capacity`` values: missing, not a quantity, zero or negative, or absurd
    (beyond what a flavor spec holds). The worker replaces them; this says so."""
    capacity = status_field(node, "capacity")
    reasons = []
    for resource in CAPACITY_RESOURCES:
        problem = _capacity_problem(resource, capacity.get(resource))
        if problem and "absurd" in problem:
            reasons.append(
                Reason("bad-capacity", f"status.capacity.{resource} {problem}; fix the node")
            )
        elif problem:
            reasons.append(
                Reason(
                    "bad-capacity",
                    f"status.capacity.{resource} {problem}: {_FALLBACKS[resource]}; fix the "
                    "node's status (the kubelet reports it)",
                )
            )
    return reasons


CHECKS: tuple[Check, ...] = (
    check_deleting,
    check_name_length,
    check_managed,
    check_cpu_identity,
    check_devices,
    check_capacity,
)
"""Every cause, in the order reasons are listed."""


def explain_node(
    node: Mapping[str, Any],
    manufacturers: Mapping[str, Manufacturer],
    checks: Iterable[Check] = CHECKS,
) -> NodeExplanation:
    """The outcome and reasons of one merged node."""
    reasons = tuple(r for check in checks for r in check(node, manufacturers))
    managed = is_managed(node)
    flavors = sorted({p.flavor for p in node_profiles(node, manufacturers)}) if managed else []
    return NodeExplanation(
        node=name_of(node), managed=managed, flavors=tuple(flavors), reasons=reasons
    )


def device_source_reasons(
    node: Mapping[str, Any],
    manufacturers: Mapping[str, Manufacturer],
    slices: Iterable[Mapping[str, Any]] = (),
) -> list[Reason]:
    """Why devices the GPU stacks' labels or DRA *slices* describe got no pool, read from the
    node as given (before the worker's labels are merged); codes in docs/devices.md, "Why a
    device gets no pool"."""
    return [
        Reason(d.reason, f"{d.source}: {d.detail}")
        for d in node_device_diagnostics(node, manufacturers, slices)
    ]


def explain_nodes(
    nodes: Iterable[Mapping[str, Any]],
    manufacturers: Mapping[str, Manufacturer],
    checks: Iterable[Check] = CHECKS,
    *,
    inputs: Iterable[Mapping[str, Any]] = (),
    resource_slices: Sequence[Mapping[str, Any]] = (),
) -> list[NodeExplanation]:
    """:func:`explain_node` for every merged node, by node name, followed by
    :func:`device_source_reasons` for the node of the same name in *inputs* (the nodes as
    given, with their DRA *resource_slices*)."""
    chosen = tuple(checks)
    given = {name_of(n): n for n in inputs}
    result = []
    for node in sorted(nodes, key=lambda n: name_of(n)):
        explanation = explain_node(node, manufacturers, chosen)
        source = given.get(explanation.node)
        if source is not None:
            slices = node_slices(explanation.node, resource_slices) if resource_slices else ()
            extra = device_source_reasons(source, manufacturers, slices)
            if extra:
                explanation = replace(explanation, reasons=(*explanation.reasons, *extra))
        result.append(explanation)
    return result
