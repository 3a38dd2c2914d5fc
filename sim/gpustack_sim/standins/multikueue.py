"""A stand-in for Kueue's MultiKueue controllers in a simulated manager cluster (a test double,
not Kueue; docs/multikueue.md, "In the simulator", lists each rule with the Kueue v0.19.2
behaviour it follows and where it differs).

It reads what real MultiKueue reads, in the manager: MultiKueueClusters and their kubeconfig
Secrets in Kueue's namespace, the MultiKueueConfigs their AdmissionChecks name
(``controllerName: kueue.x-k8s.io/multikueue``), and the Workloads holding quota in a queue
with such a check. It talks to each member cluster over HTTP with that kubeconfig (the members
are other simulated servers, in this process or another): it copies a Workload to every
member of the check's config, keeps the first copy a member admits (``status.clusterName``,
the check ``Ready``), deletes the other copies, creates the Job's copy in the winner, copies
the winner's Job status back to the manager's Job and finishes the manager's Workload when the
copy finishes; a finished Workload's copies are deleted everywhere. The Kueue stand-in of the
manager reserves quota, waits for the check and starts the manager's Job, which runs nothing
there (its ``spec.managedBy`` is MultiKueue's).

Members change without telling the manager, so besides its store events the loop looks every
*period* seconds (a test double's polling, where Kueue watches each member).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import structlog
import yaml

from gpustack_operator.runtime.client import Client
from gpustack_operator.runtime.errors import AlreadyExists, ApiError, NotFound
from gpustack_operator.runtime.resources import Resource
from gpustack_sim.apiserver.store import now_rfc3339
from gpustack_sim.standins.kueue import MULTIKUEUE_CONTROLLER, PREBUILT_WORKLOAD_ANNOTATION
from gpustack_sim.standins.standin import StoreLoop

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

__all__ = ["ORIGIN_LABEL", "MultiKueueStandIn", "kubeconfig_problem"]

log = structlog.get_logger(__name__)

KUEUE_API: Final = "kueue.x-k8s.io/v1beta2"
ORIGIN_LABEL: Final = "kueue.x-k8s.io/multikueue-origin"
JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
DEFAULT_ORIGIN: Final = "multikueue"
"""Kueue's default ``multiKueue.origin`` (``apis/config/v1beta2/defaults.go``)."""
_REMOTE_WORKLOADS: Final = Resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads", True)
_REMOTE_JOBS: Final = Resource("batch", "v1", "Job", "jobs", namespaced=True)
_WATCHED: Final = frozenset(
    {"MultiKueueCluster", "MultiKueueConfig", "AdmissionCheck", "Workload", "Job"}
)
_TEMPLATE_LABELS: Final = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)
"""Pod-template labels the Job controller adds, dropped from a Job's copy (the adapter's
``cleanLabels``)."""


def kubeconfig_problem(text: str) -> tuple[str, str] | None:
    """``(reason, message)`` when Kueue v0.19.2 would refuse this kubeconfig for a
    MultiKueueCluster (``validateKubeconfig`` and ``validateRestConfig`` in
    ``pkg/controller/admissionchecks/multikueue/multikueuecluster.go``), else None."""
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return "BadKubeConfig", f"failed to parse kubeconfig(apiconfig): {exc}"
    if not isinstance(config, Mapping):
        return "BadKubeConfig", "failed to parse kubeconfig(apiconfig): not a mapping"
    for entry in config.get("users") or []:
        user = (entry or {}).get("user") or {}
        if user.get("tokenFile"):
            return "InsecureKubeConfig", "tokenFile is not allowed"
    for entry in config.get("clusters") or []:
        name, cluster = (entry or {}).get("name"), (entry or {}).get("cluster") or {}
        if cluster.get("insecure-skip-tls-verify"):
            return (
                "InsecureKubeConfig",
                f"insecure TLS verification is not allowed for cluster {name}",
            )
        if cluster.get("certificate-authority"):
            return (
                "InsecureKubeConfig",
                "certificate-authority file paths are not allowed, use "
                f"certificate-authority-data for cluster {name}",
            )
        if not cluster.get("server"):
            return "InsecureKubeConfig", f"server URL is required for cluster {name}"
    for entry in config.get("users") or []:
        user = (entry or {}).get("user") or {}
        if user.get("username") or user.get("password"):
            return "InsecureKubeConfig", "basic auth is not allowed"
        if user.get("exec"):
            return "InsecureKubeConfig", "exec plugins are not allowed"
        if user.get("auth-provider"):
            return "InsecureKubeConfig", "auth providers are not allowed"
    return None


