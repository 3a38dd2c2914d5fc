"""The simulated Kubernetes API server: HTTP routing and request handling over :mod:`.store`.

A test double and demo backend, never a product target: it speaks the kube-apiserver REST
protocol closely enough for kr8s, our runtime and kubectl: on 127.0.0.1, plain HTTP or HTTPS
with its own CA (``tls=True``), with no auth or tokens, client certificates and RBAC.

Usage::

    async with SimServer(crd_paths=[crd_dir]) as sim:
        sim.write_kubeconfig(tmp_path / "kubeconfig")
        sim.store.create({...})                 # seed without HTTP
        sim.faults.add(verb="list", kind="Node", status=500, count=1)
        sim.counters.get("patch", "Node")

Hooks for the kubectl-compatibility parts: ``self.app`` is built in ``__init__`` and
``gpustack_sim.apiserver.discovery.add_discovery_routes(app, sim)`` adds /version, /api, /apis,
group-version lists, /openapi/v3 and /openapi/v2; GET and LIST answers go through
``discovery.maybe_table(request, kind, payload)`` so ``kubectl get`` receives Tables.
The NFD-master stand-in follows changes with ``sim.store.subscribe`` / ``sim.store.events``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog
import yaml
from aiohttp import web

from gpustack_sim.apiserver import apply as ssa
from gpustack_sim.apiserver import crdcleanup, discovery, eviction, podtermination, protobuf, scale
from gpustack_sim.apiserver.admissionpolicy import PolicyAdmission
from gpustack_sim.apiserver.authn import ADMIN, ANONYMOUS, TokenAuthenticator, UserInfo
from gpustack_sim.apiserver.bootstrappolicy import bootstrap_objects
from gpustack_sim.apiserver.certificates import check_conditions, set_requestor
from gpustack_sim.apiserver.counters import REJECTED, RequestCounters
from gpustack_sim.apiserver.errors import (
    ApiError,
    bad_request,
    not_found,
    stale_conflict,
    status_body,
)
from gpustack_sim.apiserver.faults import Fault, Faults
from gpustack_sim.apiserver.gc import BackgroundControllers
from gpustack_sim.apiserver.health import add_health_routes
from gpustack_sim.apiserver.kinds import BUILTIN_KINDS, KUBERNETES_VERSION, KindInfo, KindRegistry
from gpustack_sim.apiserver.patches import json_patch, merge_patch
from gpustack_sim.apiserver.rbac import CURRENT_REQUEST, RbacAuthorizer, request_attributes
from gpustack_sim.apiserver.reviews import add_review_routes
from gpustack_sim.apiserver.selectors import (
    make_matcher,
    parse_field_selector,
    parse_label_selector,
)
from gpustack_sim.apiserver.store import Event, Store, key_of
from gpustack_sim.apiserver.tls import ClusterCA, user_from_peer
from gpustack_sim.apiserver.watch import WatchQueue, WatchStream, error_line

log = structlog.get_logger(__name__)

DEFAULT_NAMESPACES = ("default", "kube-system", "gpustack-system")
DEFAULT_WATCH_QUEUE_LIMIT = 10_000
"""Events one watch may fall behind before the server ends it (kube-apiserver bounds it too)."""
_BUILTIN_RESOURCES = {(k.group, k.plural) for k in BUILTIN_KINDS}
# Built-in kinds whose DELETE returns the deleted object (like custom resources do).
_DELETE_RETURNS_OBJECT = {("", "pods"), ("", "namespaces"), ("", "services")}
_JSON = "application/json"
_APPLY = "application/apply-patch+yaml"
_MERGE = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_STRATEGIC = "application/strategic-merge-patch+json"
_PROTOBUF = "application/vnd.kubernetes.protobuf"
_TRUE = ("true", "1")
KUBERNETES_SERVICE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {
        "name": "kubernetes",
        "namespace": "default",
        "labels": {"component": "apiserver", "provider": "kubernetes"},
    },
    "spec": {
        "type": "ClusterIP",
        "clusterIP": "10.96.0.1",
        "clusterIPs": ["10.96.0.1"],
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "internalTrafficPolicy": "Cluster",
        "sessionAffinity": "None",
        "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
    },
}
"""The Service every cluster has for its API server (docs/simulator.md, "Server parts")."""
ADMIN_CERT_USER = "kubernetes-admin"
"""The user of the administrator's client certificate in a TLS server's kubeconfig."""
_WARNINGS = web.RequestKey("sim_warnings", list[str])


@dataclass(frozen=True)
class Target:
    """What a resource URL names."""

    info: KindInfo
    namespace: str | None
    name: str | None
    subresource: str | None


def _dump(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def _json_response(payload: Any, status: int = 200) -> web.Response:
    return web.Response(body=_dump(payload), status=status, content_type=_JSON)


def _error_response(err: ApiError) -> web.Response:
    # kube-apiserver's encoder ends the Status with a newline; clients quote it verbatim.
    resp = web.Response(body=_dump(err.status) + b"\n", status=err.code, content_type=_JSON)
    for key, value in err.headers.items():
        resp.headers[key] = value
    return resp


def _unsupported(why: str) -> ApiError:
    return ApiError(
        415,
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{_JSON}, application/yaml ({why})",
        "UnsupportedMediaType",
    )


def _render(info: KindInfo, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A stored object as the requested version (shallow copy: serialize it at once)."""
    return {**obj, "apiVersion": info.api_version, "kind": info.kind}


