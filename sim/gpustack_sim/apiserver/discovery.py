"""Discovery and OpenAPI documents of the simulated API server.

kubectl (and client-go) learn what a cluster serves from ``/version``, ``/api``, ``/apis``
and the group-version documents, then fetch OpenAPI v3 to decide how to validate and patch.
Everything here is computed from ``sim.registry`` at request time, so CRDs registered later
show up at once. (``kubectl get`` tables are in :mod:`.tables`; ``maybe_table`` is re-exported
here for the server.)

Aggregated discovery (``apidiscovery.k8s.io/v2``, what kubectl >= 1.30 asks for first) and
the legacy per-group documents are both served. The OpenAPI v3 documents carry, per kind, a
schema (the CRD's ``openAPIV3Schema``; an open object for built-in kinds) and a PATCH
operation that advertises the ``fieldValidation`` query parameter, so kubectl leaves field
validation to the server instead of downloading OpenAPI v2 (which is not served). Built-in
kinds deliberately advertise no strategic-merge media type in OpenAPI: kubectl then builds
strategic merge patches from the patch metadata compiled into it, which is exact.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gpustack_sim.apiserver.eviction import EVICTION_KIND
from gpustack_sim.apiserver.kinds import KUBERNETES_VERSION, KindInfo, KindRegistry
from gpustack_sim.apiserver.openapiv2 import PROTOBUF_TYPE, OpenApiV2Cache
from gpustack_sim.apiserver.podtermination import is_pod
from gpustack_sim.apiserver.scale import scale_paths
from gpustack_sim.apiserver.tables import maybe_table

if TYPE_CHECKING:
    from gpustack_sim.apiserver.server import SimServer

__all__ = [
    "KUBERNETES_VERSION",
    "OpenApiCache",
    "add_discovery_routes",
    "aggregated_discovery",
    "api_group",
    "api_group_list",
    "api_resource_list",
    "api_versions",
    "maybe_table",
    "openapi_v3_group_version",
    "openapi_v3_root",
    "preferred_version",
    "version_info",
]

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUBRESOURCE_VERBS = ["get", "patch", "update"]

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"

_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


# --- documents ------------------------------------------------------------------------------


_SCALE_KIND = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
_CREATE_ONLY: dict[tuple[str, str], tuple[tuple[str, dict[str, str]], ...]] = {
    ("", "serviceaccounts"): (
        ("token", {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"}),
    ),
}
"""Subresources that are only posted to, by resource (gpustack_sim/apiserver/reviews.py serves
them)."""


def version_info(version: tuple[int, int, int] = KUBERNETES_VERSION) -> dict[str, Any]:
    """The ``/version`` document of a server of *version* (``SimServer.kubernetes_version``)."""
    major, minor, patch = version
    return {
        "major": str(major),
        "minor": str(minor),
        "emulationMajor": str(major),
        "emulationMinor": str(minor),
        "gitVersion": f"v{major}.{minor}.{patch}",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version order: GA before beta before alpha, higher numbers first."""
    match = _VERSION_RE.match(version)
    if not match:
        return (3, 0, 0)  # non-Kubernetes-style names sort last
    major, level, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[level]
    return (rank, -int(major), -int(minor or 0))


def _groups(registry: KindRegistry) -> dict[str, dict[str, list[KindInfo]]]:
    """group -> version -> kinds, groups in name order ("" first), versions by priority."""
    out: dict[str, dict[str, list[KindInfo]]] = {}
    for info in registry:
        out.setdefault(info.group, {}).setdefault(info.version, []).append(info)
    return {
        group: {
            v: sorted(out[group][v], key=lambda i: i.plural)
            for v in sorted(out[group], key=version_priority)
        }
        for group in sorted(out)
    }


def preferred_version(registry: KindRegistry, group: str) -> str | None:
    versions = _groups(registry).get(group)
    return next(iter(versions)) if versions else None


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _resource_entry(info: KindInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": info.plural,
        "singularName": info.singular,
        "namespaced": info.namespaced,
        "kind": info.kind,
        "verbs": VERBS,
        "storageVersionHash": _hash(f"{info.group}/{info.version}/{info.kind}")[:12],
    }
    if info.short_names:
        entry["shortNames"] = list(info.short_names)
    if info.categories:
        entry["categories"] = list(info.categories)
    return entry