def _condition(obj: Mapping[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found.get("type") == kind:
            return dict(found)
    return None


def _true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    return (_condition(obj, kind) or {}).get("status") == "True"


def _with_condition(
    status: Mapping[str, Any], kind: str, value: str, reason: str, message: str
) -> dict[str, Any]:
    """*status* with one condition set (its transition time kept when the value stays)."""
    out = copy.deepcopy(dict(status))
    old = next((c for c in out.get("conditions") or [] if c.get("type") == kind), None)
    since = old["lastTransitionTime"] if old and old.get("status") == value else now_rfc3339()
    out["conditions"] = [c for c in out.get("conditions") or [] if c.get("type") != kind] + [
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
        }
    ]
    return out


class _Member:
    """One MultiKueueCluster's connection: the kubeconfig it was made from and its client."""

    def __init__(self, text: str, client: Client, path: Path) -> None:
        self.text = text
        self.client = client
        self.path = path


class MultiKueueStandIn(StoreLoop):
    """See the module docstring. ``async with MultiKueueStandIn(sim, origin=...):``."""

    name = "sim-multikueue"

    def __init__(
        self,
        sim: SimServer,
        *,
        origin: str = DEFAULT_ORIGIN,
        namespace: str = "kueue-system",
        period: float = 0.2,
    ) -> None:
        super().__init__(sim)
        self.origin = origin
        self.namespace = namespace
        self.period = period
        self._members: dict[str, _Member] = {}
        self._dir: Path | None = None
        """Where the members' kubeconfigs are written (0600), made at the first connection."""

    # --- lifecycle --------------------------------------------------------------------------

    def on_event(self, event_type: str, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        namespace = (obj.get("metadata") or {}).get("namespace")
        if kind in _WATCHED or (kind == "Secret" and namespace == self.namespace):
            self._wake.set()

    async def stop(self) -> None:
        await super().stop()
        for member in self._members.values():
            with contextlib.suppress(Exception):
                await member.client.close()
        self._members.clear()
        if self._dir is not None:
            for path in self._dir.glob("*"):
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self._dir.rmdir()
            self._dir = None

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.period)
            self._wake.clear()
            try:
                await self._pass()
            except Exception:  # a bug must not stop the stand-in
                log.exception("multikueue stand-in failed")

    # --- one pass ---------------------------------------------------------------------------

    def _list(self, kind: str) -> list[dict[str, Any]]:
        if self.sim.registry.by_kind(KUEUE_API, kind) is None:
            return []
        return self.sim.store.list(KUEUE_API, kind)

    async def _pass(self) -> None:
        active = {}
        for cluster in self._list("MultiKueueCluster"):
            active[cluster["metadata"]["name"]] = await self._connect(cluster)
        configs = {c["metadata"]["name"]: c for c in self._list("MultiKueueConfig")}
        checks: dict[str, list[str]] = {}  # AdmissionCheck -> its clusters, in config order
        for check in self._list("AdmissionCheck"):
            spec = check.get("spec") or {}
            if spec.get("controllerName") != MULTIKUEUE_CONTROLLER:
                continue
            name = (spec.get("parameters") or {}).get("name")
            config = configs.get(str(name))
            clusters = [str(c) for c in ((config or {}).get("spec") or {}).get("clusters") or []]
            checks[check["metadata"]["name"]] = clusters
            self._check_status(check, config, clusters, active)
        for workload in self._list("Workload"):
            states = (workload.get("status") or {}).get("admissionChecks") or []
            mine = [s for s in states if s.get("name") in checks]
            if mine:
                await self._dispatch(workload, mine[0], checks[str(mine[0]["name"])])

    # --- clusters and checks ----------------------------------------------------------------

    async def _connect(self, cluster: Mapping[str, Any]) -> bool:
        """Connect to one member as its kubeconfig says; its ``Active`` condition says how
        that went, in Kueue's reasons and messages. True when connected."""
        name = cluster["metadata"]["name"]
        source = ((cluster.get("spec") or {}).get("clusterSource") or {}).get("kubeConfig") or (
            (cluster.get("spec") or {}).get("kubeConfig")  # v1beta1's place
        )
        reason, message = "Active", "Connected"
        text = ""
        if not source or source.get("locationType", "Secret") != "Secret":
            reason, message = "BadKubeConfig", "load client config failed: only Secret locations"
        else:
            secret = self.sim.store.get("v1", "Secret", str(source.get("location")), self.namespace)
            data = ((secret or {}).get("data") or {}).get("kubeconfig")
            if secret is None or not data:
                reason = "BadKubeConfig"
                message = (
                    f'load client config failed: secrets "{source.get("location")}" not found'
                    if secret is None
                    else "load client config failed: key kubeconfig not found in the secret"
                )
            else:
                text = base64.b64decode(data).decode(errors="replace")
                problem = kubeconfig_problem(text)
                if problem is not None:
                    reason, message = problem[0], f"load client config failed: {problem[1]}"
        connected = reason == "Active"
        if connected:
            try:
                await self._client(name, text)
            except Exception as exc:
                connected, reason, message = False, "ClientConnectionFailed", str(exc)
        if not connected:
            await self._forget(name)
        status = _with_condition(
            cluster.get("status") or {}, "Active", "True" if connected else "False", reason, message
        )
        if status != (cluster.get("status") or {}):
            with contextlib.suppress(ApiError):
                self.sim.store.update_status({**cluster, "status": status})
        return connected

    async def _client(self, name: str, text: str) -> Client:
        member = self._members.get(name)
        if member is not None and member.text == text:
            return member.client
        await self._forget(name)
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="gpustack-sim-multikueue-"))
        path = self._dir / f"{name}.kubeconfig"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        client = await Client.connect(str(path), timeout=10)
        self._members[name] = _Member(text, client, path)
        return client

    async def _forget(self, name: str) -> None:
        member = self._members.pop(name, None)
        if member is not None:
            with contextlib.suppress(Exception):
                await member.client.close()

    def _check_status(
        self,
        check: Mapping[str, Any],
        config: Mapping[str, Any] | None,
        clusters: list[str],
        active: Mapping[str, bool],
    ) -> None:
        """The AdmissionCheck's ``Active`` condition as Kueue's MultiKueue sets it
        (``admissioncheck.go``)."""
        value, reason, message = "True", "Active", "The admission check is active"
        if config is None:
            name = ((check.get("spec") or {}).get("parameters") or {}).get("name")
            value, reason = "False", "BadConfig"
            message = (
                "Cannot load the AdmissionChecks parameters: "
                f'multikueueconfigs.kueue.x-k8s.io "{name}" not found'
            )
        else:
            missing = [c for c in clusters if c not in active]
            inactive = [c for c in clusters if c in active and not active[c]]
            if missing or inactive:
                value, reason = (
                    ("True", "SomeActiveClusters")
                    if len(missing) + len(inactive) < len(clusters)
                    else ("False", "NoUsableClusters")
                )
                parts = [f"Missing clusters: [{' '.join(missing)}]"] if missing else []
                if inactive:
                    parts.append(f"Inactive clusters: [{' '.join(inactive)}]")
                message = ", ".join(parts)
        status = _with_condition(check.get("status") or {}, "Active", value, reason, message)
        if status != (check.get("status") or {}):
            with contextlib.suppress(ApiError):
                self.sim.store.update_status({**check, "status": status})

    # --- Workloads --------------------------------------------------------------------------

    async def _dispatch(
        self, workload: dict[str, Any], state: Mapping[str, Any], clusters: list[str]
    ) -> None:
        meta = workload["metadata"]
        status = workload.get("status") or {}
        namespace, name = meta["namespace"], meta["name"]
        if _true(workload, "Finished") or not _true(workload, "QuotaReserved"):
            for cluster in clusters:
                await self._remove_copies(cluster, namespace, name, self._job_name(workload))
            return
        winner = status.get("clusterName")
        if not winner:
            await self._nominate(workload, state, clusters)
            return
        member = self._members.get(str(winner))
        if member is None:
            return  # the winner is unreachable: Kueue waits workerLostTimeout; the stand-in waits
        await self._follow(member, workload)

    def _job_name(self, workload: Mapping[str, Any]) -> str | None:
        for owner in workload["metadata"].get("ownerReferences") or []:
            if owner.get("kind") == "Job":
                return str(owner.get("name"))
        return None

    async def _nominate(
        self, workload: dict[str, Any], state: Mapping[str, Any], clusters: list[str]
    ) -> None:
        """Copy the Workload to every reachable member of the config; the first whose copy is
        admitted wins (in config order, as the stand-in reads them), the others' copies go."""
        meta = workload["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        admitted: list[str] = []
        for cluster in clusters:
            member = self._members.get(cluster)
            if member is None:
                continue
            try:
                remote = await member.client.get(_REMOTE_WORKLOADS, name, namespace)
            except NotFound:
                with contextlib.suppress(AlreadyExists):
                    await member.client.create(_REMOTE_WORKLOADS, self._workload_copy(workload))
                continue
            except ApiError as exc:
                log.info("multikueue stand-in: member unreachable", cluster=cluster, error=str(exc))
                continue
            if _true(remote, "Admitted"):
                admitted.append(cluster)
        if not admitted:
            return
        winner = admitted[0]
        for cluster in clusters:
            if cluster != winner:
                await self._remove_copies(cluster, namespace, name, self._job_name(workload))
        status = copy.deepcopy(workload.get("status") or {})
        status["clusterName"] = winner
        status.pop("nominatedClusterNames", None)
        status["admissionChecks"] = [
            {
                **c,
                "state": "Ready",
                "message": f'The workload was admitted on "{winner}"',
                "lastTransitionTime": now_rfc3339(),
            }
            if c.get("name") == state.get("name")
            else c
            for c in status.get("admissionChecks") or []
        ]
        self.sim.store.update_status({**workload, "status": status})
        log.info("multikueue stand-in dispatched", workload=name, cluster=winner)

    def _workload_copy(self, workload: Mapping[str, Any]) -> dict[str, Any]:
        """The manager's Workload for a member: its spec, labels (less the Job's uid) and
        annotations, the origin label; no owner, no status (``cloneForCreate``)."""
        meta = workload["metadata"]
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != JOB_UID_LABEL}
        labels[ORIGIN_LABEL] = self.origin
        out_meta: dict[str, Any] = {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
        }
        if meta.get("annotations"):
            out_meta["annotations"] = dict(meta["annotations"])
        return {
            "apiVersion": KUEUE_API,
            "kind": "Workload",
            "metadata": out_meta,
            "spec": copy.deepcopy(workload.get("spec") or {}),
        }

    def _job_copy(self, job: Mapping[str, Any], workload: str) -> dict[str, Any]:
        """The manager's Job for the winning member: its spec less ``selector`` and
        ``managedBy``, the Job controller's template labels dropped, the prebuilt Workload
        and origin labels added (the Job adapter's ``SyncJob``). Created suspended, as the
        member's Kueue webhook would suspend it."""
        meta = job["metadata"]
        labels = dict(meta.get("labels") or {})
        labels[ORIGIN_LABEL] = self.origin
        annotations = {**(meta.get("annotations") or {}), PREBUILT_WORKLOAD_ANNOTATION: workload}
        spec = copy.deepcopy(job.get("spec") or {})
        spec.pop("selector", None)
        spec.pop("managedBy", None)
        spec["suspend"] = True
        template_meta = (spec.get("template") or {}).get("metadata") or {}
        for key in _TEMPLATE_LABELS:
            (template_meta.get("labels") or {}).pop(key, None)
        out_meta = {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
        }
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": out_meta, "spec": spec}

    async def _follow(self, member: _Member, workload: dict[str, Any]) -> None:
        """The winner runs the Job: its copy is made once the manager's Workload is admitted;
        its status comes back to the manager's Job; its Workload's end finishes the manager's."""
        meta = workload["metadata"]
        namespace = meta["namespace"]
        job_name = self._job_name(workload)
        job = self.sim.store.get("batch/v1", "Job", job_name, namespace) if job_name else None
        if job is None or not _true(workload, "Admitted"):
            return
        try:
            remote_job = await member.client.get(_REMOTE_JOBS, job["metadata"]["name"], namespace)
        except NotFound:
            with contextlib.suppress(AlreadyExists):
                await member.client.create(_REMOTE_JOBS, self._job_copy(job, meta["name"]))
            return
        remote_status = remote_job.get("status") or {}
        if remote_status and remote_status != (job.get("status") or {}):
            self.sim.store.update_status({**job, "status": copy.deepcopy(remote_status)})
        try:
            remote = await member.client.get(_REMOTE_WORKLOADS, meta["name"], namespace)
        except NotFound:
            return
        finished = _condition(remote, "Finished")
        if finished is not None and finished.get("status") == "True":
            current = self.sim.store.get(KUEUE_API, "Workload", meta["name"], namespace)
            if current is not None and not _true(current, "Finished"):
                status = _with_condition(
                    current.get("status") or {},
                    "Finished",
                    "True",
                    str(finished.get("reason") or "Succeeded"),
                    str(finished.get("message") or ""),
                )
                self.sim.store.update_status({**current, "status": status})

    async def _remove_copies(
        self, cluster: str, namespace: str, workload: str, job: str | None
    ) -> None:
        """Delete this manager's copies (by the origin label) of a Workload and its Job."""
        member = self._members.get(cluster)
        if member is None:
            return
        targets = [(_REMOTE_WORKLOADS, workload)] + ([(_REMOTE_JOBS, job)] if job else [])
        for resource, name in targets:
            try:
                remote = await member.client.get(resource, name, namespace)
            except ApiError:
                continue
            if (remote["metadata"].get("labels") or {}).get(ORIGIN_LABEL) != self.origin:
                continue
            with contextlib.suppress(ApiError):
                await member.client.delete(
                    resource, name, namespace, propagation_policy="Background"
                )
