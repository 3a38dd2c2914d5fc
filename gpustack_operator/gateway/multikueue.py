"""The gateway's MultiKueue mode: keep a manager cluster's MultiKueue objects in step with the
pools of the member clusters the gateway watches (docs/multikueue.md).

Every ``sync_interval`` seconds one pass reads the members' cached ClusterQueues and
LocalQueues (the gateway's informers), computes the manager's objects with
:func:`gpustack_operator.domain.chain.multikueue.manager_objects`, and applies the difference to the
manager: objects missing or changed are server-side applied, objects labelled as the mode's own
(``app.kubernetes.io/managed-by=gpustack-operator-multikueue``) that are no longer wanted are
deleted. Objects without that label are never changed or deleted: a same-named one is reported
and left alone. A member whose kubeconfig Kueue would refuse gets no MultiKueueCluster (the
reason is logged and kept in :attr:`MultiKueueSync.refused`); a member unreachable for longer
than the policy's ``unreachable_after`` (measured with the clock it is given) keeps its
MultiKueueCluster but its pools leave the sums until it is reachable again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import anyio
import structlog

from gpustack_operator.domain.chain.kueue import KUEUE_GROUP, KueueVersion
from gpustack_operator.domain.chain.multikueue import (
    MANAGER_SELECTOR,
    KubeconfigRefused,
    Member,
    MultiKueuePolicy,
    kueue_kubeconfig,
    manager_objects,
    member_pools,
)
from gpustack_operator.gateway.cluster import ClusterSpec, ClusterStatus
from gpustack_operator.gateway.config import parse_cluster_flag
from gpustack_operator.gateway.gateway import Gateway
from gpustack_operator.gateway.kinds import pick_version
from gpustack_operator.gateway.kubeconfig import ConfigError, read_kubeconfig
from gpustack_operator.kubeconfig import connect as connect_checked
from gpustack_operator.runtime.backoff import Backoff, BackoffPolicy
from gpustack_operator.runtime.client import ApiError, Client, NotFound
from gpustack_operator.runtime.clock import MONOTONIC_CLOCK, Clock
from gpustack_operator.runtime.resources import NAMESPACES, SECRETS, Resource

__all__ = [
    "DEFAULT_SYNC_INTERVAL",
    "FIELD_MANAGER",
    "ManagerSettings",
    "MultiKueueSync",
    "manager_resources",
    "member_kubeconfig_specs",
]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
FIELD_MANAGER: Final = "gpustack-operator-multikueue"
DEFAULT_SYNC_INTERVAL: Final = 5.0
_KUEUE_KINDS: Final = (
    ("MultiKueueCluster", "multikueueclusters"),
    ("MultiKueueConfig", "multikueueconfigs"),
    ("AdmissionCheck", "admissionchecks"),
    ("ResourceFlavor", "resourceflavors"),
    ("ClusterQueue", "clusterqueues"),
    ("LocalQueue", "localqueues"),
)


def manager_resources(version: KueueVersion) -> dict[str, Resource]:
    """The kinds the mode writes, by kind, in the order they are applied (deleted: reversed)."""
    resources = {"Secret": SECRETS}
    for kind, plural in _KUEUE_KINDS:
        resources[kind] = Resource(KUEUE_GROUP, version.value, kind, plural, kind == "LocalQueue")
    return resources


@dataclass(frozen=True)
class ManagerSettings:
    """The mode's configuration (``worker-gateway --multikueue-*``)."""

    manager: ClusterSpec
    """The manager cluster (its kubeconfig and context)."""
    policy: MultiKueuePolicy = field(default_factory=MultiKueuePolicy)
    member_kubeconfigs: Mapping[str, ClusterSpec] = field(default_factory=dict)
    """Per member, the kubeconfig Kueue should use (a ServiceAccount token); default: the one
    the gateway reads the member with."""
    sync_interval: float = DEFAULT_SYNC_INTERVAL
    """Seconds between passes: the bound on how late a member's change reaches the manager."""
    request_timeout: float = 15.0
    connect_backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    clock: Clock = MONOTONIC_CLOCK
    """Measures how long a member has been unreachable (tests drive one)."""


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _contains(actual: object, wanted: object) -> bool:
    """Whether *actual* holds everything *wanted* says (the API server may add defaults)."""
    if isinstance(wanted, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and _contains(actual[k], v) for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(wanted)
            and all(_contains(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return actual == wanted


def _up_to_date(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    if not _contains(_labels(existing), _labels(desired)):
        return False
    return all(
        _contains(existing.get(key), value)
        for key, value in desired.items()
        if key not in ("apiVersion", "kind", "metadata")
    )


class MultiKueueSync:
    """Runs the mode until cancelled; see the module docstring."""

    def __init__(self, gateway: Gateway, settings: ManagerSettings) -> None:
        self.gateway = gateway
        self.settings = settings
        self.policy = settings.policy
        self.refused: dict[str, str] = {}
        """Members whose kubeconfig Kueue would refuse, with the reason and the fix."""
        self.unreachable_since: dict[str, float] = {}
        """When each member was first seen unreachable (by the settings' clock)."""
        self.excluded: set[str] = set()
        """Members unreachable for longer than the policy allows: their pools left the sums."""
        self.foreign: dict[tuple[str, str, str], str] = {}
        """(kind, namespace, name) of same-named objects the mode does not own, left alone."""
        self.last_error = ""
        self.passes = 0
        """Completed passes (the manager holds what the members had at the last one)."""
        self._log = log.bind(manager=settings.manager.name)

    # --- the members ------------------------------------------------------------------------

    def _kubeconfig(self, name: str, spec: ClusterSpec) -> Mapping[str, Any] | None:
        source = self.settings.member_kubeconfigs.get(name, spec)
        where = f"the kubeconfig of member {name!r} ({source.kubeconfig or 'default'})"
        try:
            if source.kubeconfig is None:
                raise KubeconfigRefused(
                    f"{where}: no file; give Kueue one with --multikueue-member-kubeconfig "
                    f"{name}=FILE"
                )
            document = kueue_kubeconfig(read_kubeconfig(source.kubeconfig), source.context, where)
        except (KubeconfigRefused, ConfigError) as exc:
            if self.refused.get(name) != str(exc):
                self._log.error("multikueue_member_refused", member=name, error=str(exc))
            self.refused[name] = str(exc)
            return None
        self.refused.pop(name, None)
        return document

    def members(self) -> list[Member]:
        """The members as the manager should see them now (see the module docstring)."""
        now = self.settings.clock()
        members = []
        for name in sorted(self.gateway.clusters):
            runner = self.gateway.clusters[name]
            if runner.status is ClusterStatus.UNREACHABLE:
                since = self.unreachable_since.setdefault(name, now)
                gone = now - since >= self.policy.unreachable_after
            else:
                self.unreachable_since.pop(name, None)
                gone = False
            if gone and name not in self.excluded:
                self._log.warning(
                    "multikueue_member_left_sums",
                    member=name,
                    unreachable_for=round(now - self.unreachable_since[name], 3),
                )
            elif not gone and name in self.excluded:
                self._log.info("multikueue_member_back", member=name)
            (self.excluded.add if gone else self.excluded.discard)(name)
            kubeconfig = self._kubeconfig(name, runner.spec)
            if kubeconfig is None:
                continue
            pools = (
                ()
                if gone
                else member_pools(runner.objects("clusterqueues"), runner.objects("localqueues"))
            )
            members.append(Member(name, kubeconfig, pools))
        return members

    # --- running ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect to the manager (with backoff), then sync every ``sync_interval`` seconds."""
        backoff = Backoff(self.settings.connect_backoff)
        while True:
            try:
                await self._serve(backoff)
            except Exception as exc:  # unreachable manager, no Kueue, refused writes: retried
                self.last_error = str(exc) or type(exc).__name__
                delay = backoff.next()
                self._log.warning("multikueue_sync_failed", error=self.last_error, delay=delay)
                await anyio.sleep(delay)

    async def _serve(self, backoff: Backoff) -> None:
        client = await connect_checked(
            self.settings.manager.kubeconfig,
            self.settings.manager.context,
            timeout=self.settings.request_timeout,
        )
        try:
            version = await self._discover(client)
            self.policy = replace(self.settings.policy, kueue_version=version)
            while True:
                await self.sync_once(client)
                backoff.reset()
                await anyio.sleep(self.settings.sync_interval)
        finally:
            with anyio.CancelScope(shield=True):
                await client.close()

    async def _discover(self, client: Client) -> KueueVersion:
        with anyio.fail_after(self.settings.request_timeout):
            served = await client.served_versions(KUEUE_GROUP)
        version = pick_version(served)
        if version is None:
            raise ApiError(
                f"the manager cluster serves no Kueue API ({KUEUE_GROUP} v1beta2 or v1beta1): "
                "install Kueue there with MultiKueue on",
                reason="KueueNotServed",
            )
        return version

    async def _namespaces(self, client: Client) -> list[str]:
        listed = await client.list_all(NAMESPACES)
        return [
            _key(ns)[1]
            for ns in listed.items
            if (ns.get("status") or {}).get("phase") != "Terminating"
        ]

    async def sync_once(self, client: Client) -> None:
        """One pass: read the members, compute, apply the difference, delete what is ours and
        no longer wanted."""
        resources = manager_resources(self.policy.kueue_version)
        desired = manager_objects(self.members(), self.policy, await self._namespaces(client))
        existing = {kind: await self._owned(client, res) for kind, res in resources.items()}
        wanted: dict[str, set[tuple[str, str]]] = {kind: set() for kind in resources}
        for obj in desired:
            kind = obj["kind"]
            wanted[kind].add(_key(obj))
            current = existing[kind].get(_key(obj))
            if current is not None and _up_to_date(current, obj):
                continue
            await self._apply(client, resources[kind], obj, owned=current is not None)
        for kind in reversed(list(resources)):
            for key, obj in existing[kind].items():
                if key not in wanted[kind]:
                    await self._delete(client, resources[kind], obj)
        self.last_error = ""
        self.passes += 1

    async def _owned(self, client: Client, res: Resource) -> dict[tuple[str, str], JSON]:
        namespace = self.policy.kueue_namespace if res is SECRETS else None
        with anyio.fail_after(self.settings.request_timeout):
            listed = await client.list_all(
                res, namespace=namespace, label_selector=MANAGER_SELECTOR
            )
        return {_key(obj): obj for obj in listed.items}

    async def _apply(self, client: Client, res: Resource, obj: JSON, *, owned: bool) -> None:
        namespace, name = _key(obj)
        if not owned:
            try:
                await client.get(res, name, namespace or None)
            except NotFound:
                pass
            else:
                where = (obj["kind"], namespace, name)
                if where not in self.foreign:
                    self.foreign[where] = "exists without the mode's label"
                    self._log.warning(
                        "multikueue_object_not_ours",
                        kind=obj["kind"],
                        namespace=namespace or None,
                        name=name,
                        fix="delete it, or label it app.kubernetes.io/managed-by="
                        "gpustack-operator-multikueue to let the gateway manage it",
                    )
                return
        self.foreign.pop((obj["kind"], namespace, name), None)
        with anyio.fail_after(self.settings.request_timeout):
            await client.apply(res, obj, field_manager=FIELD_MANAGER, force=True)
        self._log.info(
            "multikueue_applied", kind=obj["kind"], namespace=namespace or None, name=name
        )

    async def _delete(self, client: Client, res: Resource, obj: JSON) -> None:
        namespace, name = _key(obj)
        uid = (obj.get("metadata") or {}).get("uid")
        try:
            with anyio.fail_after(self.settings.request_timeout):
                await client.delete(
                    res, name, namespace or None, preconditions={"uid": uid} if uid else None
                )
        except NotFound:
            return
        self._log.info(
            "multikueue_deleted", kind=obj["kind"], namespace=namespace or None, name=name
        )


def member_kubeconfig_specs(values: Sequence[str]) -> dict[str, ClusterSpec]:
    """``--multikueue-member-kubeconfig NAME=KUBECONFIG[:CONTEXT]`` values, by member name."""
    specs: dict[str, ClusterSpec] = {}
    for value in values:
        spec = parse_cluster_flag(value)
        if spec.name in specs:
            raise ConfigError(f"--multikueue-member-kubeconfig names {spec.name!r} twice")
        specs[spec.name] = spec
    return specs