def api_resource_list(registry: KindRegistry, group: str, version: str) -> dict[str, Any] | None:
    """The legacy ``APIResourceList`` of one group version, or None when it is not served."""
    kinds = _groups(registry).get(group, {}).get(version)
    if not kinds:
        return None
    resources: list[dict[str, Any]] = []
    for info in kinds:
        resources.append(_resource_entry(info))
        if info.has_status:
            resources.append(
                {
                    "name": f"{info.plural}/status",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": SUBRESOURCE_VERBS,
                }
            )
        if is_pod(info):
            resources.append(
                {
                    "name": "pods/eviction",
                    "singularName": "",
                    "namespaced": True,
                    **EVICTION_KIND,
                    "verbs": ["create"],
                }
            )
        for sub in info.subresources:
            resources.append(
                {
                    "name": f"{info.plural}/{sub}",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": SUBRESOURCE_VERBS,
                }
            )
        if scale_paths(info) is not None:
            resources.append(
                {
                    "name": f"{info.plural}/scale",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    **_SCALE_KIND,
                    "verbs": SUBRESOURCE_VERBS,
                }
            )
        for sub, kind in _CREATE_ONLY.get((info.group, info.plural), ()):
            resources.append(
                {
                    "name": f"{info.plural}/{sub}",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    **kind,
                    "verbs": ["create"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": info.api_version,
        "resources": resources,
    }


def api_group(registry: KindRegistry, group: str) -> dict[str, Any] | None:
    versions = _groups(registry).get(group)
    if not group or not versions:
        return None
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def api_group_list(registry: KindRegistry) -> dict[str, Any]:
    groups = [api_group(registry, g) for g in _groups(registry) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [g for g in groups if g]}


def aggregated_discovery(registry: KindRegistry, *, core: bool, version: str) -> dict[str, Any]:
    """``APIGroupDiscoveryList`` for ``/api`` (*core*) or ``/apis``; *version* v2 or v2beta1."""
    items: list[dict[str, Any]] = []
    for group, versions in _groups(registry).items():
        if (group == "") != core:
            continue
        version_entries = []
        for ver, kinds in versions.items():
            resources = []
            for info in kinds:
                gvk = {"group": info.group, "version": info.version, "kind": info.kind}
                resource: dict[str, Any] = {
                    "resource": info.plural,
                    "responseKind": gvk,
                    "scope": "Namespaced" if info.namespaced else "Cluster",
                    "singularResource": info.singular,
                    "verbs": VERBS,
                }
                if info.short_names:
                    resource["shortNames"] = list(info.short_names)
                if info.categories:
                    resource["categories"] = list(info.categories)
                subresources = []
                if info.has_status:
                    subresources.append(
                        {"subresource": "status", "responseKind": gvk, "verbs": SUBRESOURCE_VERBS}
                    )
                if is_pod(info):
                    subresources.append(
                        {
                            "subresource": "eviction",
                            "responseKind": EVICTION_KIND,
                            "verbs": ["create"],
                        }
                    )
                subresources.extend(
                    {"subresource": sub, "responseKind": gvk, "verbs": SUBRESOURCE_VERBS}
                    for sub in info.subresources
                )
                if scale_paths(info) is not None:
                    subresources.append(
                        {
                            "subresource": "scale",
                            "responseKind": _SCALE_KIND,
                            "verbs": SUBRESOURCE_VERBS,
                        }
                    )
                for sub, kind in _CREATE_ONLY.get((info.group, info.plural), ()):
                    subresources.append(
                        {"subresource": sub, "responseKind": kind, "verbs": ["create"]}
                    )
                if subresources:
                    resource["subresources"] = subresources
                resources.append(resource)
            version_entries.append({"version": ver, "resources": resources, "freshness": "Current"})
        items.append(
            {"metadata": {"name": group, "creationTimestamp": None}, "versions": version_entries}
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{version}",
        "metadata": {},
        "items": items,
    }


# --- OpenAPI v3 -----------------------------------------------------------------------------


# Patch media types the OpenAPI documents advertise. Strategic merge is left out on purpose
# (see the module docstring): kubectl then uses its compiled-in patch metadata.
_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _schema_name(info: KindInfo) -> str:
    if info.group:
        reversed_group = ".".join(reversed(info.group.split(".")))
        return f"{reversed_group}.{info.version}.{info.kind}"
    return f"io.k8s.api.core.{info.version}.{info.kind}"


def openapi_v3_group_version(
    registry: KindRegistry, group: str, version: str
) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group version, or None when it is not served."""
    kinds = _groups(registry).get(group, {}).get(version)
    if not kinds:
        return None
    schemas: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    prefix = "/" + _gv_path(group, version)
    for info in kinds:
        gvk = [{"group": info.group, "version": info.version, "kind": info.kind}]
        schema: dict[str, Any] = (
            json.loads(json.dumps(info.schema))
            if info.schema is not None
            else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        )
        schema["x-kubernetes-group-version-kind"] = gvk
        schemas[_schema_name(info)] = schema
        ref = {"$ref": f"#/components/schemas/{_schema_name(info)}"}
        item = "/namespaces/{namespace}" if info.namespaced else ""
        paths[f"{prefix}{item}/{info.plural}/{{name}}"] = {
            "get": {
                "operationId": f"read{info.kind}",
                "responses": {"200": {"content": {"application/json": {"schema": ref}}}},
                "x-kubernetes-action": "get",
                "x-kubernetes-group-version-kind": gvk[0],
            },
            "patch": {
                "operationId": f"patch{info.kind}",
                "parameters": [
                    {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                    {"name": "force", "in": "query", "schema": {"type": "boolean"}},
                ],
                "requestBody": {
                    "content": {t: {"schema": {"type": "object"}} for t in _PATCH_TYPES},
                    "required": True,
                },
                "responses": {"200": {"content": {"application/json": {"schema": ref}}}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk[0],
            },
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (gpustack-operator simulator)", "version": "unversioned"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def openapi_v3_root(registry: KindRegistry, cache: OpenApiCache | None = None) -> dict[str, Any]:
    """``/openapi/v3``: one entry per group version, each with a content hash in its URL."""
    cache = cache or OpenApiCache()
    paths: dict[str, Any] = {}
    for group, versions in _groups(registry).items():
        for ver in versions:
            _, digest = cache.document(registry, group, ver)
            path = _gv_path(group, ver)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


class OpenApiCache:
    """Serialized OpenAPI v3 documents and their hashes, rebuilt only when kinds change.

    CRD schemas are large (Kueue's are hundreds of kB) and kubectl fetches ``/openapi/v3``
    on every apply; an entry stays valid while the group version's KindInfo objects are the
    same ones (registering a CRD replaces them).
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], tuple[tuple[KindInfo, ...], bytes, str]] = {}

    def document(self, registry: KindRegistry, group: str, version: str) -> tuple[bytes, str]:
        """(JSON body, hash) of one group version; (b"", "") when it is not served."""
        kinds = tuple(_groups(registry).get(group, {}).get(version) or ())
        cached = self._entries.get((group, version))
        if (
            cached is not None
            and len(cached[0]) == len(kinds)
            and all(a is b for a, b in zip(cached[0], kinds, strict=True))
        ):
            return cached[1], cached[2]
        doc = openapi_v3_group_version(registry, group, version)
        if doc is None:
            self._entries.pop((group, version), None)
            return b"", ""
        body = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        digest = _hash(body.decode())
        self._entries[(group, version)] = (kinds, body, digest)
        return body, digest


def _hash(text: str) -> str:
    return hashlib.sha512(text.encode()).hexdigest()[:128].upper()


# --- routes ---------------------------------------------------------------------------------


def _json(
    payload: Mapping[str, Any], status: int = 200, content_type: str = "application/json"
) -> web.Response:
    return web.Response(
        body=json.dumps(payload, separators=(",", ":")).encode(),
        status=status,
        headers={"Content-Type": content_type},
    )


def _not_found(what: str) -> web.Response:
    return _json(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"the server could not find the requested resource ({what})",
            "reason": "NotFound",
            "details": {},
            "code": 404,
        },
        status=404,
    )


