"""``kubectl get`` tables: the ``meta.k8s.io`` ``Table`` the API server prints server-side.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the
columns the server chooses: Name plus a CRD version's ``additionalPrinterColumns`` (evaluated
with the simple JSONPath CRDs use), Name + Age for kinds without columns, and the columns the
real server prints for the built-in kinds people look at (Nodes, Deployments, ...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from gpustack_sim.apiserver.kinds import KindInfo

__all__ = ["evaluate_jsonpath", "human_duration", "maybe_table", "table_for"]

_NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
_AGE_COLUMN = {
    "name": "Age",
    "type": "date",
    "format": "",
    "description": "CreationTimestamp is the time the object was created.",
    "priority": 0,
}
_AGE_PATH = ".metadata.creationTimestamp"


@dataclass(frozen=True)
class _Column:
    """A built-in kind's printer column; *source* is a JSONPath or a key of _COMPUTED."""

    name: str
    type: str
    source: str
    priority: int = 0  # 1: shown only with -o wide
    default: Any = None  # the cell when the path does not resolve


_AGE = _Column("Age", "date", _AGE_PATH)
_NONE = "<none>"

# The columns the real server prints for the built-in kinds people look at with kubectl.
_BUILTIN_COLUMNS: Mapping[tuple[str, str], tuple[_Column, ...]] = {
    ("", "Node"): (
        _Column("Status", "string", "node-status"),
        _Column("Roles", "string", "node-roles"),
        _AGE,
        _Column("Version", "string", ".status.nodeInfo.kubeletVersion", default=""),
        _Column(
            "Internal-IP",
            "string",
            '.status.addresses[?(@.type=="InternalIP")].address',
            1,
            _NONE,
        ),
        _Column(
            "External-IP",
            "string",
            '.status.addresses[?(@.type=="ExternalIP")].address',
            1,
            _NONE,
        ),
        _Column("OS-Image", "string", ".status.nodeInfo.osImage", 1, _NONE),
        _Column("Kernel-Version", "string", ".status.nodeInfo.kernelVersion", 1, _NONE),
        _Column(
            "Container-Runtime", "string", ".status.nodeInfo.containerRuntimeVersion", 1, _NONE
        ),
    ),
    ("", "Namespace"): (_Column("Status", "string", ".status.phase", default=""), _AGE),
    ("", "ConfigMap"): (_Column("Data", "integer", "data-count"), _AGE),
    ("", "Secret"): (
        _Column("Type", "string", ".type", default="Opaque"),
        _Column("Data", "integer", "data-count"),
        _AGE,
    ),
    ("apps", "Deployment"): (
        _Column("Ready", "string", "deployment-ready"),
        _Column("Up-to-date", "integer", ".status.updatedReplicas", default=0),
        _Column("Available", "integer", ".status.availableReplicas", default=0),
        _AGE,
    ),
    ("apps", "ReplicaSet"): (
        _Column("Desired", "integer", ".spec.replicas", default=1),
        _Column("Current", "integer", ".status.replicas", default=0),
        _Column("Ready", "integer", ".status.readyReplicas", default=0),
        _AGE,
    ),
    ("apps", "DaemonSet"): (
        _Column("Desired", "integer", ".status.desiredNumberScheduled", default=0),
        _Column("Current", "integer", ".status.currentNumberScheduled", default=0),
        _Column("Ready", "integer", ".status.numberReady", default=0),
        _Column("Up-to-date", "integer", ".status.updatedNumberScheduled", default=0),
        _Column("Available", "integer", ".status.numberAvailable", default=0),
        _AGE,
    ),
    ("apps", "StatefulSet"): (_Column("Ready", "string", "statefulset-ready"), _AGE),
    ("", "ReplicationController"): (
        _Column("Desired", "integer", ".spec.replicas", default=1),
        _Column("Current", "integer", ".status.replicas", default=0),
        _Column("Ready", "integer", ".status.readyReplicas", default=0),
        _AGE,
    ),
    ("networking.k8s.io", "Ingress"): (
        _Column("Class", "string", ".spec.ingressClassName", default=_NONE),
        _Column("Hosts", "string", "ingress-hosts"),
        _Column("Address", "string", "ingress-address"),
        _Column("Ports", "string", "ingress-ports"),
        _AGE,
    ),
    ("certificates.k8s.io", "CertificateSigningRequest"): (
        _AGE,
        _Column("SignerName", "string", ".spec.signerName", default=""),
        _Column("Requestor", "string", ".spec.username", default=""),
        _Column("RequestedDuration", "string", "csr-duration"),
        _Column("Condition", "string", "csr-condition"),
    ),
    ("storage.k8s.io", "CSIStorageCapacity"): (
        _Column("StorageClassName", "string", ".storageClassName", default=""),
        _AGE,
    ),
    ("apiregistration.k8s.io", "APIService"): (
        _Column("Service", "string", "apiservice-service"),
        _Column("Available", "string", "apiservice-available"),
        _AGE,
    ),
    # kubernetes/kubernetes v1.36 pkg/printers/internalversion/printers.go (printJob, printPod)
    ("batch", "Job"): (
        _Column("Status", "string", "job-status"),
        _Column("Completions", "string", "job-completions"),
        _Column("Duration", "string", "job-duration"),
        _AGE,
        _Column("Containers", "string", "template-containers", 1),
        _Column("Images", "string", "template-images", 1),
        _Column("Selector", "string", "job-selector", 1),
    ),
    ("", "Pod"): (
        _Column("Ready", "string", "pod-ready"),
        _Column("Status", "string", "pod-status"),
        _Column("Restarts", "string", "pod-restarts"),
        _AGE,
        _Column("IP", "string", ".status.podIP", 1, _NONE),
        _Column("Node", "string", ".spec.nodeName", 1, _NONE),
        _Column("Nominated Node", "string", ".status.nominatedNodeName", 1, _NONE),
        _Column("Readiness Gates", "string", "pod-readiness-gates", 1),
    ),
    ("coordination.k8s.io", "Lease"): (
        _Column("Holder", "string", ".spec.holderIdentity", default=""),
        _AGE,
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): (
        _Column("Created At", "date", "created-at"),
    ),
}