def _list_item(info: KindInfo, obj: Mapping[str, Any]) -> dict[str, Any]:
    # Built-in kinds' LIST items carry no kind/apiVersion on a real server; CRs keep theirs.
    if (info.group, info.plural) in _BUILTIN_RESOURCES:
        return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    return _render(info, obj)


def _manager(request: web.Request) -> str:
    manager = request.query.get("fieldManager")
    if manager:
        return manager
    agent = request.headers.get("User-Agent", "unknown")
    return agent.split("/", 1)[0].strip() or "unknown"


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PARSED: dict[tuple[str, int], list[dict[str, Any]]] = {}


def _load_file(file: Path) -> list[dict[str, Any]]:
    """The documents of one YAML/JSON file, parsed once per file version (CRDs are big)."""
    key = (str(file.resolve()), file.stat().st_mtime_ns)
    cached = _PARSED.get(key)
    if cached is None:
        cached = []
        with file.open(encoding="utf-8") as fh:
            for doc in yaml.load_all(fh, Loader=_LOADER):
                if isinstance(doc, dict):
                    cached.extend(doc.get("items", []) if doc.get("kind") == "List" else [doc])
        _PARSED[key] = cached
    return cached  # callers copy what they keep


def _load_documents(path: Path) -> list[dict[str, Any]]:
    files = (
        sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
        if path.is_dir()
        else [path]
    )
    return [doc for file in files for doc in _load_file(file)]


