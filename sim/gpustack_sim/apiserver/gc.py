"""Background controllers of the simulated cluster: garbage collector and namespace cleanup.

Like kube-controller-manager's, they run asynchronously after the write that triggers them,
so clients observe dependents for a short while after their owner is gone.

* Garbage collector: a dependent whose owners (by uid) are all gone is deleted (Background).
  A cluster-scoped owner may own namespaced dependents; a namespaced owner only counts in the
  dependent's namespace. References to absent owners are dropped when other owners remain.
* Namespace controller: a Namespace being deleted has all its objects deleted; once none is
  left its ``spec.finalizers`` are cleared and it disappears.
* CRD finalizer: a CustomResourceDefinition being deleted has its instances deleted, then
  goes (``gpustack_sim/apiserver/crdcleanup.py``).
* Kubelet's part of a Pod's graceful deletion: finished at once
(``gpustack_sim/apiserver/podtermination.py``).
* Disruption controller: the status of PodDisruptionBudgets
(``gpustack_sim/apiserver/eviction.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

import structlog

from gpustack_sim.apiserver import crdcleanup, eviction, podtermination
from gpustack_sim.apiserver.errors import ApiError
from gpustack_sim.apiserver.store import (
    DELETED,
    FOREGROUND,
    Event,
    Key,
    ResourceId,
    Store,
    key_of,
    now_rfc3339,
)

log = structlog.get_logger(__name__)


class BackgroundControllers:
    """Runs the garbage collector and the namespace controller on the server's loop."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Dependents whose owners may have gone: new/changed ownerReferences, deleted owners.
        self._dirty: set[tuple[ResourceId, Key]] = set()
        self._terminating: set[Key] = set()  # Pods whose graceful deletion is pending
        self._budget_namespaces: set[str] = set()  # whose PDBs may need a new status
        pdb_info = store.info_by_resource(eviction.PDB_RESOURCE)
        self._budgets = store.resource(pdb_info) if pdb_info is not None else None
        self._running = False
        store.add_commit_hook(self._on_commit)

    def _on_commit(self, event: Event, rid: ResourceId) -> None:
        meta = event.obj.get("metadata") or {}
        wake = False
        if event.type == DELETED:
            self._dirty.update(self.store.dependents(meta.get("uid", "")))
            wake = True  # may also finish a terminating namespace or a foreground owner
        elif meta.get("ownerReferences") and (
            event.prev is None
            or (event.prev.get("metadata") or {}).get("ownerReferences")
            != meta.get("ownerReferences")
        ):
            self._dirty.add((rid, key_of(event.obj)))
            wake = True
        if meta.get("deletionTimestamp") and (
            rid in (("", "namespaces"), crdcleanup.CRD_RESOURCE)
            or FOREGROUND in (meta.get("finalizers") or [])
        ):
            wake = True
        if rid == podtermination.POD_RESOURCE and podtermination.pending(event.obj):
            self._terminating.add(key_of(event.obj))
            wake = True
        namespace = meta.get("namespace") or ""
        if (
            rid in (podtermination.POD_RESOURCE, eviction.PDB_RESOURCE)
            and self._budgets is not None
            and any(key[0] == namespace for key in self._budgets.objects)
        ):
            self._budget_namespaces.add(namespace)
            wake = True
        if wake:
            self._wake.set()

    @property
    def idle(self) -> bool:
        """True when none of the background controllers has work pending or running."""
        return (
            not self._wake.is_set()
            and not self._dirty
            and not self._terminating
            and not self._budget_namespaces
            and not self._running
        )

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-gc")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._running = True
            self._wake.clear()
            await asyncio.sleep(0)  # let the triggering request answer first
            try:
                dirty, self._dirty = self._dirty, set()
                terminating, self._terminating = self._terminating, set()
                budgets, self._budget_namespaces = self._budget_namespaces, set()
                changed = (
                    self.collect_garbage(dirty)
                    | self.delete_foreground()
                    | self.clean_namespaces()
                    | crdcleanup.clean_up(self.store, now_rfc3339())
                    | podtermination.finish_terminations(self.store, terminating)
                    | eviction.update_budgets(self.store, budgets)
                )
            except Exception:
                log.exception("background controller pass failed")
                changed = False
            if changed:
                self._wake.set()
            self._running = False

    def collect_garbage(self, candidates: Iterable[tuple[ResourceId, Key]] | None = None) -> bool:
        """One GC pass over ``candidates`` (every dependent when None); True on any change."""
        changed = False
        store = self.store
        resources = dict(store.resources())
        for rid, key in sorted(store.dependents() if candidates is None else candidates):
            res = resources.get(rid)
            obj = res.objects.get(key) if res else None
            if obj is None:
                continue
            refs = obj["metadata"].get("ownerReferences") or []
            dead = [r.get("uid", "") for r in refs if not store.owner_alive(r, key[0])]
            if not dead:
                continue
            info = store.info_by_resource(rid)
            if info is None:
                continue
            try:
                if len(dead) == len(refs):
                    if obj["metadata"].get("deletionTimestamp"):
                        continue
                    store.delete_as(info, key[0] or None, key[1])
                else:
                    store.remove_owner_refs(rid, key, dead)
                changed = True
            except ApiError as exc:
                log.warning("garbage collection failed", name=key[1], error=str(exc))
        return changed

    def delete_foreground(self) -> bool:
        """One pass over owners deleted in the foreground; True when it changed anything.

        Their dependents are deleted (in the foreground too); once no dependent that has
        ``blockOwnerDeletion`` is left, the owner's ``foregroundDeletion`` finalizer goes.
        """
        changed = False
        store = self.store
        for rid, key, owner in store.foreground_owners():
            uid = owner["metadata"].get("uid", "")
            blocking = False
            for dep_rid, dep_key, dep, blocks in store.dependents_of(uid):
                if not store.owner_alive({"uid": uid}, dep_key[0]):
                    continue  # a namespaced owner does not own objects of other namespaces
                blocking = blocking or blocks
                info = store.info_by_resource(dep_rid)
                if info is None or dep["metadata"].get("deletionTimestamp"):
                    continue
                with contextlib.suppress(ApiError):
                    store.delete_as(info, dep_key[0] or None, dep_key[1], propagation="Foreground")
                    changed = True
            if not blocking:
                store.remove_finalizer(rid, key, FOREGROUND)
                changed = True
        return changed

    def clean_namespaces(self) -> bool:
        """One namespace-controller pass; True when it changed anything."""
        changed = False
        store = self.store
        ns_info = store.registry.lookup("", "v1", "namespaces")
        if ns_info is None:
            return False
        terminating = [
            key[1]
            for key, ns in store.resource(ns_info).objects.items()
            if ns["metadata"].get("deletionTimestamp")
        ]
        for ns in terminating:
            for rid, res in store.resources():
                info = store.info_by_resource(rid)
                if info is None or not info.namespaced:
                    continue
                for key, obj in sorted(res.objects.items()):
                    if key[0] != ns or obj["metadata"].get("deletionTimestamp"):
                        continue
                    with contextlib.suppress(ApiError):
                        store.delete_as(info, ns, key[1])
                        changed = True
            if not self._has_content(ns):
                store.finalize_namespace(ns)
                changed = True
        return changed

    def _has_content(self, namespace: str) -> bool:
        for rid, res in self.store.resources():
            info = self.store.info_by_resource(rid)
            if info is not None and info.namespaced and any(k[0] == namespace for k in res.objects):
                return True
        return False