def _node_roles(node: Mapping[str, Any]) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    prefix = "node-role.kubernetes.io/"
    return ",".join(sorted(k[len(prefix) :] for k in labels if k.startswith(prefix))) or "<none>"


def _data_count(obj: Mapping[str, Any]) -> int:
    return len(obj.get("data") or {}) + len(obj.get("binaryData") or {})


def _deployment_ready(obj: Mapping[str, Any]) -> str:
    status = obj.get("status") or {}
    wanted = (obj.get("spec") or {}).get("replicas", 1)
    return f"{status.get('readyReplicas', 0)}/{wanted}"


def _statefulset_ready(obj: Mapping[str, Any]) -> str:
    status = obj.get("status") or {}
    return f"{status.get('readyReplicas', 0)}/{status.get('replicas', 0)}"


def _ingress_hosts(obj: Mapping[str, Any]) -> str:
    rules = (obj.get("spec") or {}).get("rules") or []
    hosts = [str(r.get("host") or "*") for r in rules if isinstance(r, Mapping)]
    return ",".join(hosts) or "*"


def _ingress_address(obj: Mapping[str, Any]) -> str:
    found = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return ",".join(str(i.get("ip") or i.get("hostname") or "") for i in found)


def _ingress_ports(obj: Mapping[str, Any]) -> str:
    return "80, 443" if (obj.get("spec") or {}).get("tls") else "80"


def _csr_duration(obj: Mapping[str, Any]) -> str:
    seconds = (obj.get("spec") or {}).get("expirationSeconds")
    return human_duration(float(seconds)) if isinstance(seconds, int) else _NONE


