"""Read a few objects through kr8s's objects, for commands that make a handful of requests.

``queues`` and the gateway's member registration read a few objects once, so they go through
kr8s (an ``Api`` from :func:`gpustack_operator.kubeconfig.connect_kr8s`) rather than the
runtime's informers (docs/runtime.md, "Credentials"). Objects come back as plain dicts.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kr8s.asyncio import Api
    from kr8s.asyncio.objects import APIObject

    from gpustack_operator.runtime.resources import Resource

__all__ = ["first_object", "kind_class", "list_objects", "served_versions"]


def kind_class(res: Resource) -> type[APIObject]:
    """The kr8s object class of *res* (no discovery request: the descriptor says it all)."""
    from kr8s.asyncio.objects import new_class

    return new_class(res.kind, res.api_version, namespaced=res.namespaced, plural=res.plural)


async def served_versions(api: Api, group: str) -> list[str]:
    """The versions of *group* the cluster serves (kr8s's discovery of API versions)."""
    prefix = f"{group}/"
    return [v.removeprefix(prefix) async for v in api.api_versions() if v.startswith(prefix)]


async def list_objects(
    api: Api, res: Resource, namespace: str | None = None, label_selector: str | None = None
) -> list[dict[str, Any]]:
    """Every object of *res* (in *namespace*, matching *label_selector*) as plain dicts."""
    objects = api.async_get(
        kind_class(res), namespace=namespace, label_selector=label_selector, raw=True
    )
    return [_plain(obj) async for obj in objects]


async def first_object(
    api: Api, res: Resource, label_selector: str | None = None
) -> dict[str, Any] | None:
    """One object of *res* in any namespace matching *label_selector* (None if there is
    none): proves that the kind is served and the credentials may list it, reading one page
    at most."""
    from kr8s import ALL

    namespace = ALL if res.namespaced else None
    objects = api.async_get(
        kind_class(res), namespace=namespace, label_selector=label_selector, raw=True
    )
    async with aclosing(objects):
        async for obj in objects:
            return _plain(obj)
    return None


def _plain(obj: APIObject | dict[str, Any]) -> dict[str, Any]:
    """The object as the server sent it (``raw=True`` gives dicts; a kr8s object its raw)."""
    return obj if isinstance(obj, dict) else dict(obj.raw.to_dict())
