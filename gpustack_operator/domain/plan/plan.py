"""What ``plan`` and ``sim`` compute offline: simulated devices, then the desired chain.

Nodes with the ``sim.gpustack.ai/devices`` annotation (docs/simulator.md) get what the
simulated device manager and kubelet would give them (device labels, allocatable cards); the
domain's :func:`desired_state` then computes the chain, and every node is explained
(docs/plan.md). Pure, like the rest of the domain: the annotation's format is
``domain/node/simdevices.py``; the simulator (``gpustack_sim``) is never imported.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpustack_operator.domain.chain.declaredpools import PoolRejection
from gpustack_operator.domain.chain.explain import NodeExplanation, Reason, explain_nodes
from gpustack_operator.domain.chain.queues import HostCounting, host_split
from gpustack_operator.domain.chain.tenancy import TenantFleet, is_pseudo_node, tenant_reasons
from gpustack_operator.domain.labels import MANAGED_LABEL, note
from gpustack_operator.domain.manufacturers import Manufacturer
from gpustack_operator.domain.node.availability import NodeAvailability, explain_availability
from gpustack_operator.domain.node.devices import device_labels
from gpustack_operator.domain.node.devicesources.dra import node_slices
from gpustack_operator.domain.node.nodefeature import (
    DEFAULT_SYSTEM_NAMESPACE,
    device_manager_node_feature,
    merge_node_features,
)
from gpustack_operator.domain.node.simdevices import (
    SIM_DEVICES_ANNOTATION,
    parse_sim_devices,
    sim_card_counts,
)
from gpustack_operator.domain.nodeview import (
    annotations_of,
    is_deleting,
    labels_of,
    name_of,
    uid_of,
)
from gpustack_operator.domain.plan.desired import DesiredState, desired_state
from gpustack_operator.domain.plan.policy import ChainPolicy
from gpustack_operator.domain.quantities import format_binary_quantity, parse_quantity


def apply_sim_devices(
    nodes: Iterable[Mapping[str, Any]],
    manufacturers: Mapping[str, Manufacturer],
    *,
    system_namespace: str = DEFAULT_SYSTEM_NAMESPACE,
    with_memory: bool = False,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Do what the simulated device manager does for nodes with ``sim.gpustack.ai/devices``.

    Returns the nodes with device labels merged and ``status.allocatable[<resource>]``
    defaulted to the card count (unless the node sets it), and the device manager's
    NodeFeatures. A bad annotation raises ``ValueError`` naming the node.
    """
    result: list[dict[str, Any]] = []
    features: list[dict[str, Any]] = []
    for node in nodes:
        value = annotations_of(node).get(SIM_DEVICES_ANNOTATION)
        if value is None or (is_deleting(node) and MANAGED_LABEL not in labels_of(node)):
            # The agent publishes only for a node carrying gpustack.ai/managed, which the
            # worker gives no node it first sees deleting (docs/node-lifecycle.md, "Devices:
            # identity from what is installed, quota from what is healthy").
            result.append(copy.deepcopy(dict(node)))
            continue
        try:
            groups = parse_sim_devices(value, manufacturers, with_memory=with_memory)
        except ValueError as exc:
            raise ValueError(f"node {name_of(node) or '<unnamed>'}: {exc}") from None
        feature = device_manager_node_feature(
            name_of(node), uid_of(node), device_labels(groups), system_namespace
        )
        own = [feature] if feature is not None else []
        features.extend(own)
        merged = merge_node_features(node, own, owned="device-manager")
        status = merged.get("status")
        if not isinstance(status, dict):
            status = merged["status"] = {}
        allocatable = status.get("allocatable")
        if not isinstance(allocatable, dict):
            allocatable = status["allocatable"] = {}
        for mfr, count in sim_card_counts(groups).items():
            allocatable.setdefault(manufacturers[mfr].resource_name, str(count))
        result.append(merged)
    return result, features


def plan_state(
    nodes: Iterable[Mapping[str, Any]],
    namespaces: Iterable[str | Mapping[str, Any]],
    policy: ChainPolicy,
    *,
    with_memory: bool = False,
    resource_slices: Sequence[Mapping[str, Any]] = (),
    pool_objects: Sequence[Mapping[str, Any]] = (),
    now: float | None = None,
) -> DesiredState:
    """What ``plan`` prints: simulated devices first, then :func:`desired_state` under
    *policy* (the worker's, docs/configuration.md, "Chain policy"), then the explanation of
    every node (docs/plan.md).

    *resource_slices* are DRA ``ResourceSlice`` objects (docs/devices.md, "DRA"). An unset
    tenancy is told from *nodes* once, as the worker does at start (docs/tenants.md); in a
    vCluster tenant no device manager runs, so ``sim.gpustack.ai/devices`` is not read there.
    *now* (epoch seconds; None: every timer run out) is the moment each node's availability
    is judged at (docs/node-lifecycle.md); a withheld node's explanation says why."""
    nodes = list(nodes)
    policy = policy.with_tenancy_of(nodes)
    if policy.tenant_settings().is_tenant:
        with_devices: list[dict[str, Any]] = [dict(n) for n in nodes]
        dm_features: list[dict[str, Any]] = []
    else:
        with_devices, dm_features = apply_sim_devices(
            nodes,
            policy.manufacturers,
            system_namespace=policy.system_namespace,
            with_memory=with_memory,
        )
    state = desired_state(
        with_devices,
        namespaces,
        policy,
        extra_node_features=dm_features,
        resource_slices=resource_slices,
        pool_objects=pool_objects,
        now=now,
    )
    if state.fleet is not None:
        state.explanations = tenant_explanations(
            state.nodes, state.fleet, with_devices, policy.manufacturers, resource_slices
        )
        return state
    state.explanations = with_pool_rejections(
        with_availability(
            explain_nodes(
                state.nodes,
                policy.manufacturers,
                inputs=with_devices,
                resource_slices=resource_slices,
            ),
            state.availability,
        ),
        state.nodes,
        state.pool_rejections,
    )
    if policy.host_counting is HostCounting.ONCE:
        state.explanations = with_host_split(state.explanations, state.resource_flavors)
    return state


