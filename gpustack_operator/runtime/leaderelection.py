"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's ``leaderelection``).

One candidate holds the Lease by writing its identity and renewing ``renewTime`` every
``retry_period``. Others poll it and take over only once they have *seen the record unchanged*
for ``leaseDurationSeconds`` on their own monotonic clock: wall clocks of different machines
are never compared, so clock skew cannot make two leaders.

The leader that cannot renew within ``renew_deadline`` (or sees another holder) stops leading:
:meth:`LeaderElector.run` raises :class:`LeaderElectionLost` and the process is expected to exit
non-zero, as controller-runtime does, since its controllers may have stopped half-way.
On a clean stop (cancellation while leading) the Lease is released — holder emptied and
duration set to 1 s — so a standby takes over at its next retry instead of after expiry.

An answer the elector cannot read (the client's typed errors, or a Lease whose spec is not
a coordination.k8s.io/v1 LeaseSpec) is a failed attempt like any other: a candidate tries
again, a leader keeps trying until ``renew_deadline`` and then stops leading
(docs/runtime.md, "Leader election").
"""

from __future__ import annotations

import math
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio
import structlog

from gpustack_operator.runtime import metrics
from gpustack_operator.runtime.client import ApiError, Conflict, NotFound
from gpustack_operator.runtime.fence import LeaseFence
from gpustack_operator.runtime.resources import LEASES, Resource

__all__ = [
    "LeaderElectionConfig",
    "LeaderElectionLost",
    "LeaderElector",
    "LeaseClient",
    "default_identity",
    "lease_spec",
]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
# client-go jitters the candidate's retry period by up to this factor.
_JITTER = 0.2


def default_identity() -> str:
    """``<hostname>_<uuid>``: unique per process even when Pods share a hostname."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Where the Lease lives and the timings (seconds; client-go's defaults)."""

    lease_name: str
    lease_namespace: str
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    """How long a standby waits, having seen no renewal, before taking over."""
    renew_deadline: float = 10.0
    """How long the leader keeps trying to renew before it gives up leading."""
    retry_period: float = 2.0
    """How often the leader renews and standbys poll."""
    release_on_cancel: bool = True
    """Release the Lease on a clean stop so a standby takes over at once."""

    def __post_init__(self) -> None:
        if not self.lease_name or not self.lease_namespace or not self.identity:
            raise ValueError("leader election needs a lease name, a namespace and an identity")
        if not self.lease_duration > self.renew_deadline:
            raise ValueError(
                f"lease_duration ({self.lease_duration}s) must exceed renew_deadline "
                f"({self.renew_deadline}s), or a standby may take over while the leader renews"
            )
        if not self.renew_deadline > (1 + _JITTER) * self.retry_period:
            raise ValueError(
                f"renew_deadline ({self.renew_deadline}s) must exceed 1.2 * retry_period "
                f"({self.retry_period}s) so the leader gets more than one renewal attempt"
            )


class LeaderElectionLost(RuntimeError):
    """Leadership was lost while leading; the process should exit non-zero."""


class LeaseClient(Protocol):
    """The three verbs leader election needs (``Client`` provides them)."""

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON: ...

    async def create(self, res: Resource, body: JSON, namespace: str | None = None) -> JSON: ...

    async def replace(
        self, res: Resource, body: JSON, *, subresource: str | None = None
    ) -> JSON: ...


_INT32_MAX = 2**31 - 1
_INTEGER_FIELDS = ("leaseDurationSeconds", "leaseTransitions")


def lease_spec(lease: JSON) -> JSON:
    """The ``spec`` of *lease*, checked: an object of scalar fields whose ``holderIdentity``
    is a string and whose durations and counts are int32 (the LeaseSpec's types). Anything
    else raises :class:`ApiError` (reason ``InvalidLease``): the elector never works on a
    record it cannot read."""
    spec = lease.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, dict) or not isinstance(lease.get("metadata", {}), dict):
        raise _invalid("its spec or metadata is not an object")
    for key, value in spec.items():
        if value is not None and not isinstance(value, str | int | float | bool):
            raise _invalid(f"spec.{key} is not a scalar")
    holder = spec.get("holderIdentity")
    if holder is not None and not isinstance(holder, str):
        raise _invalid("spec.holderIdentity is not a string")
    for key in _INTEGER_FIELDS:
        value = spec.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT32_MAX
        ):
            raise _invalid(f"spec.{key} is not an int32")
    return dict(spec)


