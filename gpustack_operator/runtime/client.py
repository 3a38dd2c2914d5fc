"""Kubernetes API access: one client per process, plain-dict objects, typed errors.

``runtime.credentials`` (kr8s) reads the configuration and credentials (kubeconfig /
``--context`` / ``KUBECONFIG`` / ``~/.kube/config`` / in-cluster service account, exec plugins,
token re-reads); every request and watch then goes over ``runtime.transport`` (aiohttp) with
the kubeconfig's TLS settings, proxy and token (docs/performance.md says why aiohttp).

What this module adds over raw HTTP (the errors live in ``runtime.errors`` and are
re-exported here):

- one request path (:meth:`Client._call`) for every verb and watch: the rate limiter,
  metrics, the mapping of HTTP errors to typed errors and one re-read of credentials on 401;
- explicit timeouts on every request: one deadline for the whole exchange; a watch has one
  for its head and then an inactivity timeout of its own (:class:`WatchStalled`);
- ``rest_client_requests_total`` / ``rest_client_request_duration_seconds`` metrics;
- an optional client-side QPS/burst limiter, as client-go has;
- the write fence of a leader-only write (``fence=``), checked by the transport once the
  connection is ready, after the limiter and every other wait (docs/runtime.md, "Write
  fence");
- every answer typed, whatever its body holds: not JSON, nested too deeply or of the wrong
  shape is an :class:`ApiError` (reason ``InvalidResponse``), never a ``TypeError``;
- no retries, except one after re-reading credentials on 401: callers (the informer, the
  work queue) own retry policy, so a failure is never retried twice over.
  ``TooManyRequests.retry_after`` carries the server's ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote, urlencode, urlsplit

import anyio
import structlog
from prometheus_client import Counter, Histogram

from .. import __version__
from .backoff import TokenBucket
from .credentials import CredentialError, Credentials, load_credentials
from .errors import (
    AlreadyExists,
    ApiError,
    ApiUnavailable,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ProtocolViolation,
    ResponseTooLarge,
    ServerError,
    TooManyRequests,
    Unauthorized,
    UnsendableRequest,
    WatchInterrupted,
    WatchStalled,
    error_from_response,
    error_from_status,
)
from .fence import WriteFence
from .jsondecode import decode_object, dumps, loads
from .metrics import REST_CLIENT_LATENCY, REST_CLIENT_REQUESTS
from .resources import Resource
from .transport import Answer, Limits, StreamedAnswer, Transport

__all__ = [
    "AlreadyExists",
    "ApiError",
    "ApiUnavailable",
    "BadRequest",
    "Client",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "Limits",
    "ListResult",
    "NotFound",
    "ProtocolViolation",
    "ResponseTooLarge",
    "ServerError",
    "TooManyRequests",
    "Unauthorized",
    "UnsendableRequest",
    "WatchEvent",
    "WatchInterrupted",
    "WatchStalled",
    "WatchStream",
    "error_from_status",
]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
PatchType = Literal["merge", "json", "strategic"]
_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
_APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
_JSON_CONTENT_TYPE = "application/json"
DEFAULT_TIMEOUT = 30.0
DEFAULT_WATCH_INACTIVITY_TIMEOUT = 70.0
_USER_AGENT = f"gpustack-operator/{__version__}"
WATCH_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


# --- results --------------------------------------------------------------------------------


@dataclass
class ListResult:
    """One LIST answer: the items and the collection's resourceVersion to watch from."""

    items: list[JSON]
    resource_version: str
    continue_token: str | None = None


@dataclass
class WatchEvent:
    """One watch event: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    object: JSON = field(repr=False)

    @property
    def resource_version(self) -> str:
        """The object's resourceVersion: where a re-watch resumes after this event."""
        meta = self.object.get("metadata")
        return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