def with_host_split(
    explanations: Sequence[NodeExplanation], flavors: Iterable[Mapping[str, Any]]
) -> list[NodeExplanation]:
    """*explanations* saying, for a node feeding several pools, how ``--host-counting once``
    divides its CPU and memory among them (docs/worker.md, "CPU and memory: counted in every
    pool, or once")."""
    notes = {name_of(f): annotations_of(f) for f in flavors}
    result = []
    for explanation in explanations:
        pools = len(explanation.flavors)
        if pools > 1:
            parts = []
            for flavor in explanation.flavors:
                said = notes.get(flavor, {})
                cpu = parse_quantity(said.get(note("cpu"), ""))
                memory = parse_quantity(said.get(note("ram"), ""))
                if cpu is None or memory is None:
                    continue
                cores, size = host_split(cpu, memory, pools)
                parts.append(f"{flavor}: cpu={cores} memory={format_binary_quantity(size)}")
            reason = Reason(
                "host-counted-once",
                f"--host-counting once: its CPU and memory are divided evenly among its "
                f"{pools} pools, rounded down to whole cores and MiB: " + "; ".join(parts),
            )
            explanation = replace(explanation, reasons=(*explanation.reasons, reason))
        result.append(explanation)
    return result


def with_pool_rejections(
    explanations: Sequence[NodeExplanation],
    nodes: Sequence[Mapping[str, Any]],
    rejections: Sequence[PoolRejection],
) -> list[NodeExplanation]:
    """*explanations* with, for each node a rejected pool would have selected, why that pool
    has no queue (docs/autoscaling.md, "Pools that get no queue")."""
    if not rejections:
        return list(explanations)
    by_name = {name_of(n): n for n in nodes}
    result = []
    for explanation in explanations:
        node = by_name.get(explanation.node)
        said = [
            Reason(
                "declared-pool-rejected",
                f"its declared pool {r.key} gets no queue ({r.reason}); the node feeds pools "
                "of its own meanwhile",
            )
            for r in rejections
            if node is not None and r.matches(node)
        ]
        if said:
            explanation = replace(explanation, reasons=(*explanation.reasons, *said))
        result.append(explanation)
    return result


def with_availability(
    explanations: Sequence[NodeExplanation], verdicts: Mapping[str, NodeAvailability]
) -> list[NodeExplanation]:
    """*explanations* with each node's availability said (docs/node-lifecycle.md, "Seeing
    why"): a withheld node, one counted in its grace, one short of devices."""
    result = []
    for explanation in explanations:
        verdict = verdicts.get(explanation.node)
        said = explain_availability(verdict) if verdict is not None else None
        if said is not None:
            explanation = replace(explanation, reasons=(*explanation.reasons, Reason(*said)))
        result.append(explanation)
    return result


def tenant_explanations(
    nodes: Sequence[Mapping[str, Any]],
    fleet: TenantFleet,
    given: Sequence[Mapping[str, Any]],
    manufacturers: Mapping[str, Manufacturer],
    resource_slices: Sequence[Mapping[str, Any]],
) -> list[NodeExplanation]:
    """A tenant's explanations (docs/tenants.md): a pseudo node has only the vCluster reason;
    the others the usual ones, then why their pools were merged or dropped, and that DRA
    slices do not reach a tenant."""
    by_name = {name_of(n): n for n in given}
    result = []
    for explanation in explain_nodes(nodes, manufacturers, inputs=given):
        node = by_name.get(explanation.node, {})
        has_slices = bool(node_slices(explanation.node, resource_slices))
        extra = tenant_reasons(node, fleet, has_slices)
        own = explanation.reasons
        if explanation.node in fleet.unresolved:  # not an opt-out: the tenant's reason says why
            own = tuple(r for r in own if r.code not in ("opted-out", "not-managed"))
        reasons = tuple(extra) if is_pseudo_node(node) else (*own, *extra)
        result.append(replace(explanation, reasons=reasons))
    return result