def _aggregated_version(request: web.Request) -> str | None:
    """v2 / v2beta1 when the client asks for aggregated discovery before plain JSON."""
    for media in request.headers.get("Accept", "").split(","):
        params = dict(p.strip().partition("=")[::2] for p in media.split(";")[1:] if "=" in p)
        if params.get("g") == "apidiscovery.k8s.io" and params.get("as") == "APIGroupDiscoveryList":
            if params.get("v") in ("v2", "v2beta1"):
                return params["v"]
        elif media.split(";")[0].strip() in ("application/json", "*/*"):
            return None
    return None


def add_discovery_routes(app: web.Application, sim: SimServer) -> None:
    """Register discovery and OpenAPI routes on the sim's aiohttp *app*."""

    def registry() -> KindRegistry:
        current: KindRegistry = sim.registry
        return current

    async def get_version(request: web.Request) -> web.Response:
        return _json(version_info(sim.kubernetes_version))

    def aggregated(request: web.Request, *, core: bool) -> web.Response | None:
        """The aggregated discovery document when the client asked for one (kubectl does)."""
        version = _aggregated_version(request)
        if not version:
            return None
        doc = aggregated_discovery(registry(), core=core, version=version)
        return _json(doc, content_type=AGGREGATED_V2 if version == "v2" else AGGREGATED_V2BETA1)

    async def get_api(request: web.Request) -> web.Response:
        response = aggregated(request, core=True)
        return response if response is not None else _json(api_versions(request.host))

    async def get_apis(request: web.Request) -> web.Response:
        response = aggregated(request, core=False)
        return response if response is not None else _json(api_group_list(registry()))

    async def get_core_version(request: web.Request) -> web.Response:
        doc = api_resource_list(registry(), "", request.match_info["version"])
        return _json(doc) if doc else _not_found(request.path)

    async def get_group(request: web.Request) -> web.Response:
        doc = api_group(registry(), request.match_info["group"])
        return _json(doc) if doc else _not_found(request.path)

    async def get_group_version(request: web.Request) -> web.Response:
        doc = api_resource_list(
            registry(), request.match_info["group"], request.match_info["version"]
        )
        return _json(doc) if doc else _not_found(request.path)

    openapi = OpenApiCache()

    def openapi_response(request: web.Request, group: str) -> web.Response:
        body, _ = openapi.document(registry(), group, request.match_info["version"])
        if not body:
            return _not_found(request.path)
        return web.Response(body=body, headers={"Content-Type": "application/json"})

    async def get_openapi_root(request: web.Request) -> web.Response:
        return _json(openapi_v3_root(registry(), openapi))

    async def get_openapi_core(request: web.Request) -> web.Response:
        return openapi_response(request, "")

    async def get_openapi_group(request: web.Request) -> web.Response:
        return openapi_response(request, request.match_info["group"])

    openapi_v2 = OpenApiV2Cache()

    async def get_openapi_v2(request: web.Request) -> web.Response:
        """Protobuf when asked for it (kubectl only asks that way), JSON otherwise."""
        groups = _groups(registry()).values()
        kinds = [info for versions in groups for infos in versions.values() for info in infos]
        as_json, as_protobuf, etag = openapi_v2.bodies(kinds)
        headers = {"ETag": f'"{etag}"'}
        if "protobuf" in request.headers.get("Accept", ""):
            return web.Response(
                body=as_protobuf, headers={**headers, "Content-Type": PROTOBUF_TYPE}
            )
        return web.Response(body=as_json, headers={**headers, "Content-Type": "application/json"})

    app.router.add_get("/openapi/v2", get_openapi_v2)
    app.router.add_get("/version", get_version)
    app.router.add_get("/api", get_api)
    app.router.add_get("/api/{version}", get_core_version)
    app.router.add_get("/apis", get_apis)
    app.router.add_get("/apis/{group}", get_group)
    app.router.add_get("/apis/{group}/{version}", get_group_version)
    app.router.add_get("/openapi/v3", get_openapi_root)
    app.router.add_get("/openapi/v3/api/{version}", get_openapi_core)
    app.router.add_get("/openapi/v3/apis/{group}/{version}", get_openapi_group)