class WatchStream:
    """Async iterator of :class:`WatchEvent` over one streaming watch response.

    Raises :class:`Gone` for an in-stream ERROR with code 410, another :class:`ApiError` for
    other ERROR events, :class:`WatchInterrupted` when the connection breaks,
    :class:`ResponseTooLarge` for an event beyond the line bound and :class:`WatchStalled`
    when nothing (not even a bookmark) arrives within the inactivity timeout. A clean end of
    the response (the server's ``timeoutSeconds``) ends iteration.
    """

    def __init__(self, lines: AsyncIterator[bytes], inactivity_timeout: float | None) -> None:
        self._lines = lines
        self._inactivity_timeout = inactivity_timeout
        self.events = 0

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> WatchEvent:
        while True:
            line = await self._next_line()
            if line.strip():
                event = self._decode(line)
                self.events += 1
                return event

    async def _next_line(self) -> bytes:
        """The next line; the transport raises typed errors when the stream breaks or a
        line exceeds its bound."""
        try:
            if self._inactivity_timeout is None:
                return await self._lines.__anext__()
            # asyncio's timeout costs a third of anyio's cancel scope (7 against 22 µs), and
            # this runs once per event; the runtime runs on asyncio only (aiohttp needs it).
            async with asyncio.timeout(self._inactivity_timeout):
                return await self._lines.__anext__()
        except TimeoutError as exc:
            raise WatchStalled(
                f"watch sent nothing for {self._inactivity_timeout:g}s; restarting it",
                reason="WatchStalled",
            ) from exc

    @staticmethod
    def _decode(line: bytes) -> WatchEvent:
        try:
            raw = loads(line)
        except ValueError as exc:
            raise ApiError(
                f"undecodable watch event: {line[:200]!r}", reason="InvalidWatchEvent"
            ) from exc
        kind = raw.get("type") if isinstance(raw, dict) else None
        obj = raw.get("object") if isinstance(raw, dict) else None
        if kind == "ERROR":
            code = obj.get("code") if isinstance(obj, dict) else None
            raise error_from_status(
                code if isinstance(code, int) else 500,
                obj if isinstance(obj, dict) else None,
                fallback_message="watch ERROR event without a Status",
            )
        if (
            not isinstance(kind, str)  # a list or an object is no set member
            or kind not in WATCH_EVENT_TYPES
            or not isinstance(obj, dict)
            or not isinstance(obj.get("metadata", {}), dict)
        ):
            raise ApiError(f"malformed watch event: {line[:200]!r}", reason="InvalidWatchEvent")
        return WatchEvent(str(kind), obj)

    async def aclose(self) -> None:
        """Finalise the line reader now rather than at garbage collection."""
        aclose = getattr(self._lines, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception as exc:  # the stream already broke; closing it fails the same way
                log.debug("watch_stream_close_failed", error=repr(exc))


@contextlib.contextmanager
def _credentials_failure(method: str, path: str) -> Iterator[None]:
    """A credential that cannot be refreshed (a token file gone, an exec plugin failing)
    fails the request as :class:`ApiUnavailable` (reason ``CredentialsUnavailable``), which
    every long-running loop retries with backoff (docs/runtime.md, "Failure types")."""
    try:
        yield
    except CredentialError as exc:
        raise ApiUnavailable(f"{method} {path}: {exc}", reason="CredentialsUnavailable") from exc


# --- the client -----------------------------------------------------------------------------


class Client:
    """The process's one API client: REST verbs on plain dicts, with one set of credentials.

    Build it with :meth:`connect`. Every method raises :class:`ApiError` subclasses and
    retries nothing (but one re-read of credentials on 401). Objects returned are the decoded
    JSON (``dict``).
    """

    def __init__(
        self,
        credentials: Credentials,
        *,
        qps: float | None = None,
        burst: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        watch_inactivity_timeout: float | None = DEFAULT_WATCH_INACTIVITY_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        rate_limiter: TokenBucket | None = None,
        limits: Limits | None = None,
    ) -> None:
        self._credentials = credentials
        self._timeout = timeout
        self.watch_inactivity_timeout = watch_inactivity_timeout
        self._clock = clock
        self._limiter = rate_limiter
        if self._limiter is None and qps is not None:
            # client-go's defaults pair burst with qps (5/10, 50/100): burst = 2 x qps.
            self._limiter = TokenBucket(qps, burst if burst is not None else max(1, int(qps * 2)))
        self.limits = limits or Limits()
        server = credentials.server
        self.host = urlsplit(server).netloc or server
        self._log = log.bind(host=self.host)
        self._auth_lock = anyio.Lock()
        self._auth_generation = 0
        self._transport: Transport | None = None
        self._transport_tls_generation = 0
        self._closed = False
        self._series: dict[tuple[str, str], tuple[Counter, Histogram]] = {}

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | Path | None = None,
        context: str | None = None,
        *,
        qps: float | None = None,
        burst: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - per-request timeout, kept by the client
        watch_inactivity_timeout: float | None = DEFAULT_WATCH_INACTIVITY_TIMEOUT,
        limits: Limits | None = None,
        credentials: Credentials | None = None,
    ) -> Client:
        """Load credentials (unless given) and check the server answers ``/version``.

        Credentials come from *kubeconfig* (a path, or ``a:b`` paths), else ``KUBECONFIG``,
        else ``~/.kube/config``, else the in-cluster service account; *context* picks a
        kubeconfig context (``runtime.credentials``).
        """
        if credentials is None:
            credentials = await load_credentials(kubeconfig, context)
        client = cls(
            credentials,
            qps=qps,
            burst=burst,
            timeout=timeout,
            watch_inactivity_timeout=watch_inactivity_timeout,
            limits=limits,
        )
        try:
            async with client._call("GET", "/version") as answer:
                _decode_object(answer)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await client.close()
            raise
        return client

    @property
    def credentials(self) -> Credentials:
        """The server and credentials every request uses."""
        return self._credentials

    async def close(self) -> None:
        """Close the HTTP connections for new requests. Open watches keep their connection
        until their task ends (cancel the informers first), so closing at shutdown starts no
        retry of every watch."""
        self._closed = True
        if self._transport is not None:
            await self._transport.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --- the one request path ---------------------------------------------------------------

    def _record(self, method: str, code: str, started: float) -> None:
        """Count the request and its latency; the labelled series are looked up once per
        (method, code), which costs far more than recording (about 16 of 18 µs)."""
        series = self._series.get((method, code))
        if series is None:
            series = self._series[(method, code)] = (
                REST_CLIENT_REQUESTS.labels(code=code, method=method, host=self.host),
                REST_CLIENT_LATENCY.labels(verb=method, host=self.host),
            )
        series[0].inc()
        series[1].observe(max(0.0, self._clock() - started))

    @contextlib.asynccontextmanager
    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = _JSON_CONTENT_TYPE,
        stream: bool = False,
        fence: WriteFence | None = None,
    ) -> AsyncIterator[Answer | StreamedAnswer]:
        """One HTTP exchange for *path* (already percent-encoded), with limiter, metrics,
        typed errors and one re-read of credentials on 401 (never on 403: RBAC denying one
        request must not rebuild anything).

        *fence* (a leader-only write's) is checked by the transport once the connection is
        ready: after the limiter, a credential refresh and connection set-up, before any
        byte is sent, on each attempt. A closed fence raises ``LeaseNotHeld`` and nothing
        is sent (docs/runtime.md, "Write fence").

        A one-shot exchange (the answer read whole) must finish within the client's timeout;
        a stream (a watch) must deliver its head within it and then has no deadline: the
        watch enforces its own inactivity timeout.
        """
        if self._limiter is not None:
            await self._limiter.acquire()
        target = f"{path}?{urlencode(params, quote_via=quote)}" if params else path
        payload = _encoded(method, path, body) if body is not None else None
        before_send = functools.partial(fence.check, f"{method} {path}") if fence else None
        started = self._clock()
        code = "<error>"
        async with contextlib.AsyncExitStack() as stack:
            try:
                for attempt in (1, 2):
                    with _credentials_failure(method, path):
                        transport = await self._current_transport(method, path)
                        authorization = await self._credentials.authorization()
                    headers = self._headers(
                        authorization, content_type if payload is not None else None
                    )
                    exchange = contextlib.AsyncExitStack()
                    answer: Answer | StreamedAnswer
                    try:
                        async with asyncio.timeout(self._timeout):  # see WatchStream._next_line
                            if stream:
                                answer = await exchange.enter_async_context(
                                    transport.stream(
                                        method, target, headers, before_send=before_send
                                    )
                                )
                            else:
                                answer = await transport.request(
                                    method, target, headers, payload, before_send=before_send
                                )
                    except TimeoutError as exc:
                        raise ApiUnavailable(
                            f"{method} {path}: no answer within {self._timeout:g}s",
                            reason="Timeout",
                        ) from exc
                    code = str(answer.status_code)
                    if answer.status_code == 401 and attempt == 1:
                        await exchange.aclose()
                        self._record(method, code, started)
                        with _credentials_failure(method, path):
                            await self._reauthenticate()
                        started = self._clock()
                        continue
                    stack.push_async_exit(exchange)
                    break
                if answer.status_code >= 400:
                    if isinstance(answer, StreamedAnswer):
                        # The Status body names the problem; without it the code still does.
                        with contextlib.suppress(ApiError, TimeoutError):
                            with anyio.fail_after(self._timeout):
                                await answer.read()
                    raise error_from_response(
                        answer.status_code,
                        answer.reason_phrase,
                        answer.content,
                        answer.headers.get("Retry-After"),
                    )
                self._record(method, code, started)
                code = ""
            finally:
                if code:
                    self._record(method, code, started)
            yield answer

    async def _current_transport(self, method: str, path: str) -> Transport:
        """The transport, built on first use and again when the client certificate changed."""
        if self._closed:
            raise ApiUnavailable(f"{method} {path}: the client is closed", reason="ClientClosed")
        credentials = self._credentials
        if self._transport is not None and (
            self._transport_tls_generation != credentials.tls_generation
        ):
            await self._transport.aclose()  # open watches keep it until they end
            self._transport = None
        if self._transport is None:
            server = credentials.server
            self._transport_tls_generation = credentials.tls_generation
            self._transport = Transport(
                server,
                ssl_context=(await credentials.ssl_context())
                if server.startswith("https:")
                else True,
                server_hostname=credentials.tls_server_name,
                proxy=credentials.proxy,
                limits=self.limits,
            )
        return self._transport

    @staticmethod
    def _headers(authorization: str | None, content_type: str | None) -> dict[str, str]:
        headers = {"User-Agent": _USER_AGENT, "Accept": _JSON_CONTENT_TYPE}
        if authorization:
            headers["Authorization"] = authorization
        if content_type is not None:
            headers["Content-Type"] = content_type
        return headers

    async def _reauthenticate(self) -> None:
        """Re-read credentials (rotated token, exec plugin) and start a new transport (client
        certificates may have rotated too); open watches keep the old one until they end.
        Concurrent 401s re-read once."""
        generation = self._auth_generation
        async with self._auth_lock:
            if generation != self._auth_generation:
                return
            self._log.info("api_unauthorized_reauthenticating")
            await self._credentials.reauthenticate()
            if self._transport is not None:
                await self._transport.aclose()
                self._transport = None
            self._auth_generation += 1

    async def _json(
        self,
        method: str,
        res: Resource,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = _JSON_CONTENT_TYPE,
        fence: WriteFence | None = None,
    ) -> JSON:
        """A non-streaming request on *res*, returning the decoded JSON object."""
        async with self._call(
            method,
            _path(res, namespace, name, subresource),
            params=params,
            body=body,
            content_type=content_type,
            fence=fence,
        ) as answer:
            return await _decode_large_object(answer)

    # --- verbs ------------------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        """GET one object; raises :class:`NotFound` when it does not exist."""
        return _with_type(res, await self._json("GET", res, namespace=namespace, name=name))

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> ListResult:
        """One LIST page, keeping the collection's resourceVersion (a watch starts there).

        Items get ``apiVersion``/``kind`` filled in (the API omits them inside lists).
        """
        params = _selector_params(label_selector, field_selector)
        if limit:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        elif resource_version is not None:
            params["resourceVersion"] = resource_version
        data = await self._json("GET", res, namespace=namespace, params=params)
        raw_items = _field(data, "items", list, f"a LIST of {res.kind}")
        if not all(_is_object(item) for item in raw_items):
            raise _shape_error(f"a LIST of {res.kind} holds an item that is not an object")
        items = [_with_type(res, item) for item in raw_items]
        meta = _field(data, "metadata", dict, f"a LIST of {res.kind}")
        return ListResult(
            items=items,
            resource_version=str(meta.get("resourceVersion") or ""),
            continue_token=str(meta["continue"]) if meta.get("continue") else None,
        )

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        page_size: int | None = 500,
        transform: Callable[[JSON], JSON] | None = None,
    ) -> ListResult:
        """LIST every page (``limit``/``continue``), returning the first page's resourceVersion.

        All pages of one paged LIST are a single snapshot, so the first page's resourceVersion
        is the whole list's. When the snapshot expires between pages (410 on a continue
        token, under heavy churn), the list is taken again in one unpaged request, as
        client-go's pager does. *transform* is applied to each page's items as the page
        arrives (an informer's trim), so that the whole list is never held untrimmed.
        """
        list_selected = functools.partial(
            self.list, res, namespace, label_selector=label_selector, field_selector=field_selector
        )

        def kept(items: list[JSON]) -> list[JSON]:
            return items if transform is None else [transform(item) for item in items]

        page = await list_selected(limit=page_size, resource_version=resource_version)
        items = kept(page.items)
        rv = page.resource_version
        try:
            while page.continue_token:
                page = await list_selected(limit=page_size, continue_token=page.continue_token)
                items.extend(kept(page.items))
        except Gone as exc:
            self._log.info(
                "list_continue_expired_listing_unpaged", resource=str(res), error=str(exc)
            )
            del items
            full = await list_selected()
            return ListResult(items=kept(full.items), resource_version=full.resource_version)
        return ListResult(items=items, resource_version=rv, continue_token=None)

    @contextlib.asynccontextmanager
    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        inactivity_timeout: float | Literal["default"] | None = "default",
    ) -> AsyncIterator[WatchStream]:
        """Open a watch from *resource_version*; iterate the yielded :class:`WatchStream`.

        Opening raises typed errors (:class:`Gone` on 410). *timeout_seconds* asks the server
        to end the stream cleanly (a random value in [300, 600) when None, as client-go does,
        so many watchers do not reconnect together). *inactivity_timeout* defaults to the
        client's ``watch_inactivity_timeout``; ``None`` disables it.
        """
        params: dict[str, str] = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(
                timeout_seconds if timeout_seconds is not None else random.randrange(300, 600)
            ),
        }
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        params.update(_selector_params(label_selector, field_selector))
        inactivity = (
            self.watch_inactivity_timeout if inactivity_timeout == "default" else inactivity_timeout
        )
        async with self._call("GET", _path(res, namespace), params=params, stream=True) as answer:
            if not isinstance(answer, StreamedAnswer):
                raise TypeError(f"a watch needs a streamed answer, not {answer!r}")
            stream = WatchStream(answer.lines(), inactivity)
            try:
                yield stream
            finally:
                await stream.aclose()

    async def create(
        self,
        res: Resource,
        body: JSON,
        namespace: str | None = None,
        *,
        fence: WriteFence | None = None,
    ) -> JSON:
        """POST a new object; raises :class:`AlreadyExists` when the name is taken. *fence*:
        a leader-only write, sent only while it holds (see :meth:`_call`)."""
        ns = namespace or _namespace_of(res, body)
        return await self._json("POST", res, namespace=ns, body=_typed_body(res, body), fence=fence)

    async def replace(self, res: Resource, body: JSON, *, subresource: str | None = None) -> JSON:
        """PUT the whole object (optimistic concurrency on ``metadata.resourceVersion``)."""
        return await self._json(
            "PUT",
            res,
            namespace=_namespace_of(res, body),
            name=_name_of(body),
            subresource=subresource,
            body=_typed_body(res, body),
        )

    async def apply(
        self,
        res: Resource,
        body: JSON,
        *,
        field_manager: str,
        force: bool = False,
        subresource: str | None = None,
        fence: WriteFence | None = None,
    ) -> JSON:
        """Server-side apply *body* as *field_manager* (create-or-update of the fields we own).

        ``force`` takes over fields another manager owns; use it only for fields that are
        ours by design. Apply ``/status`` with ``subresource="status"``. *fence*: a
        leader-only write, sent only while it holds (see :meth:`_call`).
        """
        params = {"fieldManager": field_manager}
        if force:
            params["force"] = "true"
        return await self._json(
            "PATCH",
            res,
            namespace=_namespace_of(res, body),
            name=_name_of(body),
            subresource=subresource,
            params=params,
            body=_typed_body(res, body),
            content_type=_APPLY_CONTENT_TYPE,
            fence=fence,
        )

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: JSON | builtins.list[Any],
        *,
        namespace: str | None = None,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        fence: WriteFence | None = None,
    ) -> JSON:
        """PATCH with a JSON merge patch (dict), JSON patch (list) or strategic merge patch.
        *fence*: a leader-only write, sent only while it holds (see :meth:`_call`)."""
        if patch_type not in _PATCH_CONTENT_TYPES:
            raise ValueError(f"unknown patch type {patch_type!r}: use merge, json or strategic")
        params = {"fieldManager": field_manager} if field_manager else None
        return await self._json(
            "PATCH",
            res,
            namespace=namespace,
            name=name,
            subresource=subresource,
            params=params,
            body=patch,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
            fence=fence,
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        preconditions: Mapping[str, str] | None = None,
        propagation_policy: str | None = None,
        fence: WriteFence | None = None,
    ) -> JSON:
        """DELETE an object; raises :class:`NotFound` when it is already gone.

        *preconditions* (``{"uid": ..., "resourceVersion": ...}``) make the delete fail with
        :class:`Conflict` if the object was replaced or changed meanwhile.
        *propagation_policy* is ``Foreground``, ``Background`` or ``Orphan``. Returns what the
        server answered: the object (still there while finalizers run) or a ``Status``.
        *fence*: a leader-only write, sent only while it holds (see :meth:`_call`).
        """
        options: JSON = {}
        if preconditions:
            options["preconditions"] = dict(preconditions)
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        body = {"apiVersion": "v1", "kind": "DeleteOptions", **options} if options else None
        return await self._json(
            "DELETE", res, namespace=namespace, name=name, body=body, fence=fence
        )

    async def served_versions(self, group: str) -> builtins.list[str]:
        """The versions the server serves for API *group*, preferred first; [] if unserved.

        Lets callers pick among versions of a CRD group (e.g. Kueue) at start-up.
        """
        if not group:
            async with self._call("GET", "/api") as answer:
                listed = _field(_decode_object(answer), "versions", list, "the core API's versions")
                return [str(v) for v in listed if isinstance(v, str)]
        try:
            async with self._call("GET", f"/apis/{_segment(group)}") as answer:
                data = _decode_object(answer)
        except NotFound:
            return []
        what = f"API group {group}"
        versions = [
            str(v["version"])
            for v in _field(data, "versions", list, what)
            if isinstance(v, dict) and v.get("version")
        ]
        preferred = _field(data, "preferredVersion", dict, what).get("version")
        if preferred in versions:
            versions.remove(preferred)
            versions.insert(0, preferred)
        return versions

    async def server_version(self) -> JSON:
        """The API server's ``/version`` answer (``major``, ``minor``, ``gitVersion``, ...)."""
        async with self._call("GET", "/version") as answer:
            return _decode_object(answer)

    async def served_resources(self, group: str, version: str) -> builtins.list[str]:
        """The resource names (plurals, no subresources) the server serves in *group*
        *version* (the core group when *group* is empty); [] if it serves no such group
        version. Tells apart kinds added to a group in a later release (Kueue's
        ``topologies``, ValidatingAdmissionPolicies)."""
        path = f"/apis/{_segment(group)}/{_segment(version)}" if group else f"/api/{version}"
        try:
            async with self._call("GET", path) as answer:
                data = _decode_object(answer)
        except NotFound:
            return []
        return [
            str(r["name"])
            for r in data.get("resources") or []
            if isinstance(r, dict) and r.get("name") and "/" not in str(r["name"])
        ]

    async def served_kinds(self, group: str, version: str) -> builtins.list[Resource]:
        """The resources (plural, kind, scope; no subresources) the server serves in *group*
        *version*; [] if it serves no such group version. For groups whose kinds are not
        known in advance (Cluster API's infrastructure providers)."""
        path = f"/apis/{_segment(group)}/{_segment(version)}" if group else f"/api/{version}"
        try:
            async with self._call("GET", path) as answer:
                data = _decode_object(answer)
        except NotFound:
            return []
        return [
            Resource(group, version, str(r["kind"]), str(r["name"]), bool(r.get("namespaced")))
            for r in data.get("resources") or []
            if isinstance(r, dict) and r.get("name") and r.get("kind") and "/" not in str(r["name"])
        ]


