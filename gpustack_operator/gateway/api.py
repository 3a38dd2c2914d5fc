"""The gateway's HTTP API (aiohttp): aggregated, read-only views plus cluster registration.

======  ===========================================  ==========================================
GET     ``/apis/v1/clusters``                        every cluster: status, last error, counts
GET     ``/apis/v1/clusters/{name}``                 one cluster
POST    ``/apis/v1/clusters/{name}[?context=]``      register (body: kubeconfig, YAML or JSON);
                                                     the cluster is checked first (422 if unfit)
DELETE  ``/apis/v1/clusters/{name}``                 unregister
GET     ``/apis/v1/pools[?cluster=]``                one entry per ClusterQueue
GET     ``/apis/v1/clusters/{name}/{kind}``          raw objects (resourceflavors, cohorts,
                                                     clusterqueues, localqueues)
GET     ``/healthz``, ``/readyz``, ``/metrics``      probes and Prometheus metrics
======  ===========================================  ==========================================

``?watch=true`` on any GET of a collection streams newline-delimited JSON: the current state
as ADDED events, a ``BOOKMARK`` whose object is ``{"initialEventsEnd": true}``, then
ADDED/MODIFIED/DELETED as they happen (idle streams get an empty BOOKMARK every ``heartbeat``
seconds). A watcher that falls ``watch_buffer`` events (or 64 MiB) behind gets one ``ERROR``
line (a ``Status`` with reason :data:`~.hub.OVERFLOW_REASON`) and is disconnected.

With tokens configured every path but ``/healthz`` and ``/readyz`` needs
``Authorization: Bearer <token>`` (compared in constant time); each token (or, without tokens,
all clients together) may hold ``max_watchers_per_token`` watch streams. Registration accepts
only servers of the static clusters or of ``allowed_servers``, and no ``proxy-url``; then it
reaches the cluster once through kr8s (:mod:`.registration`) and refuses it (422, the reason
and the fix) when it cannot be reached, refuses the credentials or lacks Kueue.
"""

from __future__ import annotations

import asyncio
import hmac
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final

import anyio
import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpustack_operator.gateway.config import check_name
from gpustack_operator.gateway.gateway import ClusterExists, Gateway, UnknownCluster
from gpustack_operator.gateway.hub import OVERFLOW_REASON, Event, Subscription, encode
from gpustack_operator.gateway.kinds import KIND_NAMES
from gpustack_operator.gateway.kubeconfig import (
    ConfigError,
    check_allowed_server,
    check_context,
    check_inline_credentials,
    context_server,
    normalize_server,
    parse_kubeconfig,
    read_kubeconfig,
)
from gpustack_operator.gateway.registration import MemberRefused
from gpustack_operator.gateway.sharing import share
from gpustack_operator.runtime.metrics import REGISTRY
from gpustack_operator.runtime.probes import HealthChecks, probes_app

__all__ = ["ApiOptions", "build_app"]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
PREFIX: Final = "/apis/v1"
UNAUTHENTICATED_PATHS: Final = frozenset({"/healthz", "/readyz"})
NDJSON: Final = "application/x-ndjson"
_SNAPSHOT_CHUNK: Final = 256
GATEWAY_KEY: Final = web.AppKey("gateway", Gateway)
CLIENT_KEY: Final = web.RequestKey("gateway_client", bytes)
"""Request key: the token that authenticated the request, or ``None`` when the API is open."""