class SimServer:
    """A simulated kube-apiserver on 127.0.0.1 (random port). See the module docstring.

    ``watch_history`` bounds the retained watch events per resource (older RVs answer 410);
    ``bookmark_interval`` is the seconds between BOOKMARK events on idle watches that asked
    for them; ``watch_queue_limit`` bounds the events one watch may fall behind before it is
    ended; ``seed`` seeds the ``share`` of injected faults.
    """

    def __init__(
        self,
        crd_paths: Sequence[Path] = (),
        watch_history: int = 1000,
        namespaces: Sequence[str] = DEFAULT_NAMESPACES,
        *,
        seed: int | None = None,
        bookmark_interval: float = 1.0,
        watch_queue_limit: int = DEFAULT_WATCH_QUEUE_LIMIT,
        host: str = "127.0.0.1",
        port: int = 0,
        cel_rules: bool = True,
        authenticator: TokenAuthenticator | None = None,
        tls: bool = False,
    ) -> None:
        self.registry = KindRegistry.with_builtins()
        self.kubernetes_version: tuple[int, int, int] = KUBERNETES_VERSION
        """What ``/version`` reports; a test sets an older release to see what the operator
        says about it (the kinds served stay those of the newest)."""
        self.store = Store(self.registry, watch_history)
        self.store.cel_rules = (
            cel_rules  # CRDs' x-kubernetes-validations (gpustack_sim/apiserver/celrules.py)
        )
        self.authenticator = authenticator
        """With one, requests are authenticated by bearer token and authorized by RBAC."""
        self.authorizer = RbacAuthorizer(self.store)
        self.store.admission.extend(
            (set_requestor, check_conditions)
        )  # gpustack_sim/apiserver/certificates.py
        if authenticator is not None:
            self.store.admission.append(self.authorizer.admit)
        self.policies = PolicyAdmission(self.store)
        """Evaluates the stored ValidatingAdmissionPolicies
        (gpustack_sim/apiserver/admissionpolicy.py)."""
        self.store.admission.append(self.policies.admit)
        self.faults = Faults(seed)
        self.counters = RequestCounters()
        self.controllers = BackgroundControllers(self.store)
        self.evictions = eviction.Evictions(self.store)
        self.bookmark_interval = bookmark_interval
        if watch_queue_limit < 1:
            raise ValueError(f"watch_queue_limit must be at least 1, got {watch_queue_limit}")
        self.watch_queue_limit = watch_queue_limit
        self._host, self._port = host, port
        self.ca: ClusterCA | None = ClusterCA() if tls else None
        """With ``tls``: the cluster's CA (serves HTTPS, signs client certificates)."""
        self._runner: web.AppRunner | None = None
        self._watches: set[WatchQueue] = set()
        self._closing = False
        for ns in namespaces:
            self.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        if "default" in namespaces:
            self.store.create(KUBERNETES_SERVICE)
        if authenticator is not None:
            for obj in bootstrap_objects():  # gpustack_sim/apiserver/bootstrappolicy.py
                self.store.create(obj)
        for path in crd_paths:
            self.load_crds(_load_documents(Path(path)))
        self.app = self._build_app()

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        """``http(s)://host:port`` of the started server."""
        if self._runner is None:
            raise RuntimeError("the simulated API server is not started; call start() first")
        scheme = "https" if self.ca is not None else "http"
        return f"{scheme}://{self._host}:{self._port}"

    async def start(self) -> SimServer:
        """Listen (port 0 picks a free one) and start the background controllers; idempotent."""
        if self._runner is not None:
            return self
        self._closing = False
        runner = web.AppRunner(
            self.app, handle_signals=False, access_log=None, shutdown_timeout=2.0
        )
        await runner.setup()
        context = self.ca.server_context(self._host) if self.ca is not None else None
        site = web.TCPSite(runner, self._host, self._port, ssl_context=context)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self._port = sockets[0].getsockname()[1]
        self._runner = runner
        self.controllers.start()
        log.debug("simulated API server started", url=self.url)
        return self

    async def stop(self) -> None:
        """End every open watch cleanly, stop the background controllers, close the listener."""
        if self._runner is None:
            return
        self._closing = True
        for queue in list(self._watches):
            queue.put_nowait(None)
        await self.controllers.stop()
        await self._runner.cleanup()
        self._runner = None

    def end_watches(self) -> int:
        """End every open watch cleanly, as an API server restart would; clients watch again
        (through the fault table, so injected faults then hit their next requests). Returns
        how many were ended."""
        open_watches = list(self._watches)
        for queue in open_watches:
            queue.put_nowait(None)
        return len(open_watches)

    async def settle(self, within: float = 10.0) -> None:
        """Wait until the garbage collector and namespace controller have nothing left to do.

        Raises TimeoutError after ``within`` seconds (work that never finishes, such as an
        object held by a finalizer nobody removes, does not keep them busy: they wait for it).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while not self.controllers.idle:
            if loop.time() > deadline:
                raise TimeoutError(f"background controllers still busy after {within}s")
            await asyncio.sleep(0.005)

    async def __aenter__(self) -> SimServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def write_kubeconfig(
        self,
        path: Path,
        context: str = "sim",
        token: str | None = None,
        *,
        client_cert: tuple[str, Sequence[str]] | None = None,
    ) -> Path:
        """Write a kubeconfig (cluster, user, context) selecting this server; with *token* its
        requests carry it as a bearer token; with ``client_cert=(user, groups)`` (a TLS
        server) they present a client certificate for that user, signed by the cluster's CA.
        A TLS server's kubeconfig without either is the administrator's (a client certificate
        in ``system:masters``, as kind and kubeadm write it).
        """
        cluster: dict[str, Any] = {"server": self.url}
        user: dict[str, Any] = {"token": token} if token else {}
        if self.ca is not None and not token and client_cert is None:
            client_cert = (ADMIN_CERT_USER, ("system:masters",))
        if self.ca is not None:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca.pem).decode()
            if client_cert is not None:
                cert, key = self.ca.issue_client(client_cert[0], client_cert[1])
                user["client-certificate-data"] = base64.b64encode(cert).decode()
                user["client-key-data"] = base64.b64encode(key).decode()
        elif client_cert is not None:
            raise ValueError("client certificates need a TLS server (SimServer(tls=True))")
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": cluster}],
            "users": [{"name": context, "user": user}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": context, "user": context, "namespace": "default"},
                }
            ],
            "current-context": context,
            "preferences": {},
        }
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        return path

    def load_crds(self, objs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Register CustomResourceDefinitions (other documents are skipped); returns them."""
        out = []
        for obj in objs:
            if obj.get("kind") == "CustomResourceDefinition":
                out.append(self.store.register_crd(obj))
        return out

    # ------------------------------------------------------------------ routing

    def _build_app(self) -> web.Application:
        app = web.Application(
            middlewares=[self._errors, self._authorize], client_max_size=64 * 1024 * 1024
        )
        discovery.add_discovery_routes(app, self)
        add_health_routes(app)
        add_review_routes(app, self)
        _accept_trailing_slashes(app)
        app.router.add_route("*", "/api/v1/{tail:.+}", self._core)
        app.router.add_route("*", "/apis/{group}/{version}/{tail:.+}", self._grouped)
        return app

    @web.middleware
    async def _errors(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:
            if request.method not in ("GET", "HEAD"):  # a write the server turned down
                self.counters.record(REJECTED, str(err.code))
            return _error_response(err)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return _json_response(status_body(exc.status, exc.text or exc.reason, None), exc.status)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.exception("simulated API server request failed", path=request.path)
            return _json_response(
                status_body(500, f"internal error in the simulated API server: {exc!r}"), 500
            )

    @web.middleware
    async def _authorize(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """With an authenticator: 401 for an unknown token, 403 for what RBAC does not allow
        (sim/gpustack_sim/apiserver/rbac.py). The request's attributes are kept for admission,
        also without one (then the requester is the administrator)."""
        if self.authenticator is None:  # every request is the administrator's
            attrs = request_attributes(request.method, request.path, request.query, ADMIN)
            reset = CURRENT_REQUEST.set(attrs)
            try:
                return await handler(request)
            finally:
                CURRENT_REQUEST.reset(reset)
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        user = _certificate_user(request) or ANONYMOUS
        if token.strip():
            found = self.authenticator.authenticate(token.strip())
            if scheme.lower() != "bearer" or found is None:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            user = found
        attrs = request_attributes(request.method, request.path, request.query, user)
        self.authorizer.authorize(attrs)
        reset = CURRENT_REQUEST.set(attrs)
        try:
            return await handler(request)
        finally:
            CURRENT_REQUEST.reset(reset)

    async def _core(self, request: web.Request) -> web.StreamResponse:
        return await self._dispatch(request, "", "v1", request.match_info["tail"])

    async def _grouped(self, request: web.Request) -> web.StreamResponse:
        info = request.match_info
        return await self._dispatch(request, info["group"], info["version"], info["tail"])

    def _resolve(self, group: str, version: str, tail: str) -> Target:
        segs = [s for s in tail.split("/") if s]

        def missing() -> ApiError:
            return ApiError(404, "the server could not find the requested resource", "NotFound")

        if len(segs) >= 3 and segs[0] == "namespaces":
            info = self.registry.lookup(group, version, segs[2])
            if info is not None and info.namespaced and len(segs) <= 5:
                return Target(
                    info,
                    segs[1],
                    segs[3] if len(segs) > 3 else None,
                    segs[4] if len(segs) > 4 else None,
                )
            ns_info = self.registry.lookup(group, version, "namespaces")
            if ns_info is not None and len(segs) == 3:
                return Target(ns_info, None, segs[1], segs[2])
            raise missing()
        if not segs or len(segs) > 3:
            raise missing()
        info = self.registry.lookup(group, version, segs[0])
        if info is None:
            raise missing()
        name = segs[1] if len(segs) > 1 else None
        if info.namespaced and name is not None:
            raise missing()
        return Target(info, None, name, segs[2] if len(segs) > 2 else None)

    async def _dispatch(
        self, request: web.Request, group: str, version: str, tail: str
    ) -> web.StreamResponse:
        target = self._resolve(group, version, tail)
        if target.subresource == "scale" and scale.scale_paths(target.info) is not None:
            return await self._scale(request, target)
        if target.subresource == "eviction" and podtermination.is_pod(target.info):
            return await self._evict(request, target)
        if target.subresource is not None and not (
            (target.subresource == "status" and target.info.has_status)
            or target.subresource in target.info.subresources
        ):
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        method = request.method
        is_apply = method == "PATCH" and request.content_type == _APPLY
        verb = self._verb(request, target)
        kind = target.info.kind
        self.counters.record(verb, kind)
        if is_apply:
            self.counters.record("apply", kind)
        fault = self.faults.pick("apply" if is_apply else verb, kind)
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)
        if verb == "watch":
            return await self._watch(request, target, fault)
        if fault is not None and not fault.cut_watch:
            err = fault.error()
            if err is not None:
                raise err
        handler = {
            "get": self._get,
            "list": self._list,
            "create": self._create,
            "update": self._update,
            "patch": self._patch,
            "delete": self._delete,
            "deletecollection": self._delete_collection,
        }[verb]
        return await handler(request, target)

    @staticmethod
    def _verb(request: web.Request, target: Target) -> str:
        method, named = request.method, target.name is not None
        if method == "GET":
            watch = request.query.get("watch", "").lower() in _TRUE
            if named:  # a named watch follows one object (the older form of a name selector)
                return "watch" if watch and not target.subresource else "get"
            return "watch" if watch else "list"
        allowed = {
            ("POST", False): "create",
            ("PUT", True): "update",
            ("PATCH", True): "patch",
            ("DELETE", True): "delete",
            ("DELETE", False): "deletecollection",
        }
        verb = allowed.get((method, named))
        if verb is None or (verb == "create" and target.subresource):
            raise ApiError(
                405,
                f"the server does not allow this method on the requested resource: {method}",
                "MethodNotAllowed",
            )
        if verb == "create" and target.info.namespaced and target.namespace is None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        return verb

    # ------------------------------------------------------------------ helpers

    @staticmethod
    async def _body(request: web.Request, *, yaml_ok: bool = False) -> Any:
        ctype = request.content_type
        if ctype == _PROTOBUF:
            try:
                return protobuf.decode(await request.read())
            except (protobuf.ProtobufError, UnicodeDecodeError) as exc:
                raise _unsupported(f"{ctype}: {exc}") from None
        if "cbor" in ctype or "protobuf" in ctype:
            raise _unsupported(f"{ctype} bodies are not supported by the simulated API server")
        yaml_ok = yaml_ok or ctype == "application/yaml"
        raw = await request.read()
        if not raw:
            raise bad_request("the request body is empty; send a JSON object")
        try:
            return json.loads(raw)
        except ValueError as exc:
            if not yaml_ok:
                raise bad_request(f"the request body is not valid JSON: {exc}") from None
        try:
            return yaml.load(raw, Loader=_LOADER)  # CSafeLoader when available
        except yaml.YAMLError as exc:
            raise bad_request(
                f"the request body is not valid {'YAML' if yaml_ok else 'JSON'}: {exc}"
            ) from None

    @staticmethod
    def _check_type(body: Any, info: KindInfo) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != info.api_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({info.api_version})"
            )
        if kind and kind != info.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({info.kind})"
            )
        meta = body.get("metadata")
        if meta is None:
            body["metadata"] = {}
        elif not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        return body

    @staticmethod
    def _check_identity(body: dict[str, Any], target: Target) -> None:
        meta = body["metadata"]
        if meta.get("name") and meta["name"] != target.name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({target.name})"
            )
        meta["name"] = target.name
        if target.info.namespaced:
            if meta.get("namespace") and meta["namespace"] != target.namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = target.namespace

    def _respond(
        self, request: web.Request, info: KindInfo, obj: Mapping[str, Any], status: int = 200
    ) -> web.Response:
        payload = _render(info, obj)
        if status == 200 and request.method == "GET":
            table = discovery.maybe_table(request, info, payload)
            if table is not None:
                return _json_response(table)
        resp = _json_response(payload, status)
        for warning in request.get(_WARNINGS, []):
            resp.headers.add("Warning", f"299 - {json.dumps(warning)}")
        return resp

    def _field_validation(
        self, request: web.Request, info: KindInfo, obj: Mapping[str, Any]
    ) -> None:
        """``fieldValidation``: Strict answers 400 for fields the CRD schema does not know;
        Warn (the default) and Ignore let pruning drop them (Warn adds a ``Warning`` header).
        """
        mode = request.query.get("fieldValidation", "Warn")
        if mode not in ("Strict", "Warn", "Ignore"):
            raise bad_request(
                f'fieldValidation must be one of "Ignore", "Warn" or "Strict", not "{mode}"'
            )
        if mode == "Ignore":
            return
        unknown = self.store.schema.unknown_fields(info, obj)
        if not unknown:
            return
        if mode == "Strict":
            listed = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise bad_request(f"strict decoding error: {listed}")
        request[_WARNINGS] = [f'unknown field "{u}"' for u in unknown]

    @staticmethod
    def _dry_run(request: web.Request) -> bool:
        return "All" in request.query.getall("dryRun", [])

    # ------------------------------------------------------------------ verbs

    async def _get(self, request: web.Request, target: Target) -> web.StreamResponse:
        assert target.name is not None
        obj = self.store.get_stored(target.info, target.namespace, target.name)
        return self._respond(request, target.info, obj)

    def _matcher(self, request: web.Request, info: KindInfo, name: str | None = None) -> Any:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), info.kind)
        if name is not None:
            fields += parse_field_selector(f"metadata.name={name}", info.kind)
        return make_matcher(labels, fields)

    async def _list(self, request: web.Request, target: Target) -> web.StreamResponse:
        info, query = target.info, request.query
        _check_list_options(query)
        matcher = self._matcher(request, info)
        limit_text = query.get("limit")
        try:
            limit = int(limit_text) if limit_text else None
        except ValueError:
            raise bad_request(f"invalid limit {limit_text!r}: must be an integer") from None
        items, list_rv, token, remaining = self.store.list_page(
            info,
            target.namespace,
            matcher,
            limit,
            query.get("continue"),
            query.get("resourceVersion"),
            query.get("resourceVersionMatch"),
        )
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if token:
            meta["continue"] = token
            meta["remainingItemCount"] = remaining
        payload = {
            "kind": f"{info.kind}List",
            "apiVersion": info.api_version,
            "metadata": meta,
            "items": [_list_item(info, o) for o in items],
        }
        table = discovery.maybe_table(request, info, payload)
        return _json_response(table if table is not None else payload)

    async def _create(self, request: web.Request, target: Target) -> web.StreamResponse:
        if self.store.crd_terminating(target.info):
            raise crdcleanup.terminating_refusal(target.info)
        body = self._check_type(await self._body(request), target.info)
        self._field_validation(request, target.info, body)
        obj = self.store.create_as(
            target.info,
            body,
            namespace=target.namespace,
            manager=_manager(request),
            dry_run=self._dry_run(request),
        )
        return self._respond(request, target.info, obj, 201)

    async def _update(self, request: web.Request, target: Target) -> web.StreamResponse:
        body = self._check_type(await self._body(request), target.info)
        self._check_identity(body, target)
        self._field_validation(request, target.info, body)
        obj = self.store.update_as(
            target.info,
            body,
            namespace=target.namespace,
            name=target.name,
            subresource=target.subresource,
            manager=_manager(request),
            dry_run=self._dry_run(request),
        )
        return self._respond(request, target.info, obj)

    async def _patch(self, request: web.Request, target: Target) -> web.StreamResponse:
        info, name = target.info, target.name
        assert name is not None
        ctype = request.content_type
        if ctype == _APPLY:
            return await self._apply(request, target)
        patch = await self._body(request)
        live = self.store.get_stored(info, target.namespace, name)
        current = _render(info, live)
        if ctype == _MERGE:
            if not isinstance(patch, dict):
                raise bad_request("a merge patch must be a JSON object")
            patched = merge_patch(current, patch)
        elif ctype == _JSON_PATCH:
            patched = json_patch(current, patch)
        elif ctype == _STRATEGIC:
            patched = self._strategic(current, patch, info)
        else:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {_JSON_PATCH}, {_MERGE}, {_APPLY}, {_STRATEGIC}",
                "UnsupportedMediaType",
            )
        patched = self._check_type(patched, info)
        self._field_validation(request, info, patched)
        rv = patched["metadata"].get("resourceVersion")
        if rv and rv != live["metadata"]["resourceVersion"]:
            raise stale_conflict(info, name)
        self._check_identity(patched, target)
        obj = self.store.update_as(
            info,
            patched,
            namespace=target.namespace,
            name=name,
            subresource=target.subresource,
            manager=_manager(request),
            dry_run=self._dry_run(request),
        )
        return self._respond(request, info, obj)

    @staticmethod
    def _strategic(current: dict[str, Any], patch: Any, info: KindInfo) -> dict[str, Any]:
        try:
            from gpustack_sim.apiserver import strategic
        except ImportError:
            raise ApiError(
                415,
                "strategic merge patch is not available in this simulated API server yet; "
                f"use {_MERGE} or {_APPLY}",
                "UnsupportedMediaType",
            ) from None
        if not isinstance(patch, dict):
            raise bad_request("a strategic merge patch must be a JSON object")
        try:
            result: dict[str, Any] = strategic.strategic_merge_patch(current, patch, info)
        except ValueError as exc:
            code = int(getattr(exc, "status_code", 400))
            raise ApiError(code, str(exc), getattr(exc, "reason", None)) from None
        return result

    async def _scale(self, request: web.Request, target: Target) -> web.StreamResponse:
        """GET, PUT or PATCH (merge or JSON patch) of the ``/scale`` subresource."""
        info, name = target.info, target.name
        if name is None or request.method not in ("GET", "PUT", "PATCH"):
            raise ApiError(
                405,
                "the server does not allow this method on the requested resource: "
                f"{request.method}",
                "MethodNotAllowed",
            )
        self.counters.record("get" if request.method == "GET" else "update", info.kind)
        live = self.store.get_stored(info, target.namespace, name)
        current = scale.read_scale(info, _render(info, live))
        if request.method == "GET":
            return _json_response(current)
        body = await self._body(request)
        if request.method == "PUT":
            wanted = body
        elif request.content_type == _JSON_PATCH:
            wanted = json_patch(current, body)
        elif isinstance(body, dict):
            wanted = merge_patch(current, body)
        else:
            raise bad_request("a patch of a Scale must be a JSON object")
        rv = ((wanted or {}).get("metadata") or {}).get("resourceVersion")
        if rv and rv != live["metadata"]["resourceVersion"]:
            raise stale_conflict(info, name)
        obj = self.store.update_as(
            info,
            scale.with_replicas(info, _render(info, live), wanted),
            namespace=target.namespace,
            name=name,
            manager=_manager(request),
            dry_run=self._dry_run(request),
        )
        return _json_response(scale.read_scale(info, _render(info, obj)))

    async def _evict(self, request: web.Request, target: Target) -> web.StreamResponse:
        """POST of a policy/v1 (or v1beta1) Eviction to ``pods/<name>/eviction``."""
        if request.method != "POST" or target.name is None or target.namespace is None:
            raise ApiError(
                405,
                "the server does not allow this method on the requested resource: "
                f"{request.method}",
                "MethodNotAllowed",
            )
        self.counters.record("create", "Eviction")
        body = await self._body(request)
        if not isinstance(body, dict):
            raise bad_request("the request body must be a JSON object")
        options = eviction.delete_options(body, target.name, request.query.getall("dryRun", []))
        status = self.evictions.evict(target.info, target.namespace, target.name, options)
        return _json_response(status, 201)

    async def _apply(self, request: web.Request, target: Target) -> web.StreamResponse:
        info, name = target.info, target.name
        assert name is not None
        manager = request.query.get("fieldManager")
        if not manager:
            raise ApiError(
                422,
                f'PATCH {info.group_resource} "{name}" is invalid: fieldManager: Required value: '
                "is required for apply patch",
                "Invalid",
                {
                    "name": name,
                    "kind": info.kind,
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: is required for apply patch",
                            "field": "fieldManager",
                        }
                    ],
                },
            )
        applied = await self._body(request, yaml_ok=True)
        if (
            not isinstance(applied, dict)
            or not applied.get("apiVersion")
            or not applied.get("kind")
        ):
            raise bad_request(
                "an apply patch must be an object with apiVersion, kind and metadata.name"
            )
        applied = self._check_type(applied, info)
        self._field_validation(request, info, applied)
        self._check_identity(applied, target)
        force = request.query.get("force", "").lower() in _TRUE
        sub = target.subresource
        live = self.store.resource(info).objects.get(
            ((target.namespace or "") if info.namespaced else "", name)
        )
        rv = applied["metadata"].get("resourceVersion")
        if rv and (live is None or rv != live["metadata"]["resourceVersion"]):
            raise stale_conflict(info, name)
        dry_run = self._dry_run(request)
        if live is None:
            if sub:
                raise not_found(info, name)
            new = ssa.apply(None, applied, manager, info, sub, force)
            obj = self.store.create_as(
                info,
                new,
                namespace=target.namespace,
                managed_fields=new["metadata"].get("managedFields") or [],
                dry_run=dry_run,
            )
            return self._respond(request, info, obj, 201)
        new = ssa.apply(_render(info, live), applied, manager, info, sub, force)
        obj = self.store.update_as(
            info,
            new,
            namespace=target.namespace,
            name=name,
            subresource=sub,
            apply_manager=manager,
            dry_run=dry_run,
        )
        return self._respond(request, info, obj)

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        options: dict[str, Any] = {}
        if raw.strip() and request.content_type == _PROTOBUF:
            try:
                options = protobuf.decode(raw)
            except (protobuf.ProtobufError, UnicodeDecodeError) as exc:
                raise _unsupported(f"{_PROTOBUF}: {exc}") from None
        elif raw.strip():
            try:
                options = json.loads(raw)
            except ValueError as exc:
                raise bad_request(f"the DeleteOptions body is not valid JSON: {exc}") from None
            if not isinstance(options, dict):
                raise bad_request("the DeleteOptions body must be a JSON object")
        query = request.query
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        if query.get("orphanDependents", "").lower() in _TRUE or options.get("orphanDependents"):
            options.setdefault("propagationPolicy", "Orphan")
        if "gracePeriodSeconds" in query:
            try:
                options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
            except ValueError:
                raise bad_request(
                    f"gracePeriodSeconds must be an integer, not {query['gracePeriodSeconds']!r}"
                ) from None
        return options

    async def _delete(self, request: web.Request, target: Target) -> web.StreamResponse:
        assert target.name is not None
        options = await self._delete_options(request)
        obj = self.store.delete_as(
            target.info,
            target.namespace,
            target.name,
            preconditions=options.get("preconditions"),
            propagation=options.get("propagationPolicy"),
            dry_run=self._dry_run(request) or "All" in (options.get("dryRun") or []),
            grace_period=options.get("gracePeriodSeconds"),
        )
        info = target.info
        still_there = self.store.resource(info).objects.get(key_of(obj)) is not None
        if (
            still_there
            or (info.group, info.plural) not in _BUILTIN_RESOURCES
            or ((info.group, info.plural) in _DELETE_RETURNS_OBJECT)
        ):
            return self._respond(request, info, obj)
        # Most built-in kinds answer an immediate deletion with a Success Status.
        details: dict[str, Any] = {"name": target.name, "kind": info.plural}
        if info.group:
            details["group"] = info.group
        details["uid"] = obj["metadata"].get("uid")
        return _json_response(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            }
        )

    async def _delete_collection(self, request: web.Request, target: Target) -> web.StreamResponse:
        info = target.info
        options = await self._delete_options(request)
        matcher = self._matcher(request, info)
        deleted = []
        for key, _ in self.store.select(info, target.namespace, matcher):
            with contextlib.suppress(ApiError):
                deleted.append(
                    self.store.delete_as(
                        info,
                        key[0] or None,
                        key[1],
                        propagation=options.get("propagationPolicy"),
                        dry_run=self._dry_run(request),
                    )
                )
        payload = {
            "kind": f"{info.kind}List",
            "apiVersion": info.api_version,
            "metadata": {"resourceVersion": str(self.store.resource_version)},
            "items": [_list_item(info, o) for o in deleted],
        }
        return _json_response(payload)

    # ------------------------------------------------------------------ watch

    async def _watch(
        self, request: web.Request, target: Target, fault: Fault | None
    ) -> web.StreamResponse:
        info, query = target.info, request.query
        namespace = target.namespace
        matcher = self._matcher(request, info, target.name)
        bookmarks = query.get("allowWatchBookmarks", "").lower() in _TRUE
        timeout_text = query.get("timeoutSeconds")
        try:
            timeout = float(timeout_text) if timeout_text else None
        except ValueError:
            raise bad_request(f"invalid timeoutSeconds {timeout_text!r}") from None
        in_stream_error: ApiError | None = None
        if fault is not None and not fault.cut_watch:
            err = fault.error()
            if err is not None and err.code != 410:
                raise err
            in_stream_error = err
        queue: WatchQueue = asyncio.Queue()
        initial: list[Event] = []
        unsubscribe: Callable[[], None] = lambda: None  # noqa: E731
        # WatchList: the current state, then a bookmark marking the end of the initial events.
        initial_events = query.get("sendInitialEvents", "").lower() in _TRUE
        snapshot_rv = 0
        if in_stream_error is None:
            try:
                start_rv = None if initial_events else query.get("resourceVersion")
                initial, unsubscribe = self.store.watch_start(
                    info, start_rv, self._bounded_sink(queue)
                )
                snapshot_rv = self.store.resource_version
            except ApiError as err:
                if err.code != 410:
                    raise
                in_stream_error = err
        resp = web.StreamResponse(
            status=200, headers={"Content-Type": _JSON, "Cache-Control": "no-cache, private"}
        )
        resp.enable_chunked_encoding()
        stream = WatchStream(
            request=request,
            response=resp,
            info=info,
            namespace=namespace,
            matcher=matcher,
            queue=queue,
            current_rv=lambda: self.store.resource_version,
            closing=lambda: self._closing,
            bookmarks=bookmarks,
            bookmark_interval=self.bookmark_interval,
            timeout=timeout,
            end_of_initial=snapshot_rv if initial_events else None,
            cut=fault is not None and fault.cut_watch,
            cut_after=fault.after_events if fault is not None else None,
            write_delay=fault.write_delay if fault is not None else 0.0,
        )
        self._watches.add(queue)
        try:
            await resp.prepare(request)
            if in_stream_error is not None:
                await resp.write(error_line(in_stream_error.status))
                await resp.write_eof()
                return resp
            await stream.run(initial)
        except ConnectionError:  # the client went away, or a fault cut the stream
            pass
        finally:
            unsubscribe()
            self._watches.discard(queue)
        return resp

    def _bounded_sink(self, queue: WatchQueue) -> Callable[[Event], None]:
        """Feeds *queue*; a watch ``watch_queue_limit`` events behind is ended instead.

        kube-apiserver ends a watcher that cannot keep up in the same way: the client watches
        again from its last resourceVersion (or lists again on 410), and the server's memory
        stays bounded however slow a client reads.
        """
        ended = False

        def deliver(event: Event) -> None:
            nonlocal ended
            if ended:
                return
            if queue.qsize() >= self.watch_queue_limit:
                ended = True
                log.warning(
                    "simulated API server: ending a watch that fell too far behind",
                    limit=self.watch_queue_limit,
                )
                queue.put_nowait(None)
                return
            queue.put_nowait(event)

        return deliver