def _csr_condition(obj: Mapping[str, Any]) -> str:
    status = obj.get("status") or {}
    found = [str(c.get("type")) for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    if status.get("certificate"):
        found.append("Issued")
    return ",".join(found) or "Pending"


def _apiservice_service(obj: Mapping[str, Any]) -> str:
    service = (obj.get("spec") or {}).get("service")
    if not isinstance(service, Mapping):
        return "Local"
    return f"{service.get('namespace', '')}/{service.get('name', '')}"


def _apiservice_available(obj: Mapping[str, Any]) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or []
    found = next((c for c in conditions if c.get("type") == "Available"), None)
    if found is None:
        return "Unknown"
    if found.get("status") == "True":
        return "True"
    return f"{found.get('status')} ({found.get('reason', '')})"


def _node_status(node: Mapping[str, Any]) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    status = (
        "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    )
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _has_condition(obj: Mapping[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _job_status(job: Mapping[str, Any]) -> str:
    """printJob's STATUS: the first of these conditions the Job holds, else Running."""
    if _has_condition(job, "Complete"):
        return "Complete"
    if _has_condition(job, "Failed"):
        return "Failed"
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    for kind in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if _has_condition(job, kind):
            return kind
    return "Running"


def _job_completions(job: Mapping[str, Any]) -> str:
    spec, succeeded = job.get("spec") or {}, (job.get("status") or {}).get("succeeded", 0)
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = int(spec.get("parallelism", 0) or 0)
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def _stamp(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def _job_duration(job: Mapping[str, Any], now: datetime) -> str:
    status = job.get("status") or {}
    start = _stamp(status.get("startTime"))
    if start is None:
        return ""
    end = _stamp(status.get("completionTime")) or now
    return human_duration((end - start).total_seconds())


def _template_containers(obj: Mapping[str, Any]) -> str:
    spec = (((obj.get("spec") or {}).get("template") or {}).get("spec")) or {}
    return ",".join(str(c.get("name", "")) for c in spec.get("containers") or [])


def _template_images(obj: Mapping[str, Any]) -> str:
    spec = (((obj.get("spec") or {}).get("template") or {}).get("spec")) or {}
    return ",".join(str(c.get("image", "")) for c in spec.get("containers") or [])


def _job_selector(job: Mapping[str, Any]) -> str:
    """metav1.FormatLabelSelector: ``k=v`` and ``k in (a,b)`` terms, ``<none>`` when empty."""
    selector = (job.get("spec") or {}).get("selector") or {}
    terms = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin"}
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key", ""), expr.get("operator", "")
        if op in ops:
            terms.append(f"{key} {ops[op]} ({','.join(expr.get('values') or [])})")
        else:
            terms.append(key if op == "Exists" else f"!{key}")
    return ",".join(terms) or _NONE


def _pod_ready(pod: Mapping[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready") and "running" in (c.get("state") or {}))
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{ready}/{total}"


def _pod_status(pod: Mapping[str, Any]) -> str:
    """printPod's STATUS without init containers: the phase or ``status.reason``, then the
    last container's waiting or terminated reason (``Completed``), ``Terminating`` for a
    deleted pod that has not finished."""
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or phase)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    has_running, error_reason = False, ""
    for container in reversed(status.get("containerStatuses") or []):
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated")
        if waiting.get("reason"):
            reason = str(waiting["reason"])
        elif terminated is not None:
            code = int(terminated.get("exitCode") or 0)
            if terminated.get("reason"):
                reason = str(terminated["reason"])
            elif terminated.get("signal"):
                reason = f"Signal:{terminated['signal']}"
            else:
                reason = f"ExitCode:{code}"
            if code != 0:
                error_reason = reason
        elif container.get("ready") and "running" in state:
            has_running = True
    if reason == "Completed":
        if has_running and _has_condition(pod, "Ready"):
            reason = "Running"
        elif error_reason:
            reason = error_reason
        elif has_running:
            reason = "NotReady"
    deleted = (pod.get("metadata") or {}).get("deletionTimestamp")
    if deleted and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif deleted and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    return reason


def _pod_restarts(pod: Mapping[str, Any], now: datetime) -> str:
    restarts, last = 0, None
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        restarts += int(container.get("restartCount") or 0)
        finished = _stamp(
            ((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        )
        if finished is not None and (last is None or finished > last):
            last = finished
    if restarts and last is not None:
        return f"{restarts} ({human_duration((now - last).total_seconds())} ago)"
    return str(restarts)


def _pod_readiness_gates(pod: Mapping[str, Any]) -> str:
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    if not gates:
        return _NONE
    met = sum(1 for g in gates if _has_condition(pod, str(g.get("conditionType"))))
    return f"{met}/{len(gates)}"


def _created_at(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


_COMPUTED: Mapping[str, Callable[[Mapping[str, Any]], Any]] = {
    "created-at": _created_at,
    "node-status": _node_status,
    "node-roles": _node_roles,
    "data-count": _data_count,
    "deployment-ready": _deployment_ready,
    "statefulset-ready": _statefulset_ready,
    "ingress-hosts": _ingress_hosts,
    "ingress-address": _ingress_address,
    "ingress-ports": _ingress_ports,
    "csr-duration": _csr_duration,
    "csr-condition": _csr_condition,
    "apiservice-service": _apiservice_service,
    "apiservice-available": _apiservice_available,
    "job-status": _job_status,
    "job-completions": _job_completions,
    "template-containers": _template_containers,
    "template-images": _template_images,
    "job-selector": _job_selector,
    "pod-ready": _pod_ready,
    "pod-status": _pod_status,
    "pod-readiness-gates": _pod_readiness_gates,
}
_COMPUTED_AT: Mapping[str, Callable[[Mapping[str, Any], datetime], Any]] = {
    "job-duration": _job_duration,
    "pod-restarts": _pod_restarts,
}
"""Cells that depend on the time of the request."""


def _accepts_table(accept: str) -> str | None:
    """The Table version (v1 or v1beta1) the Accept header asks for first, if any."""
    for media in accept.split(","):
        params = {}
        for part in media.split(";")[1:]:
            key, _, value = part.strip().partition("=")
            params[key.strip()] = value.strip()
        if params.get("as") == "Table" and params.get("g", "meta.k8s.io") == "meta.k8s.io":
            return params.get("v", "v1")
    return None


def maybe_table(
    request: web.Request, kind: KindInfo, payload: dict[str, Any]
) -> dict[str, Any] | None:
    """A ``Table`` for *payload* (one object or a ``<Kind>List``) when the request asks for one.

    Returns None when the Accept header does not ask for ``as=Table;g=meta.k8s.io``. The
    ``includeObject`` query parameter picks what each row carries: ``Metadata`` (default, a
    ``PartialObjectMetadata``), ``Object`` or ``None``.
    """
    table_version = _accepts_table(request.headers.get("Accept", ""))
    if table_version is None:
        return None
    include = request.query.get("includeObject", "Metadata")
    return table_for(
        kind, payload, include_object=include, api_version=f"meta.k8s.io/{table_version}"
    )


def table_for(
    kind: KindInfo,
    payload: Mapping[str, Any],
    *,
    include_object: str = "Metadata",
    api_version: str = "meta.k8s.io/v1",
    now: datetime | None = None,
) -> dict[str, Any]:
    """The ``Table`` the real server prints for *payload* (pure; *now* fixes Age in tests)."""
    now = now or datetime.now(UTC)
    is_list = isinstance(payload.get("items"), list)
    objects: Iterable[Mapping[str, Any]] = payload["items"] if is_list else [payload]
    columns = _columns(kind)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [_cell(obj, c, now) for c in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    metadata: dict[str, Any] = {}
    source_meta = payload.get("metadata") or {}
    if is_list:
        for key in ("resourceVersion", "continue", "remainingItemCount"):
            if source_meta.get(key) not in (None, ""):
                metadata[key] = source_meta[key]
    elif source_meta.get("resourceVersion"):
        metadata["resourceVersion"] = source_meta["resourceVersion"]
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": metadata,
        "columnDefinitions": [c["definition"] for c in columns],
        "rows": rows,
    }


def _columns(kind: KindInfo) -> list[dict[str, Any]]:
    columns: list[dict[str, Any]] = [{"definition": _NAME_COLUMN, "path": ".metadata.name"}]
    if kind.printer_columns:
        for col in kind.printer_columns:
            columns.append(
                {
                    "definition": {
                        "name": col.get("name", ""),
                        "type": col.get("type", "string"),
                        "format": col.get("format", ""),
                        "description": col.get("description", ""),
                        "priority": int(col.get("priority", 0)),
                    },
                    "path": col.get("jsonPath", ""),
                }
            )
        return columns
    for builtin in _BUILTIN_COLUMNS.get((kind.group, kind.kind), (_AGE,)):
        definition = (
            _AGE_COLUMN
            if builtin is _AGE
            else {
                "name": builtin.name,
                "type": "string" if builtin.source == "created-at" else builtin.type,
                "format": "",
                "description": builtin.name,
                "priority": builtin.priority,
            }
        )
        columns.append(
            {"definition": definition, "path": builtin.source, "default": builtin.default}
        )
    return columns


def _cell(obj: Mapping[str, Any], column: Mapping[str, Any], now: datetime) -> Any:
    path, definition = column["path"], column["definition"]
    computed = _COMPUTED.get(path)
    if computed is not None:
        return computed(obj)
    timed = _COMPUTED_AT.get(path)
    if timed is not None:
        return timed(obj, now)
    value = evaluate_jsonpath(obj, path)
    if value is None:
        return column.get("default")
    if definition["type"] == "date":
        try:
            stamp = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return str(value)
        return human_duration((now - stamp).total_seconds())
    if definition["type"] == "integer" and isinstance(value, int | float | str):
        try:
            return int(value)
        except ValueError:
            return value
    if definition["type"] == "string" and not isinstance(value, str):
        return (
            json.dumps(value, separators=(",", ":"))
            if isinstance(value, dict | list)
            else str(value)
        )
    return value


_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\?\(@\.([\w.]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]")


def evaluate_jsonpath(obj: Any, path: str) -> Any:
    """A CRD printer-column JSONPath (``.spec.x``, ``.a[0].b``, ``.c[?(@.type=="Ready")].s``).

    Returns the first match, or None when the path does not resolve.
    """
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    pos, current = 0, obj
    while pos < len(path):
        match = _SEGMENT.match(path, pos)
        if not match:
            return None
        pos = match.end()
        field, index, filter_key, filter_value = match.groups()
        if field is not None:
            current = current.get(field) if isinstance(current, Mapping) else None
        elif index is not None:
            idx = int(index)
            current = current[idx] if isinstance(current, list) and idx < len(current) else None
        else:
            current = next(
                (
                    item
                    for item in (current if isinstance(current, list) else [])
                    if str(evaluate_jsonpath(item, "." + filter_key)) == filter_value
                ),
                None,
            )
        if current is None:
            return None
    return current


def human_duration(seconds: float) -> str:
    """Kubernetes' short age format (``45s``, ``3m10s``, ``5h``, ``2d3h``, ``400d``)."""
    s = int(max(seconds, 0))
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    days = hours // 24
    if days < 365 * 2:
        return f"{days}d"
    if days < 365 * 8:
        rest = days % 365
        return f"{days // 365}y{rest}d" if rest else f"{days // 365}y"
    return f"{days // 365}y"