def _invalid(why: str) -> ApiError:
    return ApiError(
        f"the API server answered with a Lease the elector cannot read: {why}; treating it "
        "as a failed attempt",
        reason="InvalidLease",
    )


def _micro_time(now: datetime) -> str:
    """Kubernetes ``MicroTime``: RFC 3339 with microseconds, UTC."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _wall_now() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    """Campaigns for one Lease; see the module docstring.

    *clock* (monotonic seconds) judges expiry and deadlines; tests inject a fake one.
    """

    def __init__(
        self,
        client: LeaseClient,
        config: LeaderElectionConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = _wall_now,
    ) -> None:
        self.client = client
        self.config = config
        self._clock = clock
        self._wall_clock = wall_clock
        self._lease: JSON | None = None  # the last Lease read or written, with its RV
        self._observed_spec: JSON | None = None
        self._observed_time = 0.0
        self._is_leader = False
        self.elected = anyio.Event()
        """Set once this candidate first becomes the leader."""
        self.fence = LeaseFence(config.renew_deadline, clock=clock)
        """Open while the Lease is known held: each successful renewal opens it for
        ``renew_deadline`` seconds from when its request was sent (docs/runtime.md, "Write
        fence")."""
        self._gauge = metrics.LEADER_ELECTION_MASTER_STATUS.labels(config.lease_name)
        self._log = log.bind(
            lease=f"{config.lease_namespace}/{config.lease_name}", identity=config.identity
        )

    @property
    def is_leader(self) -> bool:
        """True while this candidate holds the Lease and renews it."""
        return self._is_leader

    @property
    def observed_holder(self) -> str:
        """The holder in the last Lease record seen ("" when free or never read)."""
        return str((self._observed_spec or {}).get("holderIdentity") or "")

    @property
    def observed_record(self) -> JSON:
        """A copy of the last Lease spec seen (empty when never read)."""
        return dict(self._observed_spec or {})

    async def run(self) -> None:
        """Campaign until elected, then renew until cancelled.

        Raises :class:`LeaderElectionLost` if leadership is lost; on cancellation while
        leading, releases the Lease first (when ``release_on_cancel``).
        """
        lost = False
        try:
            await self._acquire()
            self._set_leader(True)
            self._log.info("became the leader")
            self.elected.set()
            await self._renew()
        except LeaderElectionLost:
            lost = True
            raise
        finally:
            was_leader = self._is_leader
            self._set_leader(False)
            if was_leader and not lost and self.config.release_on_cancel:
                with anyio.CancelScope(shield=True):
                    await self._release()

    # -- the loops --------------------------------------------------------------------------

    async def _acquire(self) -> None:
        cfg = self.config
        self._log.info("waiting to acquire the lease")
        while True:
            with anyio.move_on_after(cfg.renew_deadline):
                if await self.try_acquire_or_renew():
                    return
            await anyio.sleep(cfg.retry_period * (1 + _JITTER * random.random()))

    async def _renew(self) -> None:
        cfg = self.config
        last_renew = self._clock()
        while True:
            await anyio.sleep(cfg.retry_period)
            renewed = False
            remaining = cfg.renew_deadline - (self._clock() - last_renew)
            with anyio.move_on_after(max(remaining, 0.0)):
                renewed = await self.try_acquire_or_renew()
            if renewed:
                last_renew = self._clock()
                continue
            holder = self.observed_holder
            if holder and holder != cfg.identity:
                raise LeaderElectionLost(
                    f"lease {cfg.lease_namespace}/{cfg.lease_name} is now held by {holder!r}; "
                    "stopping: another replica leads"
                )
            if self._clock() - last_renew >= cfg.renew_deadline:
                raise LeaderElectionLost(
                    f"could not renew lease {cfg.lease_namespace}/{cfg.lease_name} within "
                    f"{cfg.renew_deadline:g}s; stopping: check the API server and the RBAC "
                    "rules for coordination.k8s.io leases"
                )

    # -- one attempt ----------------------------------------------------------------------

    async def try_acquire_or_renew(self) -> bool:
        """Read the Lease and take or renew it if free, expired or ours; True on success."""
        cfg = self.config
        started = self._clock()  # the fence counts from before the request is sent
        now = _micro_time(self._wall_clock())
        duration = max(1, math.ceil(cfg.lease_duration))
        try:
            lease = await self.client.get(LEASES, cfg.lease_name, cfg.lease_namespace)
        except NotFound:
            body: JSON = {
                "apiVersion": LEASES.api_version,
                "kind": LEASES.kind,
                "metadata": {"name": cfg.lease_name, "namespace": cfg.lease_namespace},
                "spec": {
                    "holderIdentity": cfg.identity,
                    "leaseDurationSeconds": duration,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            }
            try:
                created = await self.client.create(LEASES, body, cfg.lease_namespace)
                self._observe(created)
            except ApiError as err:  # AlreadyExists: another candidate was faster
                self._log.debug("could not create the lease", error=str(err))
                return False
            self.fence.renewed(started)
            return True
        except ApiError as err:
            self._log.warning("could not read the lease", error=str(err), status=err.status)
            return False

        try:
            self._observe(lease)
        except ApiError as err:
            self._log.warning("could not read the lease", error=str(err), reason=err.reason)
            return False
        spec = self._observed_spec or {}
        holder = str(spec.get("holderIdentity") or "")
        held_for = float(spec.get("leaseDurationSeconds") or duration)
        if holder and holder != cfg.identity and self._observed_time + held_for > self._clock():
            return False  # held by another and not yet expired by our own clock

        new_spec = dict(spec)
        if holder != cfg.identity:
            new_spec["acquireTime"] = now
            # As client-go: any change of holder counts, taking a released lease included.
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        new_spec.update(holderIdentity=cfg.identity, leaseDurationSeconds=duration, renewTime=now)
        body = {**lease, "spec": new_spec}  # the record read, only its spec replaced
        try:
            updated = await self.client.replace(LEASES, body)
            self._observe(updated)
        except Conflict:
            self._log.debug("lease changed while updating it; will retry")
            return False
        except ApiError as err:
            self._log.warning("could not update the lease", error=str(err), status=err.status)
            return False
        if holder != cfg.identity:
            self._log.info("acquired the lease", previous_holder=holder or None)
        self.fence.renewed(started)
        return True

    async def _release(self) -> None:
        """Empty the holder (duration 1 s) so a standby need not wait for expiry.

        The renewal cancelled by the shutdown may have reached the server without its answer
        being read, so the Lease held here can be one version behind: on a conflict the
        Lease is read again and released if it is still this replica's."""
        cfg = self.config
        if self._lease is None or self.observed_holder != cfg.identity:
            return
        try:
            with anyio.fail_after(max(cfg.retry_period, 1.0)):
                try:
                    await self._replace_released(self._lease)
                except Conflict:
                    self._observe(
                        await self.client.get(LEASES, cfg.lease_name, cfg.lease_namespace)
                    )
                    if self.observed_holder != cfg.identity:
                        return  # taken since: nothing of ours to release
                    await self._replace_released(self._lease)
        except (ApiError, TimeoutError) as err:
            self._log.warning(
                "could not release the lease; standbys take over once it expires",
                error=str(err) or type(err).__name__,
            )
            return
        self._log.info("released the lease")

    async def _replace_released(self, lease: JSON) -> None:
        """Write *lease* (as read) with its holder emptied and its duration 1 s."""
        now = _micro_time(self._wall_clock())
        body = dict(lease)
        body["spec"] = {
            **lease_spec(lease),
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
        }
        self._observe(await self.client.replace(LEASES, body))

    # -- bookkeeping --------------------------------------------------------------------------

    def _observe(self, lease: JSON) -> None:
        """Record *lease* as the last one seen; raises :class:`ApiError` when it cannot be
        read (:func:`lease_spec`), recording nothing."""
        spec = lease_spec(lease)
        self._lease = lease
        if spec != self._observed_spec:
            before = self.observed_holder
            self._observed_spec = spec
            self._observed_time = self._clock()
            if self.observed_holder != before and self.observed_holder != self.config.identity:
                self._log.info("observed a new leader", leader=self.observed_holder or None)

    def _set_leader(self, leading: bool) -> None:
        if not leading:
            self.fence.close()
        self._is_leader = leading
        self._gauge.set(1 if leading else 0)
