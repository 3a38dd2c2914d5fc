"""The cluster's prerequisites, checked once at the worker's start (docs/deploy.md,
"Prerequisites").

It reads what the domain needs to judge (``cluster_problems``): the API server's version,
whether ValidatingAdmissionPolicies are served, and whether the node-bound device-manager
policy is installed (by name). Each problem is one sentence saying what to change; together
they are said once in one log line, in a Warning Event ``PrerequisiteNotMet`` on the worker's
Pod (its namespace when the Pod is unknown) and in the ``prerequisites`` check of
``/readyz?verbose``, which stays failing until the worker is restarted on a fixed cluster.
What cannot be read (a discovery error, RBAC) counts as no problem: the check never keeps a
working cluster not ready.
"""

from __future__ import annotations

from typing import Any, Final

import structlog

from gpustack_operator.domain.bootstrap.prerequisites import (
    NODE_BOUND_POLICY,
    ClusterFacts,
    cluster_problems,
    parse_server_version,
)
from gpustack_operator.runtime.client import ApiError, Client, NotFound
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.resources import NAMESPACES, PODS, Resource

log = structlog.get_logger(__name__)

ADMISSION_GROUP: Final = "admissionregistration.k8s.io"
ADMISSION_POLICIES: Final = Resource(
    ADMISSION_GROUP,
    "v1",
    "ValidatingAdmissionPolicy",
    "validatingadmissionpolicies",
    namespaced=False,
)
CHECK_NAME: Final = "prerequisites"
EVENT_REASON: Final = "PrerequisiteNotMet"


async def read_cluster_facts(client: Client) -> ClusterFacts:
    """What :func:`cluster_problems` judges, read from the API; None where it cannot tell."""
    try:
        version = parse_server_version(await client.server_version())
    except ApiError as exc:
        log.warning("cannot read the server version; not checked", error=str(exc))
        version = None
    try:
        served: bool | None = ADMISSION_POLICIES.plural in await client.served_resources(
            ADMISSION_GROUP, "v1"
        )
    except ApiError as exc:
        log.warning("cannot discover admission policies; not checked", error=str(exc))
        served = None
    node_bound: bool | None = None
    if served:
        try:
            await client.get(ADMISSION_POLICIES, NODE_BOUND_POLICY)
            node_bound = True
        except NotFound:
            node_bound = False
        except ApiError as exc:
            log.warning("cannot read the node-bound policy; not checked", error=str(exc))
    return ClusterFacts(version, served, node_bound)


def _involved(pod_name: str | None, namespace: str) -> dict[str, Any]:
    if pod_name:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": namespace},
        }
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}


async def check_cluster_prerequisites(
    client: Client, manager: Manager, *, pod_name: str | None, namespace: str
) -> list[str]:
    """Read the cluster's facts and report its problems (log line, Event, readiness check);
    returns them."""
    problems = cluster_problems(await read_cluster_facts(client))
    if not problems:
        return problems
    message = "; ".join(problems)
    log.error("cluster prerequisites not met: " + message, fix="docs/deploy.md, Prerequisites")
    involved = _involved(pod_name, namespace)
    kind = PODS if pod_name else NAMESPACES

    async def tell() -> None:
        # Events are written by the leader only (docs/runtime.md, "Write fence").
        manager.recorder.event(involved, "Warning", EVENT_REASON, message, resource=kind)

    def not_met() -> bool:
        raise RuntimeError(message)

    manager.add_runnable(tell, name="prerequisites-event", needs_leader=True)
    manager.add_readyz_check(CHECK_NAME, not_met)
    return problems
