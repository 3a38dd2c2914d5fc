"""The declared pools in force in the worker (docs/autoscaling.md, "In the worker").

The declared-pool reconciler (``controllers/declaredpool.py``) reads the pool objects and
declarations and keeps the :class:`PoolRegistry`: the sound pools, which of their
provisioning checks a queue may use, and which pool claims a Node. The flavor, Cohort and
ClusterQueue reconcilers each write their own kind of a pool's chain from it, built by the
per-pool function ``plan`` uses (``domain.poolchain.declared_pool_objects``), so every Kueue
kind has one writer (docs/architecture.md, "Who writes what"). A change of the registry
goes out as a typed value, :class:`PoolsChanged`, on a channel the wiring owns
(``runtime.channel``); each of those controllers maps it to the names it must look at again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpustack_operator.domain.chain.declaredpools import (
    DeclaredPool,
    PoolResult,
    is_pool_chain_object,
)
from gpustack_operator.domain.chain.kueue import KueueVersion
from gpustack_operator.domain.chain.poolchain import (
    DeclaredPoolObjects,
    ProvisioningSettings,
    declared_pool_objects,
    has_stale_checks,
    without_admission_checks,
)
from gpustack_operator.domain.node.nodemodel import Part
from gpustack_operator.domain.nodeview import is_deleting, name_of
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.resources import Resource
from gpustack_operator.worker.common import Writer, is_managed_object, is_up_to_date

BY_DECLARED_POOL: Final = "declared-pool"
"""Node index: the key of the sound pool that claims the node (:meth:`PoolRegistry.claim`)."""


@dataclass(frozen=True)
class PoolsChanged:
    """The declared pools in force changed: the pools before and after, and per Node index
    part (``flavor``, ``queue``, ``cohort``) the node-derived names the nodes those pools
    select had and have. *first*: the registry's first state since the worker started (the
    pool objects in the caches from before are looked at too)."""

    before: tuple[DeclaredPool, ...]
    after: tuple[DeclaredPool, ...]
    names: Mapping[Part, frozenset[str]] = field(default_factory=dict)
    first: bool = False

    def keys(self, part: Part, cache: Informer) -> list[str]:
        """The names the reconciler of *part* (whose objects *cache* holds) looks at again:
        the nodes' names, every pool object name before and after, and on the first state,
        the pool objects already in *cache*."""
        names = set(self.names.get(part, ()))
        names.update(p.object_name for p in (*self.before, *self.after))
        if self.first:
            names.update(name_of(o) for o in cache.indexer.list() if is_pool_chain_object(o))
        return sorted(names)


class PoolRegistry:
    """The declared pools in force; see the module docstring. Only the declared-pool
    reconciler changes it (:meth:`update`); the others read it."""

    def __init__(self) -> None:
        self.results: tuple[PoolResult, ...] = ()
        self.sound: tuple[DeclaredPool, ...] = ()
        self.version = 0
        """Bumped on every change of the sound pools (the Node models' claim key)."""
        self.known = False
        """Whether the declared-pool reconciler has read the pools once: until then the
        other reconcilers leave pool objects alone (a pool not read yet is not gone)."""
        self.provisioning = ProvisioningSettings()
        """Whether and how the pools get provisioning checks (``served`` as discovered)."""
        self.unchecked: frozenset[str] = frozenset()
        """Pools whose queue leaves its AdmissionCheck out (it never became Active,
        docs/autoscaling.md, "A check that never becomes Active")."""
        self._by_name: dict[str, DeclaredPool] = {}

    def claim(self, node: object) -> str:
        """The key of the pool that selects *node*, ``""`` for none."""
        pool = self.pool_of(node)
        return pool.key if pool is not None else ""

    def pool_of(self, node: object) -> DeclaredPool | None:
        """The first sound pool that selects *node*."""
        for pool in self.sound:
            if pool.matches(node):
                return pool
        return None

    def wants(self, name: str) -> DeclaredPool | None:
        """The sound pool whose flavor, Cohort, ClusterQueue and checks are named *name*."""
        return self._by_name.get(name)

    def concerns(self, name: str, have: Mapping[str, Any] | None) -> bool:
        """Whether *name* (cached as *have*) is a declared pool's object: a sound pool's
        name, or an object that carries the pool label."""
        return name in self._by_name or is_pool_chain_object(have)

    def update(
        self, results: Sequence[PoolResult], unchecked: Iterable[str] = ()
    ) -> tuple[DeclaredPool, ...] | None:
        """Take *results* and the pools whose check is left out; the sound pools before,
        when the sound pools or the left-out checks changed (or this is the first update),
        else ``None``."""
        self.results = tuple(results)
        sound = tuple(r for r in results if isinstance(r, DeclaredPool))
        left_out = frozenset(unchecked)
        if sound == self.sound and left_out == self.unchecked and self.known:
            return None
        before = self.sound
        if sound != self.sound:
            self.version += 1
        self.sound, self.unchecked, self.known = sound, left_out, True
        self._by_name = {p.object_name: p for p in sound}
        return before

    def objects(
        self, name: str, nodes: Informer, version: KueueVersion
    ) -> DeclaredPoolObjects | None:
        """The objects of the pool named *name* (``None``: no sound pool has that name),
        its queue's quota counting the claimed Nodes in *nodes* it selects, as ``plan``
        counts them; its queue without the check when that is left out."""
        pool = self._by_name.get(name)
        if pool is None:
            return None
        members = [n for p in self.sound for n in nodes.indexer.by_index(BY_DECLARED_POOL, p.key)]
        objects = declared_pool_objects(pool, members, version, self.provisioning)
        if name in self.unchecked:
            queue = without_admission_checks(objects.cluster_queue)
            return DeclaredPoolObjects(
                objects.flavor,
                objects.cohort,
                queue,
                objects.admission_check,
                objects.provisioning_config,
                objects.warning,
            )
        return objects


async def put_pool_object(
    writer: Writer,
    resource: Resource,
    cache: Informer,
    have: Mapping[str, Any] | None,
    want: dict[str, Any] | None,
    *,
    held: Callable[[Mapping[str, Any]], bool] | None = None,
) -> bool:
    """Converge one object of a declared pool's chain: apply *want* when it differs from
    *have*; with no *want*, delete *have* when it is ours and carries the pool label
    (unless *held* says it must wait: then ``True``). A same-named object a person made is
    reported and left alone; one being deleted is left to go (its deletion brings the key
    back, and it is created anew)."""
    if want is None:
        if have is None or not is_pool_chain_object(have):
            return False
        if not is_managed_object(have) or is_deleting(have):
            return False
        if held is not None and held(have):
            return True  # deleted once Kueue reports nothing reserved
        await writer.delete(resource, have, "no declared pool wants it")
        return False
    if have is not None and not is_managed_object(have):
        writer.not_ours(resource, have)
        return False
    if have is not None and is_deleting(have):
        return False
    if not is_up_to_date(have, want) or has_stale_checks(have, want):
        await writer.apply(resource, want, existed=have is not None, cache=cache)
    return False
