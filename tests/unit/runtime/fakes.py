"""In-memory test doubles for controller tests: an event source shaped like an Informer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import anyio

from gpustack_operator.runtime.resources import Resource


class FakeIndexer:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.objects.get(key)


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


class FakeSource:
    """Delivers events to handlers synchronously, as an informer does from its loop."""

    def __init__(self, resource: Resource, *, synced: bool = True) -> None:
        self.resource = resource
        self.indexer = FakeIndexer()
        self.handlers: list[Any] = []
        self._synced = anyio.Event()
        if synced:
            self._synced.set()

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    def mark_synced(self) -> None:
        self._synced.set()

    def add_event_handler(self, handler: Any) -> None:
        self.handlers.append(handler)
        for obj in self.indexer.objects.values():
            handler.on_add(obj)

    def remove_event_handler(self, handler: Any) -> None:
        self.handlers = [h for h in self.handlers if h is not handler]

    async def wait_for_sync(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        with anyio.move_on_after(timeout):
            await self._synced.wait()
        return self.has_synced

    def add(self, obj: dict[str, Any]) -> None:
        self.indexer.objects[key_of(obj)] = obj
        for handler in self.handlers:
            handler.on_add(obj)

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.indexer.objects[key_of(new)] = new
        for handler in self.handlers:
            handler.on_update(old, new)

    def resync(self) -> None:
        for obj in list(self.indexer.objects.values()):
            for handler in self.handlers:
                handler.on_resync(obj)

    def delete(self, obj: dict[str, Any]) -> None:
        self.indexer.objects.pop(key_of(obj), None)
        for handler in self.handlers:
            handler.on_delete(obj)


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(
        self,
        obj: Mapping[str, Any],
        type_: Literal["Normal", "Warning"],
        reason: str,
        message: str,
        *,
        resource: Resource | None = None,
    ) -> None:
        self.events.append((key_of(obj), type_, reason, message))


def obj(
    name: str,
    namespace: str | None = None,
    *,
    generation: int = 1,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    rv: str = "1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "generation": generation, "resourceVersion": rv}
    if namespace:
        meta["namespace"] = namespace
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"metadata": meta}


def owner_ref(
    kind: str, name: str, *, api_version: str = "v1", controller: bool = True
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": f"uid-{name}",
        "controller": controller,
    }