class ApiOptions:
    """Behaviour of the API beyond the gateway itself."""

    def __init__(
        self,
        *,
        tokens: Sequence[str] = (),
        allow_registration: bool = False,
        heartbeat: float = 30.0,
        abort_grace: float = 5.0,
        allowed_servers: Iterable[str] = (),
        max_watchers_per_token: int = 64,
    ) -> None:
        self.tokens: list[bytes] = []
        self.set_tokens(tokens)
        self.allow_registration = allow_registration
        self.allowed_servers = frozenset(normalize_server(url) for url in allowed_servers)
        """Servers a registered kubeconfig may name besides those of the static clusters."""
        self.max_watchers_per_token = max_watchers_per_token
        self.watchers: Counter[bytes | None] = Counter()
        """Open watch streams per client (its token; ``None`` without tokens)."""
        self.heartbeat = heartbeat
        """Seconds of silence after which a watch gets an empty BOOKMARK (finds dead peers)."""
        self.abort_grace = abort_grace
        """Seconds a dropped slow watcher gets to read its ERROR line before the socket closes."""

    def set_tokens(self, tokens: Sequence[str]) -> None:
        """Accept these bearer tokens from now on (the token file was reloaded)."""
        self.tokens = [t.encode() for t in tokens if t]


def _status(code: int, reason: str, message: str) -> JSON:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Success" if code < 400 else "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def _error(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(_status(code, reason, message), status=code)


def _watching(request: web.Request) -> bool:
    return request.query.get("watch", "").lower() in ("true", "1")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(gateway: Gateway, options: ApiOptions | None = None) -> web.Application:
    """The aiohttp application serving *gateway* (see the module docstring)."""
    opts = options or ApiOptions()
    healthz, readyz = HealthChecks(), HealthChecks()
    healthz.add("ping", lambda: True)
    readyz.add("gateway-started", gateway.started.is_set)
    readyz.add("clusters-settled", gateway.settled)
    app = probes_app(healthz, readyz)
    app[GATEWAY_KEY] = gateway
    app.middlewares.append(_bearer_auth(opts))
    api = _Handlers(gateway, opts)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get(f"{PREFIX}/clusters", api.list_clusters)
    app.router.add_get(f"{PREFIX}/clusters/{{name}}", api.get_cluster)
    app.router.add_post(f"{PREFIX}/clusters/{{name}}", api.register_cluster)
    app.router.add_delete(f"{PREFIX}/clusters/{{name}}", api.unregister_cluster)
    app.router.add_get(f"{PREFIX}/clusters/{{name}}/{{kind}}", api.list_objects)
    app.router.add_get(f"{PREFIX}/pools", api.list_pools)
    return app


def _bearer_auth(opts: ApiOptions) -> Middleware:
    """Middleware asking for one of the tokens on every path but the probes (none: open).

    Reads ``opts.tokens`` at each request, so a reloaded token file applies at once."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        tokens = opts.tokens
        if not tokens or request.path in UNAUTHENTICATED_PATHS:
            return await handler(request)
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        presented = token.strip().encode()
        # Compare against every token, always: the time taken does not tell which matched.
        matched: bytes | None = None
        for known in tokens:
            if hmac.compare_digest(presented, known) and matched is None:
                matched = known
        if scheme.lower() != "bearer" or matched is None:
            response = _error(401, "Unauthorized", "a valid 'Authorization: Bearer <token>' "
                              "header is required")  # fmt: skip
            response.headers["WWW-Authenticate"] = 'Bearer realm="worker-gateway"'
            return response
        request[CLIENT_KEY] = matched
        return await handler(request)

    return authenticate


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


class _Handlers:
    """The request handlers of the cluster, pool and object endpoints."""

    def __init__(self, gateway: Gateway, opts: ApiOptions) -> None:
        self.gateway = gateway
        self.opts = opts

    async def list_clusters(self, request: web.Request) -> web.StreamResponse:
        """``GET /clusters``: every cluster's entry, or (``?watch=true``) their changes."""
        if _watching(request):
            return await _stream(request, self.gateway, self.opts, "clusters", None)
        return web.json_response({"kind": "ClusterList", "items": self.gateway.cluster_entries()})

    async def get_cluster(self, request: web.Request) -> web.StreamResponse:
        """``GET /clusters/{name}``: one cluster's entry."""
        name = request.match_info["name"]
        try:
            return web.json_response(self.gateway.runner(name).entry())
        except UnknownCluster:
            return _unknown_cluster(name)

    async def register_cluster(self, request: web.Request) -> web.StreamResponse:
        """``POST /clusters/{name}`` with a kubeconfig body: serve one more cluster."""
        name = request.match_info["name"]
        refused = self._registration_refused()
        if refused is not None:
            return refused
        try:
            text = (await request.read()).decode("utf-8")
        except UnicodeDecodeError:
            return _error(400, "BadRequest", "the kubeconfig in the request body is not UTF-8")
        try:
            check_name(name)
            config = parse_kubeconfig(text, "request body")
            check_inline_credentials(config)
            context = check_context(config, request.query.get("context") or None, "request body")
            check_allowed_server(config, context, self._allowed_servers())
            runner, facts = await self.gateway.register(name, context, text)
        except ClusterExists as exc:
            return _error(409, "AlreadyExists", f"{exc}: DELETE it first to replace it")
        except ConfigError as exc:
            return _error(400, "BadRequest", str(exc))
        except MemberRefused as exc:
            log.warning("cluster_registration_refused", cluster=name, reason=exc.reason,
                        error=str(exc))  # fmt: skip
            return _error(422, exc.reason, f"cluster {name!r} not registered: {exc}")
        except OSError as exc:
            log.error("cannot store a registered kubeconfig", cluster=name, error=str(exc))
            return _error(500, "InternalError", f"cannot store the kubeconfig: {exc}")
        return web.json_response({**runner.entry(), "serverVersion": facts.server_version},
                                 status=201)  # fmt: skip

    async def unregister_cluster(self, request: web.Request) -> web.StreamResponse:
        """``DELETE /clusters/{name}``: stop serving a cluster."""
        name = request.match_info["name"]
        refused = self._registration_refused()
        if refused is not None:
            return refused
        try:
            await self.gateway.remove(name)
        except UnknownCluster:
            return _unknown_cluster(name)
        return web.json_response(_status(200, "Deleted", f"cluster {name!r} removed"))

    def _allowed_servers(self) -> frozenset[str]:
        """The flag's servers plus those of the clusters given at start-up (read now)."""
        allowed = set(self.opts.allowed_servers)
        for runner in self.gateway.clusters.values():
            spec = runner.spec
            if runner.owned_kubeconfig is not None or spec.kubeconfig is None:
                continue
            try:
                server = context_server(read_kubeconfig(spec.kubeconfig), spec.context)
                if server:
                    allowed.add(normalize_server(server))
            except ConfigError:
                continue  # that cluster reports its own error
        return frozenset(allowed)

    def _registration_refused(self) -> web.Response | None:
        if self.opts.allow_registration:
            return None
        return _error(403, "Forbidden", "cluster registration is disabled: start the gateway "
                      "with --allow-cluster-registration")  # fmt: skip

    async def list_pools(self, request: web.Request) -> web.StreamResponse:
        """``GET /pools[?cluster=]``: one pool per ClusterQueue, or their changes."""
        cluster = request.query.get("cluster") or None
        if cluster is not None and cluster not in self.gateway.clusters:
            return _unknown_cluster(cluster)
        if _watching(request):
            return await _stream(request, self.gateway, self.opts, "pools", cluster)
        items, shared, totals = share(self.gateway.pools(cluster))
        body: JSON = {"kind": "PoolList", "items": items, "totals": totals}
        if shared:  # docs/worker-gateway.md, "Tenants"
            body["sharedCapacity"] = shared
        return web.json_response(body)

    async def list_objects(self, request: web.Request) -> web.StreamResponse:
        """``GET /clusters/{name}/{kind}``: the raw Kueue objects of one kind, or changes."""
        name, kind = request.match_info["name"], request.match_info["kind"]
        if kind not in KIND_NAMES:
            return _error(404, "NotFound", f"unknown kind {kind!r}: use one of "
                          f"{', '.join(KIND_NAMES)}")  # fmt: skip
        if name not in self.gateway.clusters:
            return _unknown_cluster(name)
        if _watching(request):
            return await _stream(request, self.gateway, self.opts, kind, name)
        runner = self.gateway.runner(name)
        return web.json_response(
            {"kind": "List", "cluster": name, "resource": kind, "items": runner.objects(kind)}
        )


def _unknown_cluster(name: str) -> web.Response:
    return _error(404, "NotFound", f"no cluster named {name!r}: GET {PREFIX}/clusters lists them")


_INITIAL_END: Final = encode({"type": "BOOKMARK", "object": {"initialEventsEnd": True}})
_HEARTBEAT: Final = encode({"type": "BOOKMARK", "object": {}})


async def _stream(
    request: web.Request,
    gateway: Gateway,
    opts: ApiOptions,
    topic: str,
    cluster: str | None,
) -> web.StreamResponse:
    """Serve one watch: snapshot, then live events, until the client, the gateway or the
    buffer bound ends it."""
    client = request.get(CLIENT_KEY)
    if opts.watchers[client] >= opts.max_watchers_per_token:
        return _error(429, "TooManyRequests", f"this client already holds "
                      f"{opts.max_watchers_per_token} watch streams (--max-watchers-per-token): "
                      "close one, or watch all clusters in one stream")  # fmt: skip
    opts.watchers[client] += 1
    try:
        return await _serve_stream(request, gateway, opts, topic, cluster)
    finally:
        opts.watchers[client] -= 1
        if opts.watchers[client] <= 0:
            del opts.watchers[client]


async def _serve_stream(
    request: web.Request,
    gateway: Gateway,
    opts: ApiOptions,
    topic: str,
    cluster: str | None,
) -> web.StreamResponse:
    # Subscribe and take the snapshot with no await between them: no event is lost or doubled.
    sub = gateway.hub.subscribe(topic, cluster)
    snapshot = gateway.snapshot(topic, cluster)
    scope = anyio.CancelScope()
    sub.on_overflow = scope.cancel
    response = web.StreamResponse(
        headers={"Content-Type": NDJSON, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    try:
        await response.prepare(request)
        with scope:
            await _write_snapshot(response, snapshot)
            await response.write(_INITIAL_END)
            await _pump(response, sub, opts.heartbeat)
        if sub.overflowed:
            await _drop_slow_watcher(request, response, sub, opts.abort_grace)
    except ConnectionResetError:
        log.debug("watcher_went_away", topic=topic, cluster=cluster)
    finally:
        gateway.hub.unsubscribe(sub)
    return response


async def _write_snapshot(response: web.StreamResponse, snapshot: list[Event]) -> None:
    for start in range(0, len(snapshot), _SNAPSHOT_CHUNK):
        chunk = snapshot[start : start + _SNAPSHOT_CHUNK]
        await response.write(b"".join(encode(event.payload()) for event in chunk))


async def _pump(response: web.StreamResponse, sub: Subscription, heartbeat: float) -> None:
    while True:
        with anyio.move_on_after(heartbeat) as idle:
            batch = await sub.next_batch()
        if idle.cancelled_caught:
            await response.write(_HEARTBEAT)
            continue
        if not batch:
            return  # closed: gateway shutdown, cluster filter gone, or overflow
        await response.write(b"".join(batch))


async def _drop_slow_watcher(
    request: web.Request, response: web.StreamResponse, sub: Subscription, grace: float
) -> None:
    """Queue the ERROR line, close the connection once it is read, abort it after *grace*."""
    message = (
        f"this watch fell too far behind (more than {sub.capacity} events or "
        f"{sub.max_bytes} bytes) and was closed; read the stream faster, or watch again to "
        "start from a fresh snapshot"
    )
    log.warning("watcher_too_slow", topic=sub.topic, cluster=sub.cluster, buffer=sub.capacity)
    line = encode({"type": "ERROR", "object": _status(410, OVERFLOW_REASON, message)})
    transport = request.transport
    with anyio.move_on_after(min(grace, 1.0)):
        await response.write(line)
    if transport is not None and not transport.is_closing():
        transport.close()  # flushes what is buffered (the ERROR line included), then closes
        asyncio.get_running_loop().call_later(grace, transport.abort)
