"""A declaration a person keeps in a ConfigMap, as the worker holds it in force (docs/worker.md,
"Declarations in force").

The teams (``gpustack-teams``) and declared pools (``gpustack-declared-pools``) are read the
same way, by :class:`LiveDeclaration`:

- each revision of the ConfigMap is looked at once; its verdict (taken or refused) stands
  until the ConfigMap changes;
- the text is validated in a worker thread (``anyio.to_thread``) by the domain's one
  validation, which reads it with limits: no input holds the event loop, and none takes
  long even there;
- a refusal changes nothing in force: the last good declaration stays (or the worker's
  flag, or none, if there never was one), a Warning Event on the ConfigMap says why;
- what is in force, and the last refusal, are published in the ConfigMap
  ``gpustack-declarations`` (``domain/declarationstatus.py``); a worker that starts again
  reads its text back, so a restart while the person's ConfigMap is bad keeps the chain.

A :class:`LiveDeclaration` is also an event source for the controllers that build from it:
they wait until the declaration in force is known before their first reconcile, and every
key is queued again when it changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Final, Generic, TypeVar

import anyio
import anyio.to_thread
import structlog

from gpustack_operator.domain.declarationstatus import (
    SOURCE_CONFIGMAP,
    SOURCE_FLAG,
    SOURCE_NONE,
    STATUS_CONFIGMAP,
    DeclarationStatus,
    status_data,
    statuses_of,
)
from gpustack_operator.domain.declarationtext import DeclarationError, configmap_text, shorten
from gpustack_operator.domain.labels import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from gpustack_operator.domain.nodeview import metadata
from gpustack_operator.runtime.controller import EventRecorderLike
from gpustack_operator.runtime.informer import Informer
from gpustack_operator.runtime.manager import Manager
from gpustack_operator.runtime.resources import CONFIGMAPS, Resource
from gpustack_operator.worker.common import Writer

log = structlog.get_logger(__name__)

T = TypeVar("T")
STAYS: Final = "the last good declaration stays in force"


def status_configmap_informer(manager: Manager, namespace: str) -> Informer:
    """The shared informer of the worker's own ``gpustack-declarations`` ConfigMap."""
    return manager.informer(
        CONFIGMAPS, namespace=namespace, field_selector=f"metadata.name={STATUS_CONFIGMAP}"
    )