# --- helpers --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _segment(value: str) -> str:
    """*value* percent-encoded as one path segment: ``/`` included, and ``.``/``..`` too,
    so no name can reach another path (docs/runtime.md, "Transport")."""
    encoded = quote(value, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


def _path(
    res: Resource,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The encoded URL path of *res* (``/api/v1/namespaces/ns/configmaps/x``)."""
    root = "/apis/" if res.group else "/api/"
    relative = res.relative_path(
        _segment(namespace) if namespace else namespace,
        _segment(name) if name else name,
        subresource,
    )
    return f"{root}{res.api_version}/{relative}"


def _selector_params(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    """The query parameters for the selectors that are set (LIST and WATCH share them)."""
    params: dict[str, str] = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


async def _decode_large_object(answer: Answer | StreamedAnswer) -> JSON:
    """:func:`_decode_object`, yielding to the event loop while a large body (a big LIST)
    decodes (``runtime.jsondecode``)."""
    try:
        data = await decode_object(answer.content)
    except ValueError as exc:
        raise ApiError(
            f"the API server answered {answer.status_code} with a body that is not JSON",
            status=answer.status_code,
            reason="InvalidResponse",
        ) from exc
    return _ensure_object(answer, data)


def _decode_object(answer: Answer | StreamedAnswer) -> JSON:
    """Decode a JSON object body; anything else is a protocol error, not a crash."""
    try:
        data = loads(answer.content)
    except ValueError as exc:
        raise ApiError(
            f"the API server answered {answer.status_code} with a body that is not JSON",
            status=answer.status_code,
            reason="InvalidResponse",
        ) from exc
    return _ensure_object(answer, data)


def _ensure_object(answer: Answer | StreamedAnswer, data: Any) -> JSON:
    if not isinstance(data, dict):
        raise ApiError(
            f"the API server answered {answer.status_code} with JSON that is not an object",
            status=answer.status_code,
            reason="InvalidResponse",
        )
    return data


def _encoded(method: str, path: str, body: Any) -> bytes:
    """*body* as compact JSON; a body JSON cannot hold (nested too deeply, say, when it
    echoes an object the server sent) is refused as :class:`UnsendableRequest`."""
    try:
        return dumps(body)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UnsendableRequest(
            f"{method} {path}: the request body cannot be encoded as JSON ({exc}); nothing "
            "was sent",
            reason="UnsendableRequest",
        ) from exc


def _shape_error(what: str) -> ApiError:
    return ApiError(
        f"the API server answered with {what}; retrying (check the server or a proxy between)",
        reason="InvalidResponse",
    )


def _field(data: JSON, key: str, kind: type[Any], what: str) -> Any:
    """``data[key]`` if it is a *kind* (an empty one when absent or null); any other value
    is a typed error, never a ``TypeError`` later on."""
    value = data.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise _shape_error(f"{what} whose {key} is a {type(value).__name__}")
    return value


def _is_object(item: Any) -> bool:
    """An API object as a list holds it: a JSON object whose metadata, if any, is one too."""
    return isinstance(item, dict) and isinstance(item.get("metadata", {}), dict)


def _with_type(res: Resource, obj: JSON) -> JSON:
    """Fill ``apiVersion``/``kind`` where the API leaves them out (list items)."""
    if "apiVersion" not in obj:
        obj["apiVersion"] = res.api_version
    if "kind" not in obj:
        obj["kind"] = res.kind
    return obj


def _typed_body(res: Resource, body: JSON) -> JSON:
    """A copy of *body* with ``apiVersion``/``kind`` set, as writes (and apply) require."""
    return {"apiVersion": res.api_version, "kind": res.kind, **body}


def _name_of(body: JSON) -> str:
    name = (body.get("metadata") or {}).get("name")
    if not name:
        raise ValueError("the object has no metadata.name: set it before writing")
    return str(name)


def _namespace_of(res: Resource, body: JSON) -> str | None:
    if not res.namespaced:
        return None
    namespace = (body.get("metadata") or {}).get("namespace")
    if not namespace:
        raise ValueError(f"{res.kind} is namespaced: set metadata.namespace or pass namespace")
    return str(namespace)