def _check_list_options(query: Mapping[str, str]) -> None:
    """422 for a LIST whose ``resourceVersionMatch`` the API server refuses
    (docs/simulator.md, "Built-in kinds")."""
    match = query.get("resourceVersionMatch", "")
    if not match:
        return
    version = query.get("resourceVersion", "")
    problems = []
    if not version:
        problems.append("resourceVersionMatch is forbidden unless resourceVersion is provided")
    if query.get("continue"):
        problems.append("resourceVersionMatch is forbidden when continue is provided")
    if match not in ("Exact", "NotOlderThan"):
        problems.append(
            f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan", ""'
        )
    if match == "Exact" and version == "0":
        problems.append('resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
    if problems:
        text = ", ".join(
            f"resourceVersionMatch: {p}"
            if p.startswith("Unsupported")
            else f"resourceVersionMatch: Forbidden: {p}"
            for p in problems
        )
        raise ApiError(422, f'ListOptions.meta.k8s.io "" is invalid: {text}', "Invalid")


def _certificate_user(request: web.Request) -> UserInfo | None:
    """The user of the request's verified client certificate, if it presented one."""
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    return user_from_peer(ssl_object.getpeercert()) if ssl_object is not None else None


def _accept_trailing_slashes(app: web.Application) -> None:
    """Serve every fixed route also with a trailing slash, as kube-apiserver does.

    kr8s asks for ``/version/`` and ``/apis/<group>/<version>/`` (it joins an empty path).
    """
    for route in list(app.router.routes()):
        canonical = route.resource.canonical if route.resource is not None else ""
        if canonical and not canonical.endswith("/") and route.method != "HEAD":
            with contextlib.suppress(ValueError, RuntimeError):
                app.router.add_route(route.method, canonical + "/", route.handler)