class LiveDeclaration(Generic[T]):
    """One kind of declaration in force; see the module docstring.

    *validator* is called on the event loop for each revision and returns the function that
    validates a text (in a thread): a snapshot of what the check needs (pools, namespaces).
    *restore* parses a text that was in force before (a worker starting again) without the
    checks against the cluster. *names* lists what a value declares.
    """

    def __init__(
        self,
        *,
        kind: str,
        configmaps: Informer,
        status: Informer | None,
        namespace: str,
        name: str,
        key: str,
        fallback: T | None,
        validator: Callable[[], Callable[[str], T]],
        restore: Callable[[str], T],
        names: Callable[[T | None], tuple[str, ...]],
        reason: str,
        recorder: EventRecorderLike | None = None,
    ) -> None:
        self.kind = kind
        self.configmaps = configmaps
        self.status_informer = status
        self.namespace = namespace
        self.name = name
        self.data_key = key
        self.fallback = fallback
        self.validator = validator
        self.restore = restore
        self.names = names
        self.reason = reason
        self.recorder = recorder
        self.value: T | None = fallback
        self.status = self._fallback_status()
        self._seen: str | None = None
        self._loaded = False
        self._lock = anyio.Lock()
        self._handlers: list[Any] = []
        self._published: dict[str, str] | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def configmap(self) -> dict[str, Any] | None:
        return self.configmaps.indexer.get(self.key)

    def current(self) -> T | None:
        """The declaration in force (never parses: :meth:`refresh` does, off the loop)."""
        return self.value

    @property
    def error(self) -> str:
        """Why the ConfigMap's latest revision was refused (empty: it was not)."""
        return self.status.refused

    def _fallback_status(self) -> DeclarationStatus:
        source = SOURCE_FLAG if self.fallback is not None else SOURCE_NONE
        return DeclarationStatus(self.kind, source=source, in_force=self.names(self.fallback))

    async def refresh(self) -> bool:
        """Look at the ConfigMap's revision, once per revision; whether what is in force
        changed (then every subscribed controller is told)."""
        async with self._lock:
            configmap = self.configmap()
            revision = str(metadata(configmap).get("resourceVersion", "")) if configmap else ""
            if self._loaded and revision == self._seen:
                return False
            first, self._loaded, self._seen = not self._loaded, True, revision
            before = self.value
            if configmap is None:
                self.value, self.status = self.fallback, self._fallback_status()
            elif not (first and await self._restored(revision)):
                await self._read(configmap, revision)
            changed = self.value != before
        if changed:
            for handler in list(self._handlers):
                handler.on_update(configmap, configmap)
        return changed

    async def _restored(self, revision: str) -> bool:
        """A worker starting again: the published verdict on *revision* stands (its text
        back in force when it was taken, or the text in force when it was refused)."""
        stored = statuses_of(self._status_configmap()).get(self.kind)
        if stored is None or revision not in (stored.revision, stored.refused_revision):
            return False
        if stored.source != SOURCE_CONFIGMAP or stored.text is None:
            if stored.refused_revision != revision:
                return False
            self.value = self.fallback
            self.status = replace(
                self._fallback_status(), refused=stored.refused, refused_revision=revision
            )
            return True
        try:
            value = await anyio.to_thread.run_sync(
                self.restore, stored.text, abandon_on_cancel=True
            )
        except DeclarationError:
            return False  # read afresh instead
        self.value = value
        self.status = replace(stored, in_force=self.names(value))
        log.info(
            f"{self.kind} declaration in force again after a restart",
            configmap=self.key,
            revision=stored.revision,
            refused=stored.refused or None,
        )
        return True

    def _status_configmap(self) -> dict[str, Any] | None:
        if self.status_informer is None:
            return None
        return self.status_informer.indexer.get(f"{self.namespace}/{STATUS_CONFIGMAP}")

    async def _read(self, configmap: Mapping[str, Any], revision: str) -> None:
        validate = self.validator()  # the snapshot, taken on the loop
        try:
            text = configmap_text(configmap, self.data_key)
            value = await anyio.to_thread.run_sync(validate, text, abandon_on_cancel=True)
        except DeclarationError as exc:
            self._refuse(configmap, revision, str(exc))
            return
        except Exception as exc:  # a defect in a check: refused, never in force, never a crash
            log.exception(f"{self.kind} declaration could not be checked", configmap=self.key)
            self._refuse(
                configmap, revision, f"the declaration could not be checked ({type(exc).__name__})"
            )
            return
        self.value = value
        self.status = DeclarationStatus(
            self.kind,
            source=SOURCE_CONFIGMAP,
            revision=revision,
            in_force=self.names(value),
            text=text,
        )
        log.info(
            f"{self.kind} declaration in force",
            configmap=self.key,
            revision=revision,
            declared=list(self.status.in_force),
        )

    def _refuse(self, configmap: Mapping[str, Any], revision: str, message: str) -> None:
        message = shorten(message)
        self.status = replace(self.status, refused=message, refused_revision=revision)
        log.warning(
            f"{self.kind} declaration refused; {STAYS}",
            configmap=self.key,
            revision=revision,
            error=message,
            in_force=list(self.status.in_force),
        )
        if self.recorder is not None:
            self.recorder.event(
                dict(configmap), "Warning", self.reason, f"{message} ({STAYS})", resource=CONFIGMAPS
            )

    async def publish(self, writer: Writer) -> None:
        """Write this kind's keys of the status ConfigMap when they changed (server-side
        apply as this kind's own field manager, so the kinds never overwrite each other)."""
        data = status_data(self.status)
        have = (self._status_configmap() or {}).get("data") or {}
        if data == self._published and all(have.get(k) == v for k, v in data.items()):
            return  # written, and the cache shows it (a person's delete or edit is undone)
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": STATUS_CONFIGMAP,
                "namespace": self.namespace,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            },
            "data": data,
        }
        await writer.client.apply(
            CONFIGMAPS,
            body,
            field_manager=f"{writer.field_manager}-{self.kind}",
            force=True,
            fence=writer.fence,
        )
        self._published = data

    # --- an event source for the controllers that build from the declaration --------------

    @property
    def resource(self) -> Resource:
        return CONFIGMAPS

    @property
    def indexer(self) -> Any:
        return self.configmaps.indexer

    @property
    def has_synced(self) -> bool:
        return self._loaded

    def add_event_handler(self, handler: Any) -> None:
        self._handlers.append(handler)

    def remove_event_handler(self, handler: Any) -> None:
        if handler in self._handlers:
            self._handlers.remove(handler)

    async def wait_for_sync(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait for the informers, then for the declaration in force (read once)."""
        for informer in (self.configmaps, self.status_informer, *self.waits_for()):
            if informer is not None and not await informer.wait_for_sync(timeout):
                return False
        if not self._loaded:
            await self.refresh()
        return True

    def waits_for(self) -> tuple[Informer, ...]:
        """Further informers the validation reads (a subclass's)."""
        return ()


class EveryKey:
    """An event handler that queues every key of *controller* (*every_key*) on any call."""

    def __init__(self, add: Callable[[str], None], every_key: Callable[[], list[str]]) -> None:
        self._add = add
        self._every_key = every_key

    def _all(self, *_: object) -> None:
        for key in self._every_key():
            self._add(key)

    on_add = on_update = on_delete = on_resync = _all


class Ignore:
    """An event handler that does nothing (a source waited for, its events read elsewhere)."""

    def _none(self, *_: object) -> None:
        return None

    on_add = on_update = on_delete = on_resync = _none
